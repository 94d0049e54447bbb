"""A real HTTP server answering PromQL queries with Prometheus' JSON shape, for tests of
how `PrometheusSource` batches and demultiplexes (no PromQL evaluation)."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator

from aiohttp import web

from autoscaler.metrics.prometheus import TARGET_LABEL

WAITING = {"a": 0.3, "b": 0.5, "c": 0.7}  # workload -> the value of every signal


class FakePrometheus:
    """Answers a grouped query with one series per workload named in its pod regex,
    a per-target query with one series; fails queries naming ``fail``."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        self.fail = "never-in-a-query"
        self.url = ""
        self.received = asyncio.Event()  # set by the first query
        self.hold: asyncio.Event | None = None  # when set: answers wait for it (slow)

    async def handle(self, request: web.Request) -> web.Response:
        query = str((await request.post())["query"])
        self.queries.append(query)
        self.received.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.fail in query:
            return web.json_response({"status": "error", "error": "bad"}, status=400)
        names = re.search(r'pod=~"\(?([^")]*)\)?-\.\*"', query)
        assert names is not None
        wanted = [n for n in names.group(1).split("|") if n in WAITING]
        if TARGET_LABEL in query:
            labels = [{"namespace": "ns", TARGET_LABEL: n} for n in wanted]
        else:
            labels = [{} for _ in wanted]
        result = [
            {"metric": lab, "value": [1.0, str(WAITING[n])]}
            for lab, n in zip(labels, wanted, strict=True)
        ]
        return web.json_response(
            {"status": "success", "data": {"resultType": "vector", "result": result}}
        )


@contextlib.asynccontextmanager
async def serve_fake_prometheus() -> AsyncIterator[FakePrometheus]:
    """A `FakePrometheus` on 127.0.0.1 (free port) for the ``with`` block."""
    fake = FakePrometheus()
    app = web.Application()
    app.router.add_post("/api/v1/query", fake.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield fake
    finally:
        await runner.cleanup()
