"""What scraping in worker processes costs the controller's own process: the IPC.

Run: nice -n 10 .venv/bin/python benchmarks/bench_scrape_ipc.py [--targets 100] [--ticks 30]
     [--rounds 3] [--workers 2]

Each measurement is a fresh process on uvloop that reads ``--targets`` targets x 8 pods
per tick, every target's read at once (``asyncio.gather``, as the control loop does),
``--ticks`` ticks back to back after ``--warmup`` ticks, with:

- ``in-process``: `PodScrapeSource` (the controller's whole scrape cost, K=0);
- ``workers``: `ScrapeWorkers` with ``--workers`` processes, messages batched per
  event-loop iteration (as shipped);
- ``workers-unbatched``: the same with every message written as its own frame at once
  (`_Outbox.put` flushing immediately: patched here only, in the measuring process).

CPU is counted per process: the measuring process's own (``RUSAGE_SELF``: with workers,
that is the IPC and the `TargetReading`s, no scraping) and the workers' (utime + stime
from ``/proc/<pid>/stat``). The pods are another process (asyncio responders on their own
loopback IPs, the vLLM V1 fixture page with counters growing on every scrape). Rows are
measured in interleaved rounds; medians. Writes benchmarks/results/scrape_ipc.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_scrape import Responses, _Pod
from fleet import pod_ip

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "scrape_ipc.json"
KINDS = ("in-process", "workers", "workers-unbatched")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of one process, from /proc (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def serve_pods(n: int, pages: int, ready: Any) -> None:
    async def run() -> None:
        loop = asyncio.get_running_loop()
        responses = Responses(pages)
        port = 0
        for g in range(n):
            server = await loop.create_server(lambda: _Pod(responses, False), pod_ip(g), port)
            port = server.sockets[0].getsockname()[1]
        ready.put(port)
        await asyncio.Event().wait()

    try:
        import uvloop

        uvloop.run(run())
    except ImportError:
        asyncio.run(run())


async def measure(kind: str, args: argparse.Namespace, port: int) -> dict[str, Any]:
    from autoscaler.metrics import scrape_workers
    from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
    from autoscaler.metrics.source import PodEndpoint

    config = ScrapeConfig(timeout_s=10.0)
    source: Any
    if kind == "in-process":
        source = PodScrapeSource(config)
    else:
        if kind == "workers-unbatched":

            def put(self: Any, message: Any) -> None:
                self._queued.append(message)
                self.flush()

            scrape_workers._Outbox.put = put  # type: ignore[method-assign]
        source = scrape_workers.ScrapeWorkers(
            config, scrape_workers.WorkerConfig(workers=args.workers)
        )
        await source.start()
    targets = {
        f"ns/m{t:04d}": tuple(
            PodEndpoint(f"m{t:04d}-{p}", f"http://{pod_ip(t * args.pods + p)}:{port}/metrics")
            for p in range(args.pods)
        )
        for t in range(args.targets)
    }

    async def tick(now: float) -> None:
        readings = await asyncio.gather(*(source.read(k, v, now) for k, v in targets.items()))
        bad = [r.errors for r in readings if r.pods_read != args.pods]
        if bad:
            raise RuntimeError(f"{len(bad)} targets not read whole: {bad[0]}")

    def cpu() -> tuple[float, float]:
        r = resource.getrusage(resource.RUSAGE_SELF)
        pids = source.pids() if kind != "in-process" else []
        return r.ru_utime + r.ru_stime, sum(proc_cpu_s(p) for p in pids if p is not None)

    try:
        for i in range(args.warmup):
            await tick(float(i))
        wall0, (own0, workers0) = time.perf_counter(), cpu()
        for i in range(args.ticks):
            await tick(float(args.warmup + i))
        wall, (own1, workers1) = time.perf_counter() - wall0, cpu()
    finally:
        await source.close()
    reads = args.ticks * args.targets
    return {
        "kind": kind,
        "own_us_per_target_tick": round(1e6 * (own1 - own0) / reads, 1),
        "workers_us_per_target_tick": round(1e6 * (workers1 - workers0) / reads, 1),
        "total_us_per_target_tick": round(1e6 * (own1 - own0 + workers1 - workers0) / reads, 1),
        "wall_ms_per_tick": round(1000 * wall / args.ticks, 1),
    }


def run_one(kind: str, args: argparse.Namespace, port: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--worker", kind, "--port", str(port)]
    for name in ("targets", "pods", "ticks", "warmup", "workers"):
        cmd += [f"--{name}", str(getattr(args, name))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, default=100)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--ticks", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.worker:
        import uvloop

        print(json.dumps(uvloop.run(measure(args.worker, args, args.port))), flush=True)
        return
    ready: multiprocessing.Queue[int] = multiprocessing.Queue()
    pages = (args.warmup + args.ticks) * (args.rounds * len(KINDS) + 1) + 10
    pods = multiprocessing.Process(
        target=serve_pods, args=(args.targets * args.pods, pages, ready), daemon=True
    )
    pods.start()
    try:
        port = ready.get(timeout=300)
        raw: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
        for _ in range(args.rounds):
            for kind in KINDS:
                raw[kind].append(run_one(kind, args, port))
                print(raw[kind][-1], file=sys.stderr, flush=True)
    finally:
        pods.terminate()
        pods.join(10)
    keys = [k for k in raw[KINDS[0]][0] if k != "kind"]
    rows = [
        {"kind": kind} | {k: statistics.median(r[k] for r in raw[kind]) for k in keys}
        for kind in KINDS
    ]
    table = (
        f"{args.targets} targets x {args.pods} pods, K={args.workers}, median of {args.rounds} "
        "interleaved rounds, us of CPU per target per tick\n\n"
        "| source | controller process | workers | total | wall ms/tick |\n|---|---|---|---|---|\n"
    )
    table += "".join(
        f"| {r['kind']} | {r['own_us_per_target_tick']} | {r['workers_us_per_target_tick']} | "
        f"{r['total_us_per_target_tick']} | {r['wall_ms_per_tick']} |\n"
        for r in rows
    )
    print(table)
    RESULTS.write_text(
        json.dumps(
            {
                "benchmark": "bench_scrape_ipc",
                "command": " ".join(["benchmarks/bench_scrape_ipc.py", *sys.argv[1:]]),
                "machine": {"cpus": os.cpu_count()},
                "rows": rows,
                "raw": raw,
                "markdown": table,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
