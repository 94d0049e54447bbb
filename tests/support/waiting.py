"""Bounded real-time waits for integration tests (unit tests use a fake clock instead)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def until(pred: Callable[[], bool], deadline_s: float, what: str) -> None:
    """Poll ``pred`` every 50 ms; fail naming ``what`` after ``deadline_s`` seconds."""
    end = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {deadline_s}s waiting for {what}")
        await asyncio.sleep(0.05)
