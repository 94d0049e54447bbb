"""Policy variants on the business day x8 and the code trace: where the frontier lies.

The issue-7 target "<= 40% of static-peak's GPU-hours at >= 99%" on the business day
sits on the line that every causal variant of ``ours`` tried lands on; this script runs
those variants (one change each to the recommended policy, or the combination that
meets the target on this day) and, next to it, the code trace, where the same change can
cost attainment. Seed 0, same cluster and SLO as ``bench_policies.py``. Prints a table
and writes ``benchmarks/results/variants.json``.

    .venv/bin/python benchmarks/bench_variants.py [--jobs N]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import PROFILE, SEED, SLO_TTFT_S, scenarios

from autoscaler.policy.schema import Behavior, MetricSpec, Policy, Prediction, ScalingRules
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import initial_replicas
from autoscaler.sim.policies import ours, ours_capacity_policy, ours_lean_policy, ours_policy
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import publish
from autoscaler.sim.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
STATIC = {"business day x8": 7, "code": 5}  # bench_policies' static-peak sizes


def _running(policy: Policy, target: float) -> Policy:
    metrics = tuple(
        m.model_copy(update={"target": target}) if m.signal == "running" else m
        for m in policy.metrics
    )
    return policy.model_copy(update={"metrics": metrics})


def _scale_down(policy: Policy, window_s: int) -> Policy:
    return policy.model_copy(
        update={
            "behavior": Behavior(scale_down=ScalingRules(stabilization_window_seconds=window_s))
        }
    )


def _extra(policy: Policy, spec: MetricSpec) -> Policy:
    return policy.model_copy(update={"metrics": (*policy.metrics, spec)})


def _learned(policy: Policy, headroom: float) -> Policy:
    pred = Prediction(
        learned_capacity_signal="prompt_tokens_per_s", learned_capacity_headroom=headroom
    )
    return policy.model_copy(update={"prediction": pred})


VARIANTS: dict[str, Callable[[], Policy]] = {
    "ours": ours_policy,
    "scale-down window 300 s": lambda: _scale_down(ours_policy(), 300),
    "prediction off": lambda: ours_policy().model_copy(update={"prediction": None}),
    "horizon 300 s": lambda: ours_policy().model_copy(
        update={"prediction": Prediction(horizon_seconds=300)}
    ),
    "running target 24": lambda: _running(ours_policy(), 24.0),
    "+ ttft_p95 Value 0.45": lambda: _extra(
        ours_policy(), MetricSpec(signal="ttft_p95_s", type="Value", target=0.45)
    ),
    "+ ttft_p99 Value 0.5": lambda: _extra(
        ours_policy(), MetricSpec(signal="ttft_p99_s", type="Value", target=0.5)
    ),
    "+ arrival_rate 7/replica": lambda: _extra(
        ours_policy(), MetricSpec(signal="arrival_rate_per_s", target=7.0)
    ),
    "+ prompt_tokens 10k/replica": lambda: _extra(
        ours_policy(), MetricSpec(signal="prompt_tokens_per_s", target=10_000.0)
    ),
    "ours-capacity": ours_capacity_policy,
    "learned x0.9, running 48, window 600 s": lambda: _learned(_running(ours_policy(), 48.0), 0.9),
    "learned x0.9, running 48, window 300 s (ours-lean)": ours_lean_policy,
}


def _one(args: tuple[str, str]) -> dict[str, Any]:
    label, variant = args
    trace = next(t for name, t, _ in scenarios(False) if name == label)
    cluster = ClusterConfig(profile=get_profile(PROFILE))
    autoscaler = ours(initial_replicas(trace, STATIC[label]), policy=VARIANTS[variant]())
    s = simulate(trace, autoscaler, cluster, slo_ttft_s=SLO_TTFT_S, seed=SEED).summary()
    return {
        "scenario": label,
        "variant": variant,
        "gpu_hours": s["gpu_hours"],
        "vs_static": round(s["gpu_hours"] / (STATIC[label] * trace.duration_s / 3600), 3),
        "slo_attainment": s["slo_attainment"],
        "slo_misses": s["slo_misses"],
        "scale_events": s["scale_events"],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "variants.json")
    args = ap.parse_args()
    jobs = [(label, v) for v in VARIANTS for label in STATIC]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(_one, jobs))
    by = {(r["scenario"], r["variant"]): r for r in runs}
    rows = [
        "| variant | business day x8: GPU-h (/ static-peak) | att. | code: GPU-h | att. |",
        "|---|---:|---:|---:|---:|",
    ]
    for v in VARIANTS:
        b, c = by[("business day x8", v)], by[("code", v)]
        rows.append(
            f"| {v} | {b['gpu_hours']:.2f} ({b['vs_static']:.3f}) | {b['slo_attainment']:.4f} "
            f"| {c['gpu_hours']:.2f} | {c['slo_attainment']:.4f} |"
        )
    publish(
        args.out,
        {
            "command": "python benchmarks/bench_variants.py",
            "seed": SEED,
            "runs": runs,
            "markdown": "\n".join(rows),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
