"""Why ``ours``' defaults are what they are (issue 18): one change each, three hours.

The prompt-tokens/s target and the scale-down window of ``ours`` were chosen on three
one-hour scenarios that pull in different directions: conv x4 (short prompts; the target
only costs replicas), code (bursts shorter than a cold start; a short window releases
replicas between bursts) and the synthesized long-context chat hour (prefill-heavy; the
queue targets miss it, a long window holds replicas after a ramp). Seed 0, the cluster,
profile and SLO of each scenario as in ``bench_policies.py``; initial replicas from its
static-peak size. Prints a table and writes ``benchmarks/results/variants.json``.

    .venv/bin/python benchmarks/bench_variants.py [--jobs N]
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import SEED, scenarios, setup

from autoscaler.policy.schema import (
    Behavior,
    MetricSpec,
    Policy,
    Prediction,
    ScalingPolicy,
    ScalingRules,
)
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import parse_static_sweep, settled_replicas
from autoscaler.sim.policies import SCALE_DOWN_WINDOW_S, Ours, StaticPeak, ours, ours_policy
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import publish
from autoscaler.sim.simulator import simulate

ROOT = Path(__file__).resolve().parents[1]
# bench_policies' static-peak sizes (initial replicas follow from them)
STATIC = {"conv x4": 4, "code": 6, "long-context chat": 13, "long-context chat x4": 50}
DEFAULT_SCENARIOS = ("conv x4", "code", "long-context chat")
FLEET = "fixed fleet "


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


def _without_prompt_tokens(policy: Policy) -> Policy:
    metrics = tuple(m for m in policy.metrics if m.signal != "prompt_tokens_per_s")
    return policy.model_copy(update={"metrics": metrics})


def _prompt_tokens(policy: Policy, target: float) -> Policy:
    metrics = tuple(
        m.model_copy(update={"target": target}) if m.signal == "prompt_tokens_per_s" else m
        for m in policy.metrics
    )
    return policy.model_copy(update={"metrics": metrics})


def _scale_down_rules(policy: Policy, **update: Any) -> Policy:
    rules = ScalingRules(stabilization_window_seconds=SCALE_DOWN_WINDOW_S).model_copy(update=update)
    return policy.model_copy(update={"behavior": Behavior(scale_down=rules)})


def _scale_up(policy: Policy, window_s: int) -> Policy:
    """``policy`` with a scale-up stabilisation window (its scale-down rules kept)."""
    behavior = policy.behavior.model_copy(
        update={"scale_up": ScalingRules(stabilization_window_seconds=window_s)}
    )
    return policy.model_copy(update={"behavior": behavior})


def _forecaster(policy: Policy, name: str) -> Policy:
    assert policy.prediction is not None
    pred = policy.prediction.model_copy(update={"forecaster": name})
    return policy.model_copy(update={"prediction": pred})


def _floor(policy: Policy, replicas: int) -> Policy:
    return policy.model_copy(update={"min_replica_count": replicas})


VARIANTS: dict[str, Callable[[], Policy]] = {
    "ours (prompt tokens 8000, window 450 s)": ours_policy,
    "queue targets only (before issue 18)": lambda: _without_prompt_tokens(ours_policy()),
    "prompt tokens 6000": lambda: _prompt_tokens(ours_policy(), 6000.0),
    "prompt tokens 10000": lambda: _prompt_tokens(ours_policy(), 10_000.0),
    "scale-down window 300 s": lambda: _scale_down(ours_policy(), 300),
    "scale-down window 600 s": lambda: _scale_down(ours_policy(), 600),
    # steadier fleets for smooth load (long-context chat x4, docs/benchmarks.md)
    "scale-down tolerance 0.3": lambda: _scale_down_rules(ours_policy(), tolerance=0.3),
    "scale-down 1 pod per 60 s": lambda: _scale_down_rules(
        ours_policy(), policies=(ScalingPolicy(type="Pods", value=1, period_seconds=60),)
    ),
    "minReplicaCount 28": lambda: _floor(ours_policy(), 28),
    # noise filters for a smooth, heavy-tailed prefill load (long-context chat x4)
    "forecaster ewma": lambda: _forecaster(ours_policy(), "ewma"),
    "prediction off": lambda: ours_policy().model_copy(update={"prediction": None}),
    "scale-up window 60 s": lambda: _scale_up(ours_policy(), 60),
    "scale-up window 120 s": lambda: _scale_up(ours_policy(), 120),
    "scale-up window 120 s + scale-down 300 s": lambda: _scale_up(
        _scale_down(ours_policy(), 300), 120
    ),
    "scale-up window 300 s": lambda: _scale_up(ours_policy(), 300),
    "scale-down off": lambda: _scale_down_rules(ours_policy(), select_policy="Disabled"),
    "scale-down off + scale-up window 120 s": lambda: _scale_up(
        _scale_down_rules(ours_policy(), select_policy="Disabled"), 120
    ),
    "scale-down off + scale-up window 300 s": lambda: _scale_up(
        _scale_down_rules(ours_policy(), select_policy="Disabled"), 300
    ),
    "scale-down window 1800 s": lambda: _scale_down(ours_policy(), 1800),
}


def _one(args: tuple[str, str, int | None]) -> dict[str, Any]:
    label, variant, start = args
    trace = next(t for name, t, _ in scenarios(False) if name == label)
    profile, slo = setup(label)
    cluster = ClusterConfig(profile=get_profile(profile))
    if variant.startswith(FLEET):
        fleet = StaticPeak(int(variant.removeprefix(FLEET)), name=variant)
        s = simulate(trace, fleet, cluster, slo_ttft_s=slo, seed=SEED).summary()
    else:
        policy = VARIANTS[variant]()

        def make(initial: int) -> Ours:
            return ours(initial, policy=policy, slo_ttft_s=slo)

        initial = settled_replicas(trace, make, cluster, slo, SEED) if start is None else start
        autoscaler = make(initial)
        s = simulate(trace, autoscaler, cluster, slo_ttft_s=slo, seed=SEED).summary()
    return {
        "scenario": label,
        "variant": variant,
        "gpu_hours": s["gpu_hours"],
        "vs_static": round(s["gpu_hours"] / (STATIC[label] * trace.duration_s / 3600), 3),
        "slo_attainment": s["slo_attainment"],
        "slo_misses": s["slo_misses"],
        "scale_events": s["scale_events"],
    }


def _dominates(o: dict[str, Any], r: dict[str, Any]) -> bool:
    """``o`` uses no more GPU-hours at no lower attainment, strictly better on one."""
    g, a, og, oa = r["gpu_hours"], r["slo_attainment"], o["gpu_hours"], o["slo_attainment"]
    return og <= g and oa >= a and (og < g or oa > a)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--scenarios",
        default=",".join(DEFAULT_SCENARIOS),
        help=f"comma-separated, from: {', '.join(STATIC)}",
    )
    ap.add_argument("--variants", default="", help="comma-separated variant names (default all)")
    ap.add_argument(
        "--fleets",
        default="",
        help="A..B: also run fixed fleets of A..B replicas and say which dominate a variant",
    )
    ap.add_argument(
        "--initial-replicas",
        type=int,
        default=None,
        help="start every variant at N replicas instead of the benchmarks' rule (a "
        "diagnostic: how much of a variant's GPU-hours is its start)",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "variants.json")
    args = ap.parse_args()
    fleets = [f"{FLEET}{n}" for n in parse_static_sweep(args.fleets)] if args.fleets else []
    labels = [x.strip() for x in args.scenarios.split(",") if x.strip()]
    # names may hold ", " themselves: only a comma not followed by a space separates
    names = [x.strip() for x in re.split(r",(?! )", args.variants) if x.strip()] or list(VARIANTS)
    for x in labels:
        if x not in STATIC:
            raise SystemExit(f"--scenarios: value {x!r} must be one of {', '.join(STATIC)}")
    for x in names:
        if x not in VARIANTS:
            raise SystemExit(f"--variants: value {x!r} must be one of {', '.join(VARIANTS)}")
    jobs = [(label, v, args.initial_replicas) for v in names + fleets for label in labels]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        runs = list(pool.map(_one, jobs))
    by = {(r["scenario"], r["variant"]): r for r in runs}
    rows = [
        "| variant | " + " | ".join(f"{label}: GPU-h / att." for label in labels) + " |",
        "|---|" + "---:|" * len(labels),
    ]
    for v in names + fleets:
        cells = []
        for label in labels:
            r = by[(label, v)]
            cell = f"{r['gpu_hours']:.2f} / {r['slo_attainment']:.4f}"
            if fleets and v in names:
                beaten = [f for f in fleets if _dominates(by[(label, f)], r)]
                r["dominated_by"] = beaten
                cell += f" (dominated by {beaten[0]})" if beaten else " (not dominated)"
            cells.append(cell)
        rows.append(f"| {v} | " + " | ".join(cells) + " |")
    publish(
        args.out,
        {
            "command": "python benchmarks/bench_variants.py"
            + (f" --scenarios {args.scenarios!r}" if labels != list(DEFAULT_SCENARIOS) else "")
            + (f" --variants {args.variants!r}" if args.variants else "")
            + (f" --fleets {args.fleets}" if args.fleets else "")
            + (f" --initial-replicas {args.initial_replicas}" if args.initial_replicas else ""),
            "seed": SEED,
            "runs": runs,
            "markdown": "\n".join(rows),
        },
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
