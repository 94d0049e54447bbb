"""Pod scrapes per second on one core over loopback HTTP.

Run: .venv/bin/python benchmarks/bench_scrape.py [--pods 50] [--ticks 40] [--servers 4]

The measured process (pinned to core 0) only scrapes, parses and aggregates through
`PodScrapeSource.read`, exactly as the control loop does. The pods are served by another
process pinned to core 1, so the server side never competes for the scraper's core. That
server is a minimal asyncio HTTP/1.1 keep-alive responder (precomputed responses), not
aiohttp: an aiohttp server on one core tops out near the rate being measured, and the
benchmark would then measure the server. Each pod's page is the vLLM V1 fixture (496
lines, 46 kB) with its counters and buckets advanced on every request (16 precomputed
variants per pod, so pages differ between scrapes as a live engine's do).

Reports wall-clock scrapes/s and scrapes per CPU-second of the scraper process; the goal
(2,000 pod scrapes/s on one core) is about the latter when the scraper's core is not
saturated, and both are printed. Writes benchmarks/results/scrape.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
PAGE = (ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt").read_text()
VARIANTS = 16
_CUMULATIVE = re.compile(r"^(\S+(?:_bucket|_count|_sum|_total)(?:\{[^}]*\})?) (\S+)$", re.M)


def variants() -> list[bytes]:
    """HTTP responses whose cumulative values grow by 10 per variant (buckets stay monotone)."""
    out = []
    for k in range(VARIANTS):
        page = _CUMULATIVE.sub(lambda m, k=k: f"{m.group(1)} {float(m.group(2)) + 10 * k}", PAGE)
        body = page.encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append(head + body)
    return out


class _Pod(asyncio.Protocol):
    """Answers every GET on a kept-alive connection with the next page variant."""

    def __init__(self, responses: list[bytes]) -> None:
        self.responses = responses
        self.sent = 0
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            self.buffer = self.buffer[end + 4 :]
            assert self.transport is not None
            self.transport.write(self.responses[self.sent % len(self.responses)])
            self.sent += 1


def serve(port_queue: multiprocessing.Queue[int], n_servers: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})  # the pods: the other core
    responses = variants()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(n_servers):
            server = await loop.create_server(lambda: _Pod(responses), "127.0.0.1", 0)
            port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(run())


async def bench(ports: list[int], pods: int, ticks: int) -> dict[str, float]:
    from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
    from autoscaler.metrics.source import PodEndpoint

    endpoints = [
        PodEndpoint(f"pod-{i}", f"http://127.0.0.1:{ports[i % len(ports)]}/metrics?pod={i}")
        for i in range(pods)
    ]
    source = PodScrapeSource(ScrapeConfig(timeout_s=5.0, max_concurrency=64))
    try:
        await source.read("warmup", endpoints, 0.0)
        cpu0, wall0 = time.process_time(), time.perf_counter()
        failures = 0
        signals = 0
        for tick in range(ticks):
            reading = await source.read("bench", endpoints, float(tick + 1))
            failures += reading.pods_expected - reading.pods_read
            signals = len(reading.signals)
        wall = time.perf_counter() - wall0
        cpu = time.process_time() - cpu0
    finally:
        await source.close()
    scrapes = pods * ticks
    return {
        "pods": pods,
        "ticks": ticks,
        "scrapes": scrapes,
        "failures": failures,
        "signals_last_tick": signals,
        "wall_s": wall,
        "cpu_s": cpu,
        "scrapes_per_s_wall": scrapes / wall,
        "scrapes_per_cpu_s": scrapes / cpu,
        "scraper_core_busy": cpu / wall,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--servers", type=int, default=4)
    args = parser.parse_args()
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=serve, args=(queue, args.servers), daemon=True)
    proc.start()
    try:
        ports = [queue.get(timeout=30) for _ in range(args.servers)]
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {0})  # the scraper: one core
        result = asyncio.run(bench(ports, args.pods, args.ticks))
    finally:
        proc.terminate()
        proc.join(timeout=10)
    print(
        f"{'pods':>5} {'ticks':>5} {'scrapes':>8} {'fail':>5} {'scrapes/s':>10} "
        f"{'per CPU s':>10} {'core busy':>9}"
    )
    print(
        f"{result['pods']:5d} {result['ticks']:5d} {result['scrapes']:8d} "
        f"{result['failures']:5d} {result['scrapes_per_s_wall']:10.0f} "
        f"{result['scrapes_per_cpu_s']:10.0f} {result['scraper_core_busy']:8.0%}"
    )
    out = ROOT / "benchmarks" / "results" / "scrape.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
