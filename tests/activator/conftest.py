from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from autoscaler.activator.config import parse_config
from autoscaler.activator.runtime import ActivatorProcess
from autoscaler.emulator import EmulatorFleet

StartActivator = Callable[..., Awaitable[ActivatorProcess]]


@pytest.fixture
async def fleet() -> AsyncIterator[EmulatorFleet]:
    async with EmulatorFleet(speed=1.0) as f:
        yield f


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as s:
        yield s


@pytest.fixture
async def start_activator() -> AsyncIterator[StartActivator]:
    """Start activators on 127.0.0.1 with a free port; stopped at teardown."""
    started: list[ActivatorProcess] = []

    async def start(config: dict[str, Any], **kw: Any) -> ActivatorProcess:
        kw.setdefault("probe_interval_s", 0.02)
        kw.setdefault("grace_s", 2.0)
        proc = ActivatorProcess(parse_config(config), host="127.0.0.1", port=0, **kw)
        await proc.start()
        started.append(proc)
        return proc

    yield start
    for proc in started:
        await proc.stop()


async def drop(tasks: list[asyncio.Task[Any]]) -> None:
    """Cancel client requests still held and collect every outcome (no stray errors)."""
    for t in tasks:
        t.cancel()
    for r in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(r, aiohttp.ClientResponse):
            r.release()
