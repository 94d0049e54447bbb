"""Named policy profiles per workload class (docs/policy.md#workload-classes).

A profile is a whole `Policy` document built from the schema's defaults, so it can be
dumped to YAML and pasted into an ``LLMAutoscaler`` or a ``decide`` call. The numbers
behind each choice are in docs/benchmarks.md (``benchmarks/bench_policies.py``).

- ``recommended``: the schema defaults plus prediction on and a 450 s scale-down window
  (what the simulator benchmarks call ``ours``). The one default: dominated by no
  baseline and no fixed fleet on the bursty and diurnal scenarios.
- ``cost-first``: for chat traffic that moves slowly with the time of day (diurnal days,
  short prompts), where the cost target is "fewer misses than a KEDA queue trigger at no
  more GPU-hours" rather than the highest attainment: prompt tokens/s 12000, waiting 8
  and running 64 per replica, HPA's 300 s scale-down window. Not for bursts shorter than
  a cold start (code): there it releases replicas a fixed fleet would keep.
"""

from __future__ import annotations

from collections.abc import Callable

from autoscaler.policy.schema import Behavior, Policy, Prediction, ScalingRules

RECOMMENDED_SCALE_DOWN_WINDOW_S = 450


def recommended(max_replicas: int = 64) -> Policy:
    """Schema defaults, prediction on, scale-down window 450 s: longer than a p90
    warm-node cold start plus a provisioning median, so a replica released in a lull is
    seldom bought back with a cold start at the next burst (600 s held too much after a
    ramp on the smooth long-context hour, 300 s released too early between code bursts)."""
    return Policy(
        min_replica_count=1,
        max_replica_count=max_replicas,
        prediction=Prediction(),
        behavior=Behavior(
            scale_down=ScalingRules(stabilization_window_seconds=RECOMMENDED_SCALE_DOWN_WINDOW_S)
        ),
    )


COST_FIRST_TARGETS: dict[str, float] = {
    "prompt_tokens_per_s": 12_000.0,
    "waiting": 8.0,
    "running": 64.0,
}


def cost_first(max_replicas: int = 64) -> Policy:
    """``recommended`` with per-replica targets 1.5-2x higher (prompt tokens/s 12000,
    waiting 8, running 64) and HPA's 300 s scale-down window."""
    base = recommended(max_replicas)
    metrics = tuple(
        m.model_copy(update={"target": COST_FIRST_TARGETS[m.signal]})
        if m.signal in COST_FIRST_TARGETS
        else m
        for m in base.metrics
    )
    return base.model_copy(
        update={
            "metrics": metrics,
            "behavior": Behavior(scale_down=ScalingRules(stabilization_window_seconds=300)),
        }
    )


PROFILES: dict[str, Callable[[], Policy]] = {
    "recommended": recommended,
    "cost-first": cost_first,
}


def profile(name: str) -> Policy:
    """The named profile; an unknown name fails naming the choices."""
    try:
        return PROFILES[name]()
    except KeyError:
        raise ValueError(
            f"profile: value {name!r} must be one of {', '.join(sorted(PROFILES))}"
        ) from None
