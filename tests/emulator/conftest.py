from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
import pytest

from autoscaler.emulator import EmulatorFleet
from autoscaler.sim.replica import HardwareProfile


def tiny_profile(
    max_num_seqs: int = 256, kv_capacity_tokens: int = 445_000, name: str = "tiny"
) -> HardwareProfile:
    """8B/H100 step costs with a small batch or KV cache, to provoke queueing and pressure."""
    return HardwareProfile(
        name, 6.5, 0.015, 0.047, 0.029, max_num_seqs, 8192, kv_capacity_tokens, 1.0
    )


@pytest.fixture
async def fleet() -> AsyncIterator[EmulatorFleet]:
    async with EmulatorFleet(speed=1.0) as f:
        yield f


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s
