"""Warm pool: what pause pods sized from the forecast buy when scale-ups need new nodes.

``ours`` with and without ``warmPool`` (min 0, max 4, lead time 300 s: about the p50-p90
node provisioning of the default cold-start model), on the code hour (bursts shorter than
a cold start) and the two x8 days of ``bench_policies.py`` (``--labels``), on nodes of 2
GPUs (``--gpus-per-node``) so that growing the fleet keeps asking for new nodes
(provisioning 120/300 s plus an uncached image pull 120/360 s, median/p90). A warm pool
skips node provisioning and the image pull, not the container start (engine init,
weights, compile, CUDA graphs, readiness: ~57 s median). Pause pods are billed like
inference pods: a reserved GPU costs the same. Same trace, seed and SLO for both, over
three cluster seeds (the cold-start draws differ by seed, and a handful of scale-ups per
day makes one seed luck); prints a table and writes
``benchmarks/results/warmpool.json``.

    .venv/bin/python benchmarks/bench_warmpool.py [--quick] [--jobs N]
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import PROFILE, SLO_TTFT_S, scenarios

from autoscaler.policy.schema import WarmPool
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import (
    settled_replicas,
)
from autoscaler.sim.policies import ours, ours_policy
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import publish
from autoscaler.sim.simulator import simulate
from autoscaler.sim.traces import Trace

ROOT = Path(__file__).resolve().parents[1]
GPUS_PER_NODE = 2
POOL = WarmPool(enabled=True, min_replicas=0, max_replicas=4, lead_time_seconds=300)
LABELS = ("code", "diurnal day x8", "business day x8")


def _run(args: tuple[Trace, ClusterConfig, int, bool, int]) -> dict[str, Any]:
    trace, cluster, initial, pool, seed = args
    policy = ours_policy()
    if pool:
        policy = policy.model_copy(update={"warm_pool": POOL})
    autoscaler = ours(initial, policy=policy, slo_ttft_s=SLO_TTFT_S)
    res = simulate(trace, autoscaler, cluster, slo_ttft_s=SLO_TTFT_S, seed=seed)
    s = res.summary()
    sizes = [n for _, n in autoscaler.warm_pool_history]
    starts = sorted(x for x in res.cold_start_s if x > 0)
    return {
        "warm_pool": pool,
        "seed": seed,
        "gpu_hours": s["gpu_hours"],
        "slo_attainment": s["slo_attainment"],
        "slo_misses": s["slo_misses"],
        "scale_events": s["scale_events"],
        "cold_start_p50_s": s["cold_start_p50_s"],
        "cold_start_max_s": round(starts[-1], 1) if starts else None,
        "pool_mean": round(sum(sizes) / len(sizes), 3) if sizes else 0.0,
        "pool_max": max(sizes) if sizes else 0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="the --quick days of bench_policies")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--seeds", default="0,1,2", help="cluster seeds (cold-start draws)")
    ap.add_argument("--labels", default=",".join(LABELS), help="comma-separated scenarios")
    ap.add_argument("--gpus-per-node", type=int, default=GPUS_PER_NODE, help="GPUs per node")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "warmpool.json")
    args = ap.parse_args()
    cluster = ClusterConfig(profile=get_profile(PROFILE), gpus_per_node=args.gpus_per_node)
    labels = [x.strip() for x in args.labels.split(",") if x.strip()]
    doc: dict[str, Any] = {
        "command": "python benchmarks/bench_warmpool.py"
        + (" --quick" if args.quick else "")
        + ("" if args.labels == ",".join(LABELS) else f' --labels "{args.labels}"')
        + ("" if args.gpus_per_node == GPUS_PER_NODE else f" --gpus-per-node {args.gpus_per_node}"),
        "profile": PROFILE,
        "gpus_per_node": args.gpus_per_node,
        "warm_pool": POOL.dump(),
        "slo_ttft_s": SLO_TTFT_S,
        "seeds": args.seeds,
        "scenarios": {},
    }
    rows = [
        "| scenario | warm pool | seed | GPU-h | SLO att. | misses | cold start p50 / max s "
        "| pool mean / max |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    jobs = []
    for label, trace, _ in scenarios(args.quick):
        if label not in labels:
            continue
        initial = settled_replicas(  # the same start rule as bench_policies (pre-roll)
            trace,
            lambda n: ours(n, policy=ours_policy(), slo_ttft_s=SLO_TTFT_S),
            cluster,
            SLO_TTFT_S,
        )
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        jobs += [
            (label, (trace, cluster, initial, pool, seed))
            for seed in seeds
            for pool in (False, True)
        ]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool_ex:
        results = list(pool_ex.map(_run, [j for _, j in jobs]))
    for (label, _), r in zip(jobs, results, strict=True):
        doc["scenarios"].setdefault(label, []).append(r)
        rows.append(
            f"| {label} | {'on' if r['warm_pool'] else 'off'} | {r['seed']} | "
            f"{r['gpu_hours']:.2f} | "
            f"{r['slo_attainment']:.4f} | {r['slo_misses']} | {r['cold_start_p50_s']} / "
            f"{r['cold_start_max_s']} | {r['pool_mean']} / {r['pool_max']} |"
        )
    rows += ["", "| scenario | warm pool | mean GPU-h | mean SLO att. | mean misses |"]
    rows.append("|---|---|---:|---:|---:|")
    for label, runs in doc["scenarios"].items():
        for pool in (False, True):
            rs = [r for r in runs if r["warm_pool"] is pool]
            g = sum(r["gpu_hours"] for r in rs) / len(rs)
            a = sum(r["slo_attainment"] for r in rs) / len(rs)
            m = sum(r["slo_misses"] for r in rs) / len(rs)
            rows.append(f"| {label} | {'on' if pool else 'off'} | {g:.2f} | {a:.4f} | {m:.0f} |")
    doc["markdown"] = "\n".join(rows)
    publish(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
