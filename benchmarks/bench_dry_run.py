"""/healthz latency while 8 clients flood the dry-run endpoint, without and with its limits.

Run: nice -n 10 .venv/bin/python benchmarks/bench_dry_run.py [--seconds 5] [--clients 8]
     [--per-client 2]

Issue 13 item 12: an anonymous dry-run replays up to 600 ticks of the decision core, and
nothing limited how many ran at once, so a few clients starved the event loop the API
shares with the control loop. Both configurations run side by side in one run, each in a
fresh uvicorn server (this process) over the real app, a real `FilePolicyStore` and a
target with a full observation buffer:

- ``unlimited``: `DryRunLimits.unlimited()` (the behaviour before the fix);
- ``limited``: the shipped defaults (token bucket 0.5/s, burst 3 per client; one replay at
  a time, 8 queued; at most 600 ticks and 0.5 s of CPU per replay; the replay thread
  releases the GIL after every tick).

Both render the answer in the worker thread (part of the fix, not a limit), so
``unlimited`` understates what the code before the fix cost.

For each: a probe process asks /healthz every 20 ms, first alone, then while a second
process runs ``--clients`` dry-run clients, each from its own loopback address
(127.0.0.10, .11, ...) so the per-client limit sees distinct clients, each with
``--per-client`` requests in flight. The clients do not wait between requests and ignore
Retry-After (a hostile client). Reported: /healthz p50 and
p99 alone and under the flood, dry-run answers per second by status, and the server's CPU
seconds per wall second. Writes benchmarks/results/dry_run.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing
import tempfile
import time
from pathlib import Path
from typing import Any

from percentiles import nearest_rank

ROOT = Path(__file__).parents[1]
TARGET = "/v1/targets/bench/chat"
CONFIGS = ("unlimited", "limited")
CANDIDATE = {"policy": {"minReplicaCount": 1, "maxReplicaCount": 24}}


# ----------------------------------------------------------------------------- client side


def probe_process(port: int, seconds: float, out: multiprocessing.Queue[dict[str, Any]]) -> None:
    import httpx

    async def run() -> dict[str, Any]:
        lat: list[float] = []
        deadline = time.perf_counter() + seconds
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
            while time.perf_counter() < deadline:
                t0 = time.perf_counter()
                r = await c.get("/healthz")
                lat.append(time.perf_counter() - t0)
                assert r.status_code == 200
                await asyncio.sleep(max(0.0, 0.02 - (time.perf_counter() - t0)))
        return {"lat_ms": [x * 1e3 for x in lat]}

    out.put({"probe": asyncio.run(run())})


def flood_process(
    port: int,
    seconds: float,
    clients: int,
    per_client: int,
    out: multiprocessing.Queue[dict[str, Any]],
) -> None:
    import httpx

    async def client(i: int, statuses: dict[str, int], deadline: float) -> None:
        transport = httpx.AsyncHTTPTransport(local_address=f"127.0.0.{10 + i}")
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}", transport=transport, timeout=60
        ) as c:

            async def one_connection() -> None:
                while time.perf_counter() < deadline:
                    r = await c.post(f"{TARGET}/dry-run", json=CANDIDATE)
                    key = str(r.status_code)
                    statuses[key] = statuses.get(key, 0) + 1

            await asyncio.gather(*(one_connection() for _ in range(per_client)))

    async def run() -> dict[str, Any]:
        statuses: dict[str, int] = {}
        deadline = time.perf_counter() + seconds
        await asyncio.gather(*(client(i, statuses, deadline) for i in range(clients)))
        return statuses

    out.put({"flood": asyncio.run(run())})


# ----------------------------------------------------------------------------- server side


async def serve_and_measure(name: str, args: argparse.Namespace) -> dict[str, Any]:
    from autoscaler.api.app import create_app
    from autoscaler.api.limits import DryRunLimits
    from autoscaler.api.security import ApiSettings
    from autoscaler.api.server import serve_http
    from autoscaler.control.state import OBSERVATIONS_LEN, ControllerState, TargetStatus
    from autoscaler.domain import DecisionState, Observation, TargetRef
    from autoscaler.policy.core import decide
    from autoscaler.policy.schema import load_policy
    from autoscaler.store.file import FilePolicyStore
    from autoscaler.target import TargetSpec

    limits = DryRunLimits.unlimited() if name == "unlimited" else DryRunLimits()
    tmp = tempfile.TemporaryDirectory(prefix="bench-dry-run-")
    state = ControllerState()
    store = FilePolicyStore(Path(tmp.name) / "policies.yaml")
    ref = TargetRef("bench", "chat")
    policy = load_policy({"minReplicaCount": 1, "maxReplicaCount": 32})
    spec = TargetSpec(ref=ref, policy=policy, mode="keda")
    state.targets[ref] = TargetStatus(spec=spec, version=(await store.put(spec)).version)
    dstate, replicas = DecisionState(), 2
    for i in range(OBSERVATIONS_LEN):
        waiting = 20.0 + 15.0 * math.sin(i / 30.0)
        obs = Observation(
            t=float(i),
            current_replicas=replicas,
            ready_replicas=replicas,
            signals={"waiting": waiting, "running": 60.0, "kv_cache_usage": 0.5},
        )
        decision, dstate = decide(policy, obs, dstate, float(i))
        replicas = decision.desired_replicas
        await state.publish(ref, obs, decision)
    app = create_app(state, store, ApiSettings(dry_run=limits))
    handle = await serve_http(app, "127.0.0.1", 0)
    ctx = multiprocessing.get_context("spawn")
    try:
        out: multiprocessing.Queue[dict[str, Any]] = ctx.Queue()
        idle = ctx.Process(target=probe_process, args=(handle.port, args.seconds, out))
        idle.start()
        alone = (await asyncio.to_thread(out.get, True, args.seconds + 60))["probe"]
        await asyncio.to_thread(idle.join, 10)

        cpu0, wall0 = time.process_time(), time.perf_counter()
        procs = [
            ctx.Process(
                target=flood_process,
                args=(handle.port, args.seconds, args.clients, args.per_client, out),
            ),
            ctx.Process(target=probe_process, args=(handle.port, args.seconds, out)),
        ]
        for p in procs:
            p.start()
        got: dict[str, Any] = {}
        for _ in procs:
            got.update(await asyncio.to_thread(out.get, True, args.seconds + 120))
        cpu_s, wall_s = time.process_time() - cpu0, time.perf_counter() - wall0
        for p in procs:
            await asyncio.to_thread(p.join, 10)
    finally:
        await handle.stop()
        tmp.cleanup()
    return {
        "alone_ms": alone["lat_ms"],
        "flood_ms": got["probe"]["lat_ms"],
        "statuses": got["flood"],
        "wall_s": wall_s,
        "cpu_s": cpu_s,
    }


def pooled(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """All rounds of one configuration together (rounds alternate between configurations,
    so both see the same drift in machine load)."""
    alone = [x for r in rounds for x in r["alone_ms"]]
    flood = [x for r in rounds for x in r["flood_ms"]]
    wall_s = sum(r["wall_s"] for r in rounds)
    statuses: dict[str, int] = {}
    for r in rounds:
        for k, v in r["statuses"].items():
            statuses[k] = statuses.get(k, 0) + v
    return {
        "healthz_alone_p50_ms": nearest_rank(alone, 0.5),
        "healthz_alone_p99_ms": nearest_rank(alone, 0.99),
        "healthz_flood_p50_ms": nearest_rank(flood, 0.5),
        "healthz_flood_p99_ms": nearest_rank(flood, 0.99),
        "probes": len(flood),
        "dry_run_statuses": statuses,
        "dry_run_per_s": {k: v / wall_s for k, v in sorted(statuses.items())},
        "server_cpu_s_per_s": sum(r["cpu_s"] for r in rounds) / wall_s,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--per-client", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    from autoscaler.logging import configure_logging

    configure_logging(fmt="console", level="WARNING")
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in CONFIGS}
    for _ in range(args.rounds):
        for name in CONFIGS:
            raw[name].append(asyncio.run(serve_and_measure(name, args)))
    results = {name: pooled(rounds) for name, rounds in raw.items()}

    print(
        f"\n/healthz while {args.clients} clients x {args.per_client} connections flood POST "
        f"dry-run ({args.rounds} alternating rounds of {args.seconds:.0f} s per phase, one "
        "target with 600 observations; probe every 20 ms)"
    )
    header = (
        f"  {'dry-run limits':<16}{'p50 alone':>10}{'p50 flood':>10}{'p99 flood':>10}"
        f"{'200/s':>8}{'429/s':>8}{'srv CPU':>9}"
    )
    print(header)
    for name, r in results.items():
        per_s = r["dry_run_per_s"]
        print(
            f"  {name:<16}{r['healthz_alone_p50_ms']:>8.1f}ms"
            f"{r['healthz_flood_p50_ms']:>8.1f}ms{r['healthz_flood_p99_ms']:>8.1f}ms"
            f"{per_s.get('200', 0.0):>8.1f}{per_s.get('429', 0.0):>8.1f}"
            f"{r['server_cpu_s_per_s']:>8.2f}s"
        )
    before, after = results["unlimited"], results["limited"]
    for q in ("p50", "p99"):
        ratio = before[f"healthz_flood_{q}_ms"] / after[f"healthz_flood_{q}_ms"]
        print(f"  /healthz {q} under the flood, unlimited / limited: {ratio:.1f}x")
    out = ROOT / "benchmarks" / "results" / "dry_run.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"config": vars(args), "results": results}, indent=2))
    print(f"\nwrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
