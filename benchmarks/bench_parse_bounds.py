"""Parser resource bounds under hostile pods (issue 13 items 3-4), through `PodScrapeSource`.

Run: .venv/bin/python benchmarks/bench_parse_bounds.py [--big-scrapes 8] [--rss-scrapes 1000]
(writes benchmarks/results/parse_bounds.json)

Pods are served by another process (a minimal asyncio HTTP/1.1 responder on loopback, pinned
to core 1 when possible; the measured process to core 0), so the server never shares the
measured event loop.

1. Event-loop lag while an 8 MB page arrives. 20 other targets (one vLLM pod each) are read
   back to back while one target's pod serves a 7.9 MB page, scraped ``--big-scrapes``
   times; a ticker task sleeping 1 ms records how late it wakes (the loop's lag). Two large
   pages: "big-wanted" (~200k series of `vllm:num_requests_waiting`: refused by the line
   bound) and "big-other" (~230k series of another family, then the vLLM page: read). Each
   is measured with the page parsed inline on the loop and in the parse thread
   (`ScrapeConfig.thread_parse_bytes`). Goal: lag p99 <= 50 ms. The first row scrapes the
   normal vLLM page instead: the lag the other targets cause by themselves.
2. RSS after ``--rss-scrapes`` scrapes of a hostile pod whose page carries a new 4 MB label
   value on a wanted series every time (the page is valid: the pod is read). Goal: <= +20 MB
   over the RSS after warm-up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).parents[1]
PAGE = (ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt").read_text()
BIG_BYTES = 7_900_000  # under ScrapeConfig.max_page_bytes (8 MiB)
LABEL_BYTES = 4 * 1024 * 1024


def _response(body: str) -> bytes:
    data = body.encode()
    head = f"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def _fill(line: str, budget: int) -> tuple[str, int]:
    """Lines ``line.format(i)`` for i = 0, 1, ... up to ``budget`` bytes; (text, series)."""
    lines: list[str] = []
    size = 0
    while size < budget:
        lines.append(line.format(len(lines)))
        size += len(lines[-1])
    return "".join(lines[:-1]), len(lines) - 1


def _pages() -> dict[bytes, bytes]:
    wanted, _ = _fill('vllm:num_requests_waiting{{engine="{}"}} 1\n', BIG_BYTES - 64)
    other, _ = _fill('other_metric{{series="{}"}} 1.0\n', BIG_BYTES - len(PAGE))
    return {
        b"/small": _response(PAGE),
        b"/big-wanted": _response("# TYPE vllm:num_requests_waiting gauge\n" + wanted),
        b"/big-other": _response(other + PAGE),
    }


class _Pod(asyncio.Protocol):
    """Answers each GET on a kept-alive connection by its path; /hostile is new each time."""

    def __init__(self, pages: dict[bytes, bytes], counter: list[int]) -> None:
        self.pages = pages
        self.counter = counter
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            request, self.buffer = self.buffer[:end], self.buffer[end + 4 :]
            path = request.split(b" ", 2)[1].split(b"?")[0]
            assert self.transport is not None
            if path == b"/hostile":
                self.counter[0] += 1
                label = f"{self.counter[0]:010d}" + "x" * LABEL_BYTES
                line = f'vllm:num_requests_waiting{{engine="9",junk="{label}"}} 1\n'
                self.transport.write(_response(PAGE + line))
            else:
                self.transport.write(self.pages[path])


def serve(port_queue: multiprocessing.Queue[int]) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})
    pages = _pages()
    counter = [0]

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(lambda: _Pod(pages, counter), "127.0.0.1", 0)
        port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(run())


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0


async def lag_run(port: int, big: str, in_thread: bool, scrapes: int) -> dict[str, object]:
    from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
    from autoscaler.metrics.source import PodEndpoint

    config = ScrapeConfig(timeout_s=30.0, thread_parse_bytes=256 * 1024 if in_thread else 1 << 40)
    source = PodScrapeSource(config)
    base = f"http://127.0.0.1:{port}"
    small = [[PodEndpoint(f"small-{i}", f"{base}/small?t={i}")] for i in range(20)]
    large = [PodEndpoint("big", f"{base}/{big}")]
    lags: list[float] = []
    small_read_s: list[float] = []
    big_read_s: list[float] = []
    outcome: list[str] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lags.append(time.perf_counter() - start - 0.001)

    async def others() -> None:
        t = 0.0
        while not stop.is_set():
            t += 1.0
            for i, pods in enumerate(small):
                start = time.perf_counter()
                await source.read(f"small-{i}", pods, t)
                small_read_s.append(time.perf_counter() - start)

    try:
        for i, pods in enumerate(small):  # warm: connections open, engines known
            await source.read(f"small-{i}", pods, 0.0)
        tasks = [asyncio.create_task(ticker()), asyncio.create_task(others())]
        await asyncio.sleep(0.2)
        lags.clear()
        small_read_s.clear()
        for k in range(scrapes):
            start = time.perf_counter()
            reading = await source.read("big", large, float(k))
            big_read_s.append(time.perf_counter() - start)
            outcome.append("read" if reading.pods_read else reading.errors[0][:120])
        stop.set()
        await asyncio.gather(*tasks)
    finally:
        await source.close()
    return {
        "page": big,
        "parse": "thread" if in_thread else "inline",
        "lag_p50_ms": round(_pct(lags, 0.50) * 1e3, 2),
        "lag_p99_ms": round(_pct(lags, 0.99) * 1e3, 2),
        "lag_max_ms": round(max(lags, default=0.0) * 1e3, 2),
        "lag_samples": len(lags),
        "other_read_p99_ms": round(_pct(small_read_s, 0.99) * 1e3, 2),
        "other_reads": len(small_read_s),
        "big_scrape_median_ms": round(statistics.median(big_read_s) * 1e3, 1),
        "big_outcome": outcome[-1],
    }


def _rss_mb() -> tuple[float, float]:
    """(VmRSS, VmHWM) of this process in MB."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


