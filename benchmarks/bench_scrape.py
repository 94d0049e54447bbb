"""Pod scrapes per second on one core over loopback HTTP (real aiohttp servers).

Run: .venv/bin/python benchmarks/bench_scrape.py [--pods 50] [--ticks 40]
The pod servers run in a separate process (the other core) so the measured process only
scrapes, parses and aggregates. Writes benchmarks/results/scrape.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import time
from pathlib import Path

ROOT = Path(__file__).parents[1]
PAGE = (ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt").read_bytes()


def serve(port_queue: multiprocessing.Queue[int], n_servers: int) -> None:
    from aiohttp import web

    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=PAGE, content_type="text/plain")

    async def run() -> None:
        ports = []
        for _ in range(n_servers):
            app = web.Application()
            app.router.add_get("/metrics", handler)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            ports.append(runner.addresses[0][1])
        for p in ports:
            port_queue.put(p)
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
        for tick in range(ticks):
            reading = await source.read("bench", endpoints, float(tick + 1))
            failures += reading.pods_expected - reading.pods_read
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
        "wall_s": wall,
        "cpu_s": cpu,
        "scrapes_per_s_wall": scrapes / wall,
        "scrapes_per_cpu_s": scrapes / cpu,
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
        f"{'pods':>5} {'ticks':>5} {'scrapes':>8} {'fail':>5} {'scrapes/s':>10} {'per CPU s':>10}"
    )
    print(
        f"{result['pods']:5d} {result['ticks']:5d} {result['scrapes']:8d} "
        f"{result['failures']:5d} {result['scrapes_per_s_wall']:10.0f} "
        f"{result['scrapes_per_cpu_s']:10.0f}"
    )
    out = ROOT / "benchmarks" / "results" / "scrape.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
