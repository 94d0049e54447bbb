"""The reading end of a scrape worker's answers pipe, for tests that run `serve_pipes` on
real pipes (tests/metrics/test_scrape_workers.py, tests/demo/test_scrape_worker_process.py)."""

from __future__ import annotations

import asyncio
from typing import Any

from autoscaler.metrics.scrape_workers import _frames


class Frames(asyncio.Protocol):
    """The answers a worker writes, as messages."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.messages: list[Any] = []
        self.arrived = asyncio.Event()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.messages.extend(_frames(self.buffer))
        self.arrived.set()
