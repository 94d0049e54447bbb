"""CPU per pod scrape over loopback HTTP: a baseline revision's code and this tree, on
asyncio's event loop and on uvloop, side by side in one run.

Run: nice -n 10 .venv/bin/python benchmarks/bench_scrape.py [--baseline REV] [--rounds 7]
     [--pods 50] [--ticks 40] [--current REV]

Each measurement is a fresh worker process (pinned to core 0) that runs
`PodScrapeSource.read` exactly as the control loop does (GET on a kept-alive connection,
body, parse, adapter, per-pod windows, aggregate) for ``--ticks`` ticks of ``--pods``
pods, and each pod's GET alone (body read, no parse), so the table splits a scrape into
HTTP and the rest. The code measured is ``--baseline`` (a git revision, extracted with
``git archive``: asyncio only, as the code before uvloop support), this tree (or
``--current REV``) on asyncio's loop, the same on uvloop when it is installed, and on
uvloop with the GC settings `llm-autoscaler run` applies (``tune_gc``). The
pods are served by another process pinned to core 1, so the server side never competes
for the scraper's core: a minimal asyncio HTTP/1.1 keep-alive responder (precomputed
responses). Each pod's page is the vLLM V1 fixture (496 lines, 46 kB) with its counters
and buckets advanced on every request (16 precomputed variants per pod, so pages differ
between scrapes as a live engine's do); a request naming samples (``?name[]=``) is
answered as prometheus_client answers it (vLLM's ``/metrics``: the page restricted to
those samples, `filtering.restrict_page`). The tree's rows ask for the vLLM adapter's
families once a pod's engine is known, as `llm-autoscaler run` does; the row "whole
pages" is the same code with ``filter_families`` off (the 46 kB page every scrape, as
from a vLLM whose ``/metrics`` ignores the query).

Rows are measured in interleaved rounds (each round runs every configuration once), in
CPU time of the worker process, so load on the shared VM hits every row alike; "vs
baseline" is the median over rounds of the per-round ratio to the baseline's row of the
same kind. Also reported: the wall-clock scrape rate and how busy the worker's core was.
Writes benchmarks/results/scrape.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from revisions import extract, short_rev

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt").read_text()
VARIANTS = 16
# The code before issue 16's scrape-path work in this round (PageClient already in).
DEFAULT_BASELINE = "cc41b84"
_CUMULATIVE = re.compile(r"^(\S+(?:_bucket|_count|_sum|_total)(?:\{[^}]*\})?) (\S+)$", re.M)


def variants(count: int = VARIANTS, names: list[str] | None = None) -> list[bytes]:
    """``count`` HTTP responses whose cumulative values grow by 10 per variant (buckets
    stay monotone); with ``names``, of the page restricted to those samples."""
    page = PAGE
    if names is not None:
        from autoscaler.metrics.filtering import restrict_page

        page = restrict_page(PAGE, names)
    pieces = _CUMULATIVE.split(page)  # text, name, value, text, name, value, ..., text
    texts = [t + n + " " for t, n in zip(pieces[0::3], pieces[1::3], strict=False)]
    base = [float(v) for v in pieces[2::3]]
    out = []
    for k in range(count):
        parts = []
        for text, value in zip(texts, base, strict=True):
            parts.append(text)
            parts.append(str(value + 10 * k))
        parts.append(pieces[-1])
        body = "".join(parts).encode()
        head = (
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        out.append(head + body)
    return out


_FILTER = b"name%5B%5D="


def filter_key(head: bytes) -> bytes | None:
    """The ``name[]`` filter of the request whose head (request line first) is ``head``:
    its query text from the first ``name[]`` on, the same for every pod (a cache key);
    None for a whole-page request."""
    line = head[: head.find(b"\r\n")]
    at = line.find(_FILTER)
    return None if at < 0 else line[at : line.rfind(b" ")]


def filter_names(key: bytes) -> list[str]:
    """The sample names prometheus_client reads from a `filter_key`."""
    return parse_qs(key.decode("latin1")).get("name[]", [])


class Responses:
    """A pod's page variants as it answers a request: whole, or restricted to the request's
    ``name[]`` samples as prometheus_client does (made once per distinct filter)."""

    def __init__(self, count: int = VARIANTS) -> None:
        self.count = count
        self.whole = variants(count)
        self._filtered: dict[bytes, list[bytes]] = {}

    def to(self, head: bytes) -> list[bytes]:
        """The variants answering the request whose head (request line first) is ``head``."""
        key = filter_key(head)
        if key is None:
            return self.whole
        got = self._filtered.get(key)
        if got is None:
            names = filter_names(key)
            got = self._filtered[key] = variants(self.count, names)
        return got


class _Pod(asyncio.Protocol):
    """Answers every GET on a kept-alive connection with the next page variant: after the
    last one, the first again (``wrap``: counters go back, as on a restarted pod) or the
    last one again (counters stop)."""

    def __init__(self, responses: Responses, wrap: bool = True) -> None:
        self.responses = responses
        self.wrap = wrap
        self.sent = 0
        self.buffer = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # duck-typed: uvloop's transports are not asyncio.Transport subclasses
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            responses = self.responses.to(self.buffer[:end])
            self.buffer = self.buffer[end + 4 :]
            assert self.transport is not None
            n = len(responses)
            self.transport.write(responses[self.sent % n if self.wrap else min(self.sent, n - 1)])
            self.sent += 1


def serve(port_queue: multiprocessing.Queue[int], n_servers: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {1})  # the pods: the other core
    responses = Responses()

    async def run() -> None:
        loop = asyncio.get_running_loop()
        for _ in range(n_servers):
            server = await loop.create_server(lambda: _Pod(responses), "127.0.0.1", 0)
            port_queue.put(server.sockets[0].getsockname()[1])
        await asyncio.Event().wait()

    asyncio.run(run())


async def measure(ports: list[int], pods: int, ticks: int, whole: bool) -> dict[str, Any]:
    """One worker's numbers: CPU us per GET alone and per whole scrape (``whole``: with
    ``filter_families`` off)."""
    from autoscaler.metrics import engines
    from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
    from autoscaler.metrics.source import PodEndpoint

    endpoints = [
        PodEndpoint(f"pod-{i}", f"http://127.0.0.1:{ports[i % len(ports)]}/metrics?pod={i}")
        for i in range(pods)
    ]
    extra = {"filter_families": False} if whole else {}
    source = PodScrapeSource(ScrapeConfig(timeout_s=5.0, max_concurrency=64, **extra))
    # the GET the scrape sends: filtered where the code filters (it has `request_query`;
    # code before it has a one-argument `_fetch`)
    query: bytes | None = getattr(engines.ADAPTERS["vllm"], "request_query", None)
    fetch_args: tuple[bytes, ...] = () if query is None else (b"" if whole else query,)
    now = 0.0
    out: dict[str, Any] = {"failures": 0}
    try:
        for _ in range(3):  # connections open, engines detected, layouts built
            now += 1.0
            await source.read("warmup", endpoints, now)
        for kind in ("get", "scrape"):
            faults0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            cpu0, wall0 = time.process_time(), time.perf_counter()
            for _ in range(ticks):
                now += 1.0
                if kind == "scrape":
                    reading = await source.read("bench", endpoints, now)
                    out["failures"] += reading.pods_expected - reading.pods_read
                    out["signals"] = len(reading.signals)
                else:
                    bodies = await asyncio.gather(
                        *(source._fetch(p, *fetch_args) for p in endpoints),
                        return_exceptions=True,
                    )
                    out["failures"] += sum(not isinstance(b, bytes) for b in bodies)
            out[f"{kind}_cpu_s"] = time.process_time() - cpu0
            out[f"{kind}_wall_s"] = time.perf_counter() - wall0
            faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults0
            out[f"{kind}_faults"] = faults / (ticks * pods)
    finally:
        await source.close()
    out["event_loop"] = type(asyncio.get_running_loop()).__module__
    return out


def worker(args: argparse.Namespace) -> None:
    import autoscaler

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {0})  # the scraper: one core
    ports = [int(p) for p in args.ports.split(",")]
    if args.tuned:  # the GC settings `llm-autoscaler run` applies once started
        from autoscaler.commands.run import tune_gc

        tune_gc()
    main = measure(ports, args.pods, args.ticks, args.whole)
    if args.loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            result = runner.run(main)
    else:
        result = asyncio.run(main)
    result["code"] = str(Path(autoscaler.__file__).parent)
    print(json.dumps(result), flush=True)


def _run_worker(
    code: Path | None,
    loop: str,
    tuned: bool,
    whole: bool,
    ports: list[int],
    args: argparse.Namespace,
) -> Any:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, __file__, "--worker", "--loop", loop, "--pods", str(args.pods)]
    cmd += ["--tuned"] if tuned else []
    cmd += ["--whole"] if whole else []
    cmd += ["--ticks", str(args.ticks), "--ports", ",".join(map(str, ports))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    result = json.loads(out.strip().splitlines()[-1])
    expected = str((code or ROOT) / "autoscaler")
    if result["code"] != expected:
        raise RuntimeError(f"worker imported {result['code']}, expected {expected}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pods", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=40, help="ticks per row per round")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--servers", type=int, default=4)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--current", default=None, help="a git revision instead of this tree")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--loop", default="asyncio", help=argparse.SUPPRESS)
    parser.add_argument("--ports", default="", help=argparse.SUPPRESS)
    parser.add_argument("--tuned", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--whole", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    try:
        import uvloop  # noqa: F401

        loops = ["asyncio", "uvloop"]
    except ImportError:
        loops = ["asyncio"]
    base_rev = short_rev(args.baseline)
    current = short_rev(args.current) if args.current else "this tree"
    queue: multiprocessing.Queue[int] = multiprocessing.Queue()
    proc = multiprocessing.Process(target=serve, args=(queue, args.servers), daemon=True)
    proc.start()
    runs: dict[str, list[dict[str, Any]]] = {}
    try:
        ports = [queue.get(timeout=30) for _ in range(args.servers)]
        with tempfile.TemporaryDirectory() as tmp:
            base_code = extract(base_rev, Path(tmp) / "base")
            cur_code = extract(args.current, Path(tmp) / "cur") if args.current else None
            configs = [(f"baseline {base_rev}, asyncio", base_code, "asyncio", False, False)]
            configs += [(f"{current}, {loop}", cur_code, loop, False, False) for loop in loops]
            run = f"{current}, {loops[-1]} + tune_gc (= run)"
            configs.append((run, cur_code, loops[-1], True, False))
            configs.append((f"{run}, whole pages", cur_code, loops[-1], True, True))
            for _ in range(args.rounds):
                for label, code, loop, tuned, whole in configs:
                    runs.setdefault(label, []).append(
                        _run_worker(code, loop, tuned, whole, ports, args)
                    )
    finally:
        proc.terminate()
        proc.join(timeout=10)
    scrapes = args.pods * args.ticks
    base_label = configs[0][0]
    rows = []
    for kind, title in (("get", "GET only"), ("scrape", "scrape: GET + parse + signals")):
        for label, *_ in configs:
            cpu = [r[f"{kind}_cpu_s"] for r in runs[label]]
            wall = [r[f"{kind}_wall_s"] for r in runs[label]]
            base = [r[f"{kind}_cpu_s"] for r in runs[base_label]]
            ratios = [b / c for b, c in zip(base, cpu, strict=True)]
            rows.append(
                {
                    "row": f"{title}, {label}",
                    "cpu_us_per_scrape": round(statistics.median(cpu) / scrapes * 1e6, 1),
                    "vs_baseline": round(statistics.median(ratios), 2),
                    "vs_baseline_min": round(min(ratios), 2),
                    "vs_baseline_max": round(max(ratios), 2),
                    "scrapes_per_cpu_s": round(scrapes * len(cpu) / sum(cpu)),
                    "scrapes_per_s_wall": round(scrapes * len(wall) / sum(wall)),
                    "core_busy": round(sum(cpu) / sum(wall), 3),
                    "failures": sum(r["failures"] for r in runs[label]),
                    "minor_faults_per_scrape": round(
                        statistics.median(r[f"{kind}_faults"] for r in runs[label]), 2
                    ),
                    "event_loop": runs[label][0]["event_loop"],
                }
            )
    print(
        f"{args.pods} pods x {args.ticks} ticks per row per round, {args.rounds} rounds; "
        "CPU of the worker process; vs baseline = median of per-round ratios (min-max)"
    )
    print(
        f"{'row':84} {'CPU us/scrape':>13} {'vs baseline':>14} {'per CPU s':>9} "
        f"{'wall /s':>8} {'busy':>5} {'fail':>4} {'faults':>6}"
    )
    for r in rows:
        spread = f"{r['vs_baseline']:.2f}x ({r['vs_baseline_min']:.1f}-{r['vs_baseline_max']:.1f})"
        print(
            f"{r['row']:84} {r['cpu_us_per_scrape']:13.1f} {spread:>14} "
            f"{r['scrapes_per_cpu_s']:9d} {r['scrapes_per_s_wall']:8d} "
            f"{r['core_busy']:5.0%} {r['failures']:4d} {r['minor_faults_per_scrape']:6.2f}"
        )
    result = {
        "command": " ".join(["benchmarks/bench_scrape.py", *sys.argv[1:]]),
        "baseline": base_rev,
        "current": current,
        "pods": args.pods,
        "ticks_per_round": args.ticks,
        "rounds": args.rounds,
        "rows": rows,
    }
    out = ROOT / "benchmarks" / "results" / "scrape.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
