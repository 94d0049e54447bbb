"""The REST API under sustained concurrent load while a simulated control loop ticks.

Run: .venv/bin/python benchmarks/bench_api.py [--targets 20] [--tick-ms 100] [--seconds 5]
     [--concurrency 16]

One process runs what the controller runs: uvicorn with the real app over a real
`FilePolicyStore`, plus a control loop that calls the real pure core (`decide`) for every
target each tick and publishes into `ControllerState`. A second process (the other core)
is the load generator (aiohttp, loopback only). The loop runs twice side by side in one
run: alone, then under load; reported: requests/s, p50/p99 latency per request kind, and
tick duration / tick lateness (start delay vs schedule) without and with load.
Writes benchmarks/results/api.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from percentiles import nearest_rank

ROOT = Path(__file__).parents[1]
TOKEN = "bench-token"
NS = "bench"


# ----------------------------------------------------------------------------- load side


def load_process(
    port: int,
    targets: int,
    seconds: float,
    concurrency: int,
    max_requests: int,
    out: multiprocessing.Queue[dict[str, Any]],
) -> None:
    import aiohttp

    async def run() -> dict[str, Any]:
        base = f"http://127.0.0.1:{port}"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        lat: dict[str, list[float]] = {}
        errors: dict[str, int] = {}
        sent = 0
        deadline = time.perf_counter() + seconds

        def request_for(i: int) -> tuple[str, str, str, Any]:
            name = f"model-{i % targets}"
            k = i % 20
            if k == 0:
                return (
                    "patch_policy",
                    "PATCH",
                    f"/v1/targets/{NS}/{name}/policy",
                    {"cooldownPeriod": 60 + i % 240},
                )
            if k == 1:
                return "metrics", "GET", "/metrics", None
            if k in (2, 3):
                return "list_targets", "GET", f"/v1/targets?namespace={NS}", None
            if k in (4, 5, 6, 7):
                return "decisions_50", "GET", f"/v1/targets/{NS}/{name}/decisions?limit=50", None
            if k in (8, 9, 10, 11, 12, 13):
                return "keda_metrics_api", "GET", f"/v1/keda/{NS}/{name}", None
            return "get_target", "GET", f"/v1/targets/{NS}/{name}", None

        async def worker(w: int, session: aiohttp.ClientSession) -> None:
            nonlocal sent
            i = w
            while time.perf_counter() < deadline and sent < max_requests:
                sent += 1
                kind, method, path, body = request_for(i)
                i += concurrency
                t0 = time.perf_counter()
                async with session.request(method, base + path, json=body, headers=auth) as r:
                    await r.read()
                    status = r.status
                dt = time.perf_counter() - t0
                if status >= 400:
                    errors[f"{kind}:{status}"] = errors.get(f"{kind}:{status}", 0) + 1
                lat.setdefault(kind, []).append(dt)

        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            start = time.perf_counter()
            await asyncio.gather(*(worker(w, session) for w in range(concurrency)))
            elapsed = time.perf_counter() - start
        all_lat = [x for v in lat.values() for x in v]
        return {
            "requests": len(all_lat),
            "elapsed_s": elapsed,
            "requests_per_s": len(all_lat) / elapsed,
            "p50_ms": nearest_rank(all_lat, 0.50) * 1e3,
            "p99_ms": nearest_rank(all_lat, 0.99) * 1e3,
            "errors": errors,
            "by_kind": {
                k: {
                    "n": len(v),
                    "p50_ms": nearest_rank(v, 0.5) * 1e3,
                    "p99_ms": nearest_rank(v, 0.99) * 1e3,
                }
                for k, v in sorted(lat.items())
            },
        }

    out.put(asyncio.run(run()))


# ----------------------------------------------------------------------------- controller side


async def controller(args: argparse.Namespace) -> dict[str, Any]:
    from autoscaler.logging import configure_logging

    configure_logging(fmt="console", level="WARNING")
    from autoscaler.api.app import create_app
    from autoscaler.api.metrics import ControllerMetrics
    from autoscaler.api.security import ApiSettings
    from autoscaler.api.server import serve_http
    from autoscaler.control.state import ControllerState, TargetStatus
    from autoscaler.domain import DecisionState, Observation, TargetRef
    from autoscaler.policy.core import decide
    from autoscaler.policy.schema import load_policy
    from autoscaler.store.file import FilePolicyStore
    from autoscaler.target import TargetSpec

    tmp = tempfile.TemporaryDirectory(prefix="bench-api-")
    state = ControllerState()
    store = FilePolicyStore(Path(tmp.name) / "policies.yaml")
    metrics = ControllerMetrics()
    policy = load_policy({"minReplicaCount": 1, "maxReplicaCount": 32})
    refs = [TargetRef(NS, f"model-{i}") for i in range(args.targets)]
    for ref in refs:
        spec = TargetSpec(ref=ref, policy=policy, mode="keda")
        stored = await store.put(spec)
        state.targets[ref] = TargetStatus(spec=spec, version=stored.version)
    app = create_app(state, store, ApiSettings(write_token=TOKEN), metrics=metrics)
    handle = await serve_http(app, "127.0.0.1", 0)

    tick_s = args.tick_ms / 1000.0
    dstates = {ref: DecisionState() for ref in refs}
    replicas = dict.fromkeys(refs, 2)
    samples: dict[str, list[tuple[float, float]]] = {"idle": [], "load": []}
    phase = "idle"
    stop = asyncio.Event()

    async def loop() -> None:
        t_sim = 0.0
        scheduled = time.perf_counter()
        while not stop.is_set():
            started = time.perf_counter()
            lateness = started - scheduled
            t_sim += tick_s
            for k, ref in enumerate(refs):
                waiting = 20.0 + 15.0 * math.sin(t_sim / 5.0 + k)
                obs = Observation(
                    t=t_sim,
                    current_replicas=replicas[ref],
                    ready_replicas=replicas[ref],
                    signals={"waiting": waiting, "running": 60.0, "kv_cache_usage": 0.5},
                )
                decision, dstates[ref] = decide(policy, obs, dstates[ref], t_sim)
                replicas[ref] = decision.desired_replicas
                await state.publish(ref, obs, decision)
                metrics.observe_decision(ref, decision)
            state.ready = True
            duration = time.perf_counter() - started
            metrics.observe_tick(duration)
            samples[phase].append((duration, lateness))
            scheduled += tick_s
            await asyncio.sleep(max(0.0, scheduled - time.perf_counter()))

    loop_task = asyncio.create_task(loop())
    try:
        await asyncio.sleep(args.seconds)  # phase 1: the loop alone
        phase = "load"
        ctx = multiprocessing.get_context("spawn")
        out: multiprocessing.Queue[dict[str, Any]] = ctx.Queue()
        proc = ctx.Process(
            target=load_process,
            args=(
                handle.port,
                args.targets,
                args.seconds,
                args.concurrency,
                args.max_requests,
                out,
            ),
        )
        proc.start()
        load = await asyncio.to_thread(out.get, True, args.seconds + 60)
        await asyncio.to_thread(proc.join, 10)
    finally:
        stop.set()
        await loop_task
        await handle.stop()
        tmp.cleanup()

    def tick_stats(rows: list[tuple[float, float]]) -> dict[str, float]:
        dur = [r[0] * 1e3 for r in rows]
        late = [r[1] * 1e3 for r in rows]
        return {
            "ticks": len(rows),
            "duration_p50_ms": statistics.median(dur),
            "duration_p99_ms": nearest_rank(dur, 0.99),
            "duration_max_ms": max(dur),
            "lateness_p50_ms": statistics.median(late),
            "lateness_p99_ms": nearest_rank(late, 0.99),
            "lateness_max_ms": max(late),
        }

    return {
        "config": vars(args),
        "load": load,
        "ticks_idle": tick_stats(samples["idle"]),
        "ticks_load": tick_stats(samples["load"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--tick-ms", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-requests", type=int, default=200_000)
    args = parser.parse_args()
    result = asyncio.run(controller(args))

    load = result["load"]
    print(
        f"\nAPI under load: {args.concurrency} concurrent clients, {args.seconds:.0f} s, "
        f"{args.targets} targets, loop tick {args.tick_ms:.0f} ms (2nd process = client)"
    )
    print(
        f"  {load['requests']} requests, {load['requests_per_s']:.0f} req/s, "
        f"p50 {load['p50_ms']:.2f} ms, p99 {load['p99_ms']:.2f} ms, errors {load['errors']}"
    )
    print(f"\n  {'request kind':<18}{'n':>8}{'p50 ms':>10}{'p99 ms':>10}")
    for kind, s in load["by_kind"].items():
        print(f"  {kind:<18}{s['n']:>8}{s['p50_ms']:>10.2f}{s['p99_ms']:>10.2f}")
    idle, busy = result["ticks_idle"], result["ticks_load"]
    print(f"\n  {'control-loop tick':<22}{'no load':>10}{'under load':>12}{'ratio':>8}")
    for key in (
        "ticks",
        "duration_p50_ms",
        "duration_p99_ms",
        "duration_max_ms",
        "lateness_p50_ms",
        "lateness_p99_ms",
        "lateness_max_ms",
    ):
        a, b = idle[key], busy[key]
        ratio = f"{b / a:.1f}x" if key != "ticks" and a > 0 else ""
        print(f"  {key:<22}{a:>10.2f}{b:>12.2f}{ratio:>8}")
    out = ROOT / "benchmarks" / "results" / "api.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=str))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
