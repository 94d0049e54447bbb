"""Run several policies on the same trace, cluster and seed (the CLI's and benchmark's core).

``static-peak`` is sized the way an operator provisions for the peak: the smallest fixed
replica count that meets the SLO-attainment goal on this trace (bisection in the simulator,
no cold starts involved). Dynamic policies start from a Deployment already sized for the
first five minutes of load (``static * rate(first 5 min) / rate(peak 5 min)``), as if they
had been running before the trace began.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.policies import (
    POLICY_NAMES,
    AibrixApa,
    Forecaster,
    HpaGpuUtil,
    KnativeKpa,
    StaticPeak,
    keda_seed,
    ours,
    ours_capacity_policy,
    ours_lean_policy,
)
from autoscaler.sim.simulator import Autoscaler, SimResult, simulate
from autoscaler.sim.traces import Trace


@dataclass(frozen=True, slots=True)
class CompareConfig:
    cluster: ClusterConfig
    slo_ttft_s: float = 0.5
    slo_goal: float = 0.99  # static-peak sizing target
    seed: int = 0
    static_replicas: int | None = None  # skip the sizing search
    forecaster: Forecaster | None = None


def size_static(trace: Trace, cfg: CompareConfig, max_n: int = 256) -> int:
    """Smallest N whose static run keeps ``slo_goal`` of TTFTs within the SLO."""

    def ok(n: int) -> bool:
        res = simulate(trace, StaticPeak(n), cfg.cluster, slo_ttft_s=cfg.slo_ttft_s, seed=cfg.seed)
        served = int(np.count_nonzero(res.ttft_s <= cfg.slo_ttft_s))
        return served >= cfg.slo_goal * len(trace)

    hi = 1
    while not ok(hi):
        if hi >= max_n:
            return max_n
        hi = min(max_n, hi * 2)
    lo = hi // 2 + 1 if hi > 1 else 1
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def initial_replicas(trace: Trace, static_n: int) -> int:
    """Replicas for the first five minutes' load, proportional to the peak's static size."""
    rate = trace.rate_per_s(300.0)
    if len(rate) == 0 or rate.max() <= 0:
        return 1
    return max(1, math.ceil(static_n * float(rate[0]) / float(rate.max())))


def build_policy(name: str, static_n: int, initial: int, cfg: CompareConfig) -> Autoscaler:
    if name == "static-peak":
        return StaticPeak(static_n)
    if name == "hpa-gpu-util":
        return HpaGpuUtil(initial)
    if name == "keda-seed":
        return keda_seed(initial)
    if name == "knative-kpa":
        return KnativeKpa(initial)
    if name == "aibrix-apa":
        return AibrixApa(initial)
    if name == "ours":
        return ours(initial, cfg.forecaster)
    if name == "ours-capacity":
        return ours(initial, cfg.forecaster, policy=ours_capacity_policy(), name=name)
    if name == "ours-lean":
        return ours(initial, cfg.forecaster, policy=ours_lean_policy(), name=name)
    raise ConfigError(f"--policy: value {name!r} must be 'all' or one of {', '.join(POLICY_NAMES)}")


def run_policies(
    trace: Trace,
    names: Sequence[str],
    cfg: CompareConfig,
    progress: Callable[[str, float], None] | None = None,
) -> tuple[list[SimResult], int]:
    """Results in the order of ``names`` and the static-peak replica count used."""
    for name in names:
        if name not in POLICY_NAMES:
            build_policy(name, 1, 1, cfg)  # raises the ConfigError naming the choices
    static_n = cfg.static_replicas or size_static(trace, cfg)
    initial = initial_replicas(trace, static_n)
    results: list[SimResult] = []
    for name in names:
        policy = build_policy(name, static_n, initial, cfg)

        def report(frac: float, name: str = name) -> None:
            if progress is not None:
                progress(name, frac)

        results.append(
            simulate(
                trace,
                policy,
                cfg.cluster,
                slo_ttft_s=cfg.slo_ttft_s,
                seed=cfg.seed,
                progress=report,
            )
        )
    return results, static_n


def with_cluster(cfg: CompareConfig, cluster: ClusterConfig) -> CompareConfig:
    return replace(cfg, cluster=cluster)
