"""The controller's own /metrics at fleet scale: what a scrape costs and how long it stalls
the event loop, rendered in a worker thread (as served) vs on the loop, side by side.

Run: .venv/bin/python benchmarks/bench_metrics_page.py [--targets 1000] [--scrapes 8]

One process: the real app (`create_app`) over uvicorn on 127.0.0.1 with a
`ControllerMetrics` holding N targets' latest decisions (a forecast-planner decision from
bench_memory's recording: its metrics and numbers, so every per-target family has its
series), plus a route that renders the same registry on the event loop, as /metrics did
before. A ticker coroutine wakes every 1 ms and records how late each wake-up is (the loop
lag a tick, a watch or a gRPC answer would see); an aiohttp client in the same process
scrapes each route ``--scrapes`` times, alternating. Reported per route: page bytes,
render CPU ms (generate_latest alone, no HTTP), scrape wall ms, and the loop lag's max and
p99 during the scrapes. Writes benchmarks/results/metrics_page.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from percentiles import nearest_rank

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results" / "metrics_page.json"


async def _ticker(lags_ms: list[float], stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        due = loop.time() + 0.001
        await asyncio.sleep(0.001)
        lags_ms.append(max(0.0, (loop.time() - due) * 1e3))


async def run(targets: int, scrapes: int) -> dict[str, Any]:
    import aiohttp
    import bench_memory
    from fastapi import Response
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    from autoscaler.api.app import create_app
    from autoscaler.api.metrics import ControllerMetrics
    from autoscaler.api.server import serve_http
    from autoscaler.control.state import ControllerState
    from autoscaler.domain import TargetRef
    from autoscaler.logging import configure_logging
    from autoscaler.store.file import FilePolicyStore

    configure_logging("json", "WARNING")
    recorded, _ = await bench_memory._record_target(200)
    decision = recorded[-1][1]
    metrics = ControllerMetrics()
    for i in range(targets):
        metrics.observe_decision(TargetRef(f"fleet-{i % 10}", f"llm-{i}"), decision)
    render_cpu_ms = []
    for _ in range(3):
        c0 = time.process_time()
        page = generate_latest(metrics.registry)
        render_cpu_ms.append((time.process_time() - c0) * 1e3)
    with tempfile.TemporaryDirectory() as tmp:
        app = create_app(ControllerState(), FilePolicyStore(Path(tmp) / "p.yaml"), metrics=metrics)

        @app.get("/metrics-on-the-loop")
        async def on_the_loop() -> Response:  # /metrics before it moved to a thread
            return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

        server = await serve_http(app, "127.0.0.1", 0)
        rows: dict[str, dict[str, Any]] = {
            route: {"lags_ms": [], "wall_ms": [], "bytes": 0}
            for route in ("/metrics", "/metrics-on-the-loop")
        }
        try:
            async with aiohttp.ClientSession() as http:
                for _ in range(scrapes):
                    for route, row in rows.items():
                        stop = asyncio.Event()
                        lags: list[float] = []
                        ticker = asyncio.create_task(_ticker(lags, stop))
                        await asyncio.sleep(0.02)
                        t0 = time.perf_counter()
                        async with http.get(server.url + route) as resp:
                            body = await resp.read()
                        row["wall_ms"].append((time.perf_counter() - t0) * 1e3)
                        stop.set()
                        await ticker
                        row["lags_ms"].extend(lags)
                        row["bytes"] = len(body)
        finally:
            await server.stop()
    out: dict[str, Any] = {
        "targets": targets,
        "scrapes_per_route": scrapes,
        "page_bytes": len(page),
        "render_cpu_ms_median": sorted(render_cpu_ms)[1],
        "routes": {},
    }
    for route, row in rows.items():
        out["routes"][route] = {
            "bytes": row["bytes"],
            "scrape_wall_ms_median": nearest_rank(row["wall_ms"], 0.5),
            "loop_lag_max_ms": max(row["lags_ms"]),
            "loop_lag_p99_ms": nearest_rank(row["lags_ms"], 0.99),
            "loop_lag_p50_ms": nearest_rank(row["lags_ms"], 0.5),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--scrapes", type=int, default=8)
    args = parser.parse_args()
    from autoscaler.commands.run import run_loop

    result = run_loop(run(args.targets, args.scrapes))
    print(
        f"{args.targets} targets: page {result['page_bytes'] / 1e6:.2f} MB, "
        f"render {result['render_cpu_ms_median']:.1f} ms CPU (generate_latest alone)\n"
    )
    print("| route | scrape wall ms (median) | loop lag max ms | loop lag p99 ms | p50 |")
    print("|---|---|---|---|---|")
    for route, r in result["routes"].items():
        print(
            f"| {route} | {r['scrape_wall_ms_median']:.1f} | {r['loop_lag_max_ms']:.1f} | "
            f"{r['loop_lag_p99_ms']:.1f} | {r['loop_lag_p50_ms']:.2f} |"
        )
    result["command"] = "benchmarks/bench_metrics_page.py " + " ".join(sys.argv[1:])
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
