"""CPU per pod scrape over loopback HTTP: the aiohttp client (before) and `PageClient` (now),
side by side in one run.

Run: nice -n 10 .venv/bin/python benchmarks/bench_scrape.py [--pods 50] [--ticks 8] [--rounds 7]

The measured process (pinned to core 0) runs `PodScrapeSource.read` exactly as the
control loop does (GET on a kept-alive connection, body, parse, adapter, rates and
quantiles), once with the pod client this repository had before (`AiohttpScrapeSource`
below: aiohttp `ClientSession`, the old `_fetch` verbatim) and once with `PageClient`;
and each client's GET alone (body read, no parse), so the table splits a scrape into
HTTP and the rest. The pods are served by another process pinned to core 1, so the server
side never competes for the scraper's core. That server is a minimal asyncio HTTP/1.1
keep-alive responder (precomputed responses), not aiohttp: an aiohttp server on one core
tops out near the rate being measured, and the benchmark would then measure the server.
Each pod's page is the vLLM V1 fixture (496 lines, 46 kB) with its counters and buckets
advanced on every request (16 precomputed variants per pod, so pages differ between
scrapes as a live engine's do).

Rows are timed in interleaved rounds (each round runs every row for ``--ticks`` ticks of
all pods), in CPU time of the scraper process, so load on the shared VM hits every row
alike; "vs before" is the median over rounds of the per-round ratio. Also reported: the
wall-clock scrape rate and how busy the scraper's core was. Writes
benchmarks/results/scrape.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp
import yarl

from autoscaler.errors import AutoscalerError
from autoscaler.metrics.page_client import ACCEPT
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint

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


class AiohttpScrapeSource(PodScrapeSource):
    """`PodScrapeSource` with the aiohttp client it had before `PageClient` (verbatim)."""

    def __init__(self, config: ScrapeConfig | None = None) -> None:
        super().__init__(config)
        self._session: aiohttp.ClientSession | None = None
        self._urls: dict[str, yarl.URL] = {}

    def _aiohttp(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.config.max_concurrency, keepalive_timeout=30.0, ttl_dns_cache=60
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=self.config.timeout_s),
                headers={"Accept": ACCEPT},
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding"),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super().close()

    async def _fetch(self, pod: PodEndpoint) -> bytes:
        session = self._aiohttp()
        limit = self.config.max_page_bytes
        url = self._urls.get(pod.url)
        if url is None:
            if len(self._urls) >= 65536:
                self._urls.clear()
            url = self._urls[pod.url] = yarl.URL(pod.url)
        async with self._semaphore, session.get(url) as resp:
            if resp.status != 200:
                raise AutoscalerError(f"HTTP {resp.status}")
            declared = resp.content_length
            if declared is not None and declared > limit:
                raise AutoscalerError(f"page larger than {limit} bytes")
            if declared is not None:
                body = await resp.read()
            else:
                chunks: list[bytes] = []
                size = 0
                while chunk := await resp.content.readany():
                    size += len(chunk)
                    if size > limit:
                        raise AutoscalerError(f"page larger than {limit} bytes")
                    chunks.append(chunk)
                body = b"".join(chunks)
            return body


ROWS = (
    ("GET only, aiohttp (before)", "old", False),
    ("GET only, PageClient (now)", "new", False),
    ("scrape: GET + parse + signals, aiohttp (before)", "old", True),
    ("scrape: GET + parse + signals, PageClient (now)", "new", True),
)


async def bench(ports: list[int], pods: int, ticks: int, rounds: int) -> dict[str, Any]:
    endpoints = [
        PodEndpoint(f"pod-{i}", f"http://127.0.0.1:{ports[i % len(ports)]}/metrics?pod={i}")
        for i in range(pods)
    ]
    config = ScrapeConfig(timeout_s=5.0, max_concurrency=64)
    sources = {"old": AiohttpScrapeSource(config), "new": PodScrapeSource(config)}
    cpu: dict[str, list[float]] = {name: [] for name, _, _ in ROWS}
    wall: dict[str, list[float]] = {name: [] for name, _, _ in ROWS}
    failures = dict.fromkeys(cpu, 0)
    signals = dict.fromkeys(cpu, 0)
    now = 0.0
    try:
        for source in sources.values():  # connections open, engines detected, layouts built
            for _ in range(3):
                now += 1.0
                await source.read("warmup", endpoints, now)
        for _ in range(rounds):
            for name, which, full in ROWS:
                source = sources[which]
                cpu0, wall0 = time.process_time(), time.perf_counter()
                for _ in range(ticks):
                    now += 1.0
                    if full:
                        reading = await source.read(which, endpoints, now)
                        failures[name] += reading.pods_expected - reading.pods_read
                        signals[name] = len(reading.signals)
                    else:
                        bodies = await asyncio.gather(
                            *(source._fetch(p) for p in endpoints), return_exceptions=True
                        )
                        failures[name] += sum(not isinstance(b, bytes) for b in bodies)
                wall[name].append(time.perf_counter() - wall0)
                cpu[name].append(time.process_time() - cpu0)
    finally:
        for source in sources.values():
            await source.close()
    scrapes = pods * ticks
    rows = []
    for name, _, full in ROWS:
        base = next(n for n, w, f in ROWS if w == "old" and f == full)
        ratios = [b / c for b, c in zip(cpu[base], cpu[name], strict=True)]
        cpu_s, wall_s = sum(cpu[name]), sum(wall[name])
        rows.append(
            {
                "row": name,
                "cpu_us_per_scrape": round(statistics.median(cpu[name]) / scrapes * 1e6, 1),
                "vs_before": round(statistics.median(ratios), 2),
                "vs_before_min": round(min(ratios), 2),
                "vs_before_max": round(max(ratios), 2),
                "scrapes_per_cpu_s": round(scrapes * rounds / cpu_s),
                "scrapes_per_s_wall": round(scrapes * rounds / wall_s),
                "core_busy": round(cpu_s / wall_s, 3),
                "failures": failures[name],
                "signals": signals[name],
            }
        )
    return {"pods": pods, "ticks_per_round": ticks, "rounds": rounds, "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=8, help="ticks per row per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--servers", type=int, default=4)
    args = parser.parse_args()
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=serve, args=(queue, args.servers), daemon=True)
    proc.start()
    try:
        ports = [queue.get(timeout=30) for _ in range(args.servers)]
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {0})  # the scraper: one core
        result = asyncio.run(bench(ports, args.pods, args.ticks, args.rounds))
    finally:
        proc.terminate()
        proc.join(timeout=10)
    print(
        f"{args.pods} pods x {args.ticks} ticks per row per round, {args.rounds} rounds; "
        "CPU of the scraper process; vs before = median of per-round ratios (min-max)"
    )
    print(
        f"{'row':50} {'CPU us/scrape':>13} {'vs before':>14} {'per CPU s':>9} "
        f"{'wall /s':>8} {'busy':>5} {'fail':>4}"
    )
    for r in result["rows"]:
        spread = f"{r['vs_before']:.2f}x ({r['vs_before_min']:.1f}-{r['vs_before_max']:.1f})"
        print(
            f"{r['row']:50} {r['cpu_us_per_scrape']:13.1f} {spread:>14} "
            f"{r['scrapes_per_cpu_s']:9d} {r['scrapes_per_s_wall']:8d} "
            f"{r['core_busy']:5.0%} {r['failures']:4d}"
        )
    result["command"] = (
        f"benchmarks/bench_scrape.py --pods {args.pods} --ticks {args.ticks} "
        f"--rounds {args.rounds} --servers {args.servers}"
    )
    out = ROOT / "benchmarks" / "results" / "scrape.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