async def rss_run(port: int, scrapes: int) -> dict[str, object]:
    from autoscaler.metrics import exposition
    from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
    from autoscaler.metrics.source import PodEndpoint

    source = PodScrapeSource(ScrapeConfig(timeout_s=30.0))
    base = f"http://127.0.0.1:{port}"
    normal = [PodEndpoint("pod", f"{base}/small")]
    hostile = [PodEndpoint("pod", f"{base}/hostile")]
    samples: list[dict[str, float]] = []
    read = 0
    try:
        for t in range(5):
            await source.read("t", normal, float(t))
        for t in range(3):  # warm-up of the hostile path (buffers, thread)
            await source.read("t", hostile, 10.0 + t)
        start_rss, _ = _rss_mb()
        for k in range(1, scrapes + 1):
            reading = await source.read("t", hostile, 20.0 + k)
            read += reading.pods_read
            if k % max(1, scrapes // 10) == 0:
                rss, _ = _rss_mb()
                samples.append({"scrapes": k, "rss_mb": round(rss, 1)})
        end_rss, peak = _rss_mb()
    finally:
        await source.close()
    return {
        "scrapes": scrapes,
        "label_bytes": LABEL_BYTES,
        "pod_read_on": read,
        "rss_start_mb": round(start_rss, 1),
        "rss_end_mb": round(end_rss, 1),
        "rss_growth_mb": round(end_rss - start_rss, 1),
        "rss_peak_mb": round(peak, 1),
        "cache_bytes_end": exposition.cache_bytes(),
        "cache_budget_bytes": exposition.CACHE_BUDGET_BYTES,
        "rss_over_time": samples,
    }


async def bench(port: int, big_scrapes: int, rss_scrapes: int) -> dict[str, Any]:
    lag = [await lag_run(port, "small", False, big_scrapes)]  # the floor: no large page
    lag += [
        await lag_run(port, big, in_thread, big_scrapes)
        for big in ("big-wanted", "big-other")
        for in_thread in (False, True)
    ]
    return {"lag": lag, "rss": await rss_run(port, rss_scrapes)}


def report(result: dict[str, Any]) -> None:
    print("event-loop lag while a 7.9 MB page arrives (20 other targets read meanwhile)")
    print(
        f"{'page':12} {'parse':7} {'lag p50':>8} {'lag p99':>8} {'lag max':>8} "
        f"{'other p99':>9} {'big scrape':>10} {'ticks':>6}  outcome"
    )
    for row in result["lag"]:
        print(
            f"{row['page']:12} {row['parse']:7} {row['lag_p50_ms']:6.1f}ms"
            f" {row['lag_p99_ms']:6.1f}ms {row['lag_max_ms']:6.1f}ms"
            f" {row['other_read_p99_ms']:7.1f}ms {row['big_scrape_median_ms']:8.1f}ms"
            f" {row['lag_samples']:6}  {row['big_outcome'][:60]}"
        )
    rss = result["rss"]
    print(
        f"RSS after {rss['scrapes']} scrapes of a pod with a new 4 MB label value each time:"
        f" {rss['rss_start_mb']} -> {rss['rss_end_mb']} MB ({rss['rss_growth_mb']:+} MB),"
        f" peak {rss['rss_peak_mb']} MB; parser caches {rss['cache_bytes_end']} bytes;"
        f" pod read on {rss['pod_read_on']} scrapes"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--big-scrapes", type=int, default=8)
    parser.add_argument("--rss-scrapes", type=int, default=1000)
    args = parser.parse_args()
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=serve, args=(queue,), daemon=True)
    proc.start()
    try:
        port = queue.get(timeout=60)
        if hasattr(os, "sched_setaffinity"):
            os.sched_setaffinity(0, {0})
        result = asyncio.run(bench(port, args.big_scrapes, args.rss_scrapes))
    finally:
        proc.terminate()
        proc.join(timeout=10)
    report(result)
    out = ROOT / "benchmarks" / "results" / "parse_bounds.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {"command": "benchmarks/bench_parse_bounds.py", **vars(args), **result}
    out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
