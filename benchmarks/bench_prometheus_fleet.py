"""Prometheus mode for a fleet: one query per target per signal vs grouped, side by side.

Run: nice -n 10 .venv/bin/python benchmarks/bench_prometheus_fleet.py \\
         [--targets 10 100 1000] [--ticks 3]
(writes benchmarks/results/prometheus_fleet.json)

The measured process runs `PrometheusSource.read` for N targets per tick, concurrently,
as the control loop does (one `read` per target, same tick time), with the controller's
`WorkloadPods` targets: "grouped" is the product (one query per signal per tick for all
targets), "per-target" is the same source given each target's label selector as a
string (one query per signal per target, the behaviour before grouping). The
Prometheus is a FAKE HTTP server in another process (aiohttp) answering the queries
with the JSON shape Prometheus' /api/v1/query returns: a grouped query gets one series
per workload named in its pod regex, labelled ``namespace`` and ``llm_target``, a
per-target query one unlabelled series; values in [0, 1) that change on every answer. So
this measures the controller's side (building queries, HTTP, JSON, demultiplexing), not
Prometheus' evaluation work, which the grouped queries also reduce (N-fold fewer
queries) but which runs on the Prometheus server, not in the controller.

Per mode and N: queries per tick, the measured process' CPU seconds per tick
(`time.process_time`, the fake server excluded) and tick wall time, medians over
``--ticks`` ticks after one warm-up tick. The issue-16 goal is <= 0.3 core for 1,000
targets at a 1 s polling interval, i.e. <= 0.3 CPU s per tick.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import random
import re
import statistics
import time
from pathlib import Path
from typing import Any

from autoscaler.metrics.prometheus import TARGET_LABEL, PrometheusSource, WorkloadPods
from autoscaler.metrics.source import PodEndpoint

ROOT = Path(__file__).parents[1]
PODS = [PodEndpoint(f"p{i}", "unused") for i in range(8)]
_NAMES = re.compile(r'pod=~"\(?([^")]*)\)?-\.\*"')
_BOUNDS = ["0.05", "0.1", "0.25", "0.5", "1", "2.5", "+Inf"]


def workload(i: int) -> WorkloadPods:
    return WorkloadPods(f"team-{i % 10}", f"vllm-model-{i:04d}")


def _serve(n: int, port_out: Any) -> None:
    """The fake Prometheus (runs in a child process)."""
    from aiohttp import web

    ns_of = {workload(i).name: workload(i).namespace for i in range(n)}
    rng = random.Random(1)

    async def query(request: web.Request) -> web.Response:
        promql = str((await request.post())["query"])
        match = _NAMES.search(promql)
        names = match.group(1).split("|") if match else []
        grouped = TARGET_LABEL in promql
        now = time.time()
        # A bucket-rate query (quantiles are computed in the controller) gets one series
        # per bound, cumulative as Prometheus' bucket rates are.
        buckets = re.search(r"\ble\)", promql) and "histogram_quantile" not in promql
        bounds: list[str | None] = list(_BOUNDS) if buckets else [None]
        result = []
        for name in names:
            if name not in ns_of:
                continue
            cumulative = 0.0
            for le in bounds:
                cumulative += rng.random()
                metric = {"namespace": ns_of[name], TARGET_LABEL: name} if grouped else {}
                if le is not None:
                    metric["le"] = le
                value = cumulative if le is not None else rng.random()
                result.append({"metric": metric, "value": [round(now, 3), f"{value:.6g}"]})
        doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return web.Response(body=json.dumps(doc).encode(), content_type="application/json")

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/api/v1/query", query)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0, backlog=1024).start()
        port_out.put(runner.addresses[0][1])
        await asyncio.Event().wait()

    asyncio.run(main())


async def _measure(url: str, n: int, grouped: bool, ticks: int) -> dict[str, float]:
    targets = {f"{w.namespace}/{w.name}": w for w in map(workload, range(n))}
    selectors: dict[str, str | WorkloadPods] = (
        dict(targets) if grouped else {k: w.selector() for k, w in targets.items()}
    )
    source = PrometheusSource(url, selectors, timeout_s=30.0)
    cpu, wall, queries, errors = [], [], [], 0
    try:
        for tick in range(ticks + 1):
            sent, c0, w0 = source.queries_sent, time.process_time(), time.perf_counter()
            readings = await asyncio.gather(*(source.read(k, PODS, float(tick)) for k in targets))
            if tick == 0:
                continue  # warm-up: connections, first batch
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
            queries.append(source.queries_sent - sent)
            errors += sum(len(r.errors) for r in readings)
            assert all(len(r.signals) == len(source.queries) for r in readings), "missing"
    finally:
        await source.close()
    return {
        "queries_per_tick": statistics.median(queries),
        "cpu_s_per_tick": statistics.median(cpu),
        "wall_s_per_tick": statistics.median(wall),
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--ticks", type=int, default=3)
    args = parser.parse_args()
    ctx = multiprocessing.get_context("spawn")
    rows = []
    print(
        f"{'targets':>7} {'mode':>10} {'queries/tick':>12} {'CPU s/tick':>10} {'wall s/tick':>11}"
    )
    for n in args.targets:
        ports = ctx.Queue()
        server = ctx.Process(target=_serve, args=(n, ports), daemon=True)
        server.start()
        try:
            url = f"http://127.0.0.1:{ports.get(timeout=30)}"
            for grouped in (False, True):
                r = asyncio.run(_measure(url, n, grouped, args.ticks))
                mode = "grouped" if grouped else "per-target"
                rows.append({"targets": n, "mode": mode, **r})
                print(
                    f"{n:>7} {mode:>10} {r['queries_per_tick']:>12.0f} "
                    f"{r['cpu_s_per_tick']:>10.4f} {r['wall_s_per_tick']:>11.4f}"
                )
        finally:
            server.terminate()
            server.join(10)
    ratios = []
    for n in args.targets:
        per, grp = (
            next(r for r in rows if r["targets"] == n and r["mode"] == m)
            for m in ("per-target", "grouped")
        )
        ratios.append(
            {
                "targets": n,
                "cpu_ratio": per["cpu_s_per_tick"] / grp["cpu_s_per_tick"],
                "wall_ratio": per["wall_s_per_tick"] / grp["wall_s_per_tick"],
            }
        )
        r = ratios[-1]
        print(
            f"{n:>7} targets: per-target / grouped: CPU {r['cpu_ratio']:.1f}x, "
            f"wall {r['wall_ratio']:.1f}x"
        )
    out = ROOT / "benchmarks" / "results" / "prometheus_fleet.json"
    out.write_text(
        json.dumps(
            {
                "command": "benchmarks/bench_prometheus_fleet.py "
                + " ".join(["--targets", *map(str, args.targets), "--ticks", str(args.ticks)]),
                "prometheus": "fake HTTP server (aiohttp, other process), Prometheus JSON shape",
                "rows": rows,
                "ratios": ratios,
            },
            indent=2,
        )
    )
    print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
