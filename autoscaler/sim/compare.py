"""Run several policies on the same trace, cluster and seed (the CLI's and benchmark's core).

``static-peak`` is sized the way an operator provisions for the peak: the smallest fixed
replica count that meets the SLO-attainment goal on this trace (bisection in the simulator,
no cold starts involved). The goal is counted over admitted requests (rejected ones are
vLLM's 400s). When the goal is above the trace's feasible ceiling (the share of admitted
requests that meet the SLO alone on an idle replica), no fleet can meet it: sizing then
aims at ``goal x ceiling`` and says so (`StaticSizing.note`), never a silent cap.

Same start for everyone: every policy enters the trace at the count it would itself hold
for the opening load, its pods Ready and billed from t = 0. A fixed fleet holds its size.
A dynamic policy's count is where it settles over a pre-roll: the trace's first
``PREROLL_S`` replayed against it from one Ready replica, then from where that ended
(`settled_replicas`). No policy's start depends on another's size (static-peak's
included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.metrics.signals import DEFAULT_WINDOW_S
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.oracle import (
    cold_start_frontier,
    frontier,
    min_gpu_hours,
    min_misses,
    reactive_frontier,
    window_misses,
)
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
    ours_cost_policy,
    ours_lean_policy,
)
from autoscaler.sim.simulator import Autoscaler, SimResult, admission, simulate
from autoscaler.sim.traces import Trace

MAX_STATIC_REPLICAS = 256
PREROLL_S = 900.0  # longer than ours' 450 s scale-down window plus a ramp from one replica
PREROLL_PASSES = 3


@dataclass(frozen=True, slots=True)
class CompareConfig:
    cluster: ClusterConfig
    slo_ttft_s: float = 0.5
    slo_goal: float = 0.99  # static-peak sizing target
    seed: int = 0
    static_replicas: int | None = None  # skip the sizing search
    forecaster: Forecaster | None = None
    # the ours rows' rate/quantile window: the product's pod-scrape default; another value
    # only to measure a change of that default side by side (bench_policies --window-s)
    window_s: float = DEFAULT_WINDOW_S


@dataclass(frozen=True, slots=True)
class StaticSizing:
    """How static-peak was sized: the attainment aimed at and whether it was reached."""

    replicas: int
    goal: float  # the configured goal (e.g. 0.99)
    feasible_ceiling: float  # share of admitted requests meeting the SLO alone, idle
    target: float  # goal, or goal x ceiling when the goal is above the ceiling
    reached: bool | None  # False: even the cap misses it; None: replicas given, no search
    attainment: float | None  # what ``replicas`` reached (over admitted requests)

    @property
    def note(self) -> str:
        """One line for the table title and the JSON ('' when the goal was met as asked)."""
        parts = []
        if self.target < self.goal:
            parts.append(
                f"goal {self.goal:.1%} unreachable: only {self.feasible_ceiling:.1%} of "
                f"admitted requests meet the SLO alone on an idle replica; sized for "
                f"{self.goal:.0%} x {self.feasible_ceiling:.1%} = {self.target:.2%}"
            )
        if self.reached is False and self.attainment is not None:
            parts.append(
                f"target {self.target:.2%} not reached even at the cap of {self.replicas} "
                f"replicas ({self.attainment:.2%})"
            )
        return "; ".join(parts)

    def as_json(self) -> dict[str, object]:
        return {
            "replicas": self.replicas,
            "goal": self.goal,
            "feasible_ceiling": round(self.feasible_ceiling, 5),
            "target": round(self.target, 5),
            "reached": self.reached,
            "attainment": None if self.attainment is None else round(self.attainment, 5),
            "note": self.note,
        }


def static_sizing(
    trace: Trace, cfg: CompareConfig, max_n: int = MAX_STATIC_REPLICAS
) -> StaticSizing:
    """Smallest N whose static run meets the sizing target over admitted requests."""
    admitted, ceiling, target = _sizing_target(trace, cfg)
    reached: dict[int, float] = {}

    # More certain misses than this and the target is out of reach: stop that run early
    # (exact: misses only grow; the +1 keeps float rounding on the side of running on).
    budget = math.floor(admitted * (1.0 - target)) + 1

    def ok(n: int) -> bool:
        res = simulate(
            trace,
            StaticPeak(n),
            cfg.cluster,
            slo_ttft_s=cfg.slo_ttft_s,
            seed=cfg.seed,
            miss_budget=None if n >= max_n else budget,
        )
        if res.stopped_early:
            return False
        reached[n] = int(np.count_nonzero(res.ttft_s <= cfg.slo_ttft_s)) / admitted
        return reached[n] >= target - 1e-12

    def result(n: int, met: bool) -> StaticSizing:
        return StaticSizing(n, cfg.slo_goal, ceiling, target, met, reached[n])

    hi = 1
    while not ok(hi):
        if hi >= max_n:
            return result(max_n, False)
        hi = min(max_n, hi * 2)
    return result(smallest_satisfying(ok, hi // 2 + 1 if hi > 1 else 1, hi), True)


def smallest_satisfying(ok: Callable[[int], bool], lo: int, hi: int) -> int:
    """Smallest n in [lo, hi] with ok(n), by bisection; ok must be monotone in n and
    true at hi (the caller checked). The one fleet-size search of the simulator's
    sizings (static sizing here, the fixed P/D split in bench_pd)."""
    while lo < hi:
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


def _sizing_target(trace: Trace, cfg: CompareConfig) -> tuple[int, float, float]:
    """(admitted requests, feasible ceiling, attainment target)."""
    rejected, infeasible = admission(trace, cfg.cluster.profile, cfg.slo_ttft_s)
    admitted = max(1, int(np.count_nonzero(~rejected)))
    ceiling = 1.0 - int(np.count_nonzero(infeasible)) / admitted
    return admitted, ceiling, cfg.slo_goal if cfg.slo_goal <= ceiling else cfg.slo_goal * ceiling


def size_static(trace: Trace, cfg: CompareConfig, max_n: int = MAX_STATIC_REPLICAS) -> int:
    """`static_sizing`'s replica count (the benchmarks' shorthand)."""
    return static_sizing(trace, cfg, max_n).replicas


def settled_replicas(
    trace: Trace,
    make: Callable[[int], Autoscaler],
    cluster: ClusterConfig,
    slo_ttft_s: float,
    seed: int = 0,
) -> int:
    """The count the policy ``make(initial)`` builds settles on over the pre-roll: the
    trace's first `PREROLL_S` replayed against it from one Ready replica, then again from
    where that ended (so the ramp from one replica and the backlog it built do not count),
    up to `PREROLL_PASSES` times until the count repeats. A fixed fleet: its size. Where
    a policy enters the trace (the same rule for every policy)."""
    if isinstance(fixed := make(1), StaticPeak):
        return fixed.replicas
    head = trace.window(0.0, PREROLL_S)
    count = 1
    for _ in range(PREROLL_PASSES):
        res = simulate(
            head, make(count), cluster, slo_ttft_s=slo_ttft_s, seed=seed, stop_at_s=PREROLL_S
        )
        settled = max(1, res.timeline_spec[-1]) if res.timeline_spec else count
        if settled == count:
            break
        count = settled
    return count


def parse_static_sweep(spec: str) -> list[int]:
    """``A..B`` (or a single ``N``) -> the fixed fleet sizes A..B inclusive."""
    lo_s, sep, hi_s = spec.partition("..")
    try:
        lo = int(lo_s)
        hi = int(hi_s) if sep else lo
    except ValueError:
        raise ConfigError(f"--static-sweep: value {spec!r} must be A..B (integers)") from None
    if not 1 <= lo <= hi <= MAX_STATIC_REPLICAS:
        raise ConfigError(
            f"--static-sweep: value {spec!r} must satisfy 1 <= A <= B <= {MAX_STATIC_REPLICAS}"
        )
    return list(range(lo, hi + 1))


def build_policy(name: str, static_n: int, initial: int, cfg: CompareConfig) -> Autoscaler:
    if name == "static-peak":
        return StaticPeak(static_n)
    fixed = name.removeprefix("static-")
    if fixed != name and fixed.isdigit() and int(fixed) >= 1:
        return StaticPeak(int(fixed), name=name)  # one fixed fleet of a --static-sweep
    if name == "hpa-gpu-util":
        return HpaGpuUtil(initial)
    if name == "keda-seed":
        return keda_seed(initial)
    if name == "knative-kpa":
        return KnativeKpa(initial)
    if name == "aibrix-apa":
        return AibrixApa(initial)
    slo = cfg.slo_ttft_s  # the planner learns capacity against the SLO under test
    win = cfg.window_s
    if name == "ours":
        return ours(initial, cfg.forecaster, slo_ttft_s=slo, window_s=win)
    if name == "ours-capacity":
        return ours(initial, cfg.forecaster, ours_capacity_policy(), slo, name, win)
    if name == "ours-lean":
        return ours(initial, cfg.forecaster, ours_lean_policy(), slo, name, win)
    if name == "ours-cost":
        return ours(initial, cfg.forecaster, ours_cost_policy(), slo, name, win)
    raise ConfigError(
        f"--policy: value {name!r} must be 'all', 'oracle' or one of {', '.join(POLICY_NAMES)}"
    )


def run_policies(
    trace: Trace,
    names: Sequence[str],
    cfg: CompareConfig,
    progress: Callable[[str, float], None] | None = None,
) -> tuple[list[SimResult], int]:
    """Results in the order of ``names`` and the static-peak replica count used."""
    results, sizing = run_comparison(trace, names, cfg, progress)
    return results, sizing.replicas


def run_comparison(
    trace: Trace,
    names: Sequence[str],
    cfg: CompareConfig,
    progress: Callable[[str, float], None] | None = None,
) -> tuple[list[SimResult], StaticSizing]:
    """Results in the order of ``names`` and how static-peak was sized (given replicas:
    a sizing with ``reached`` and ``attainment`` taken from that fleet's run)."""
    for name in names:
        if name not in POLICY_NAMES:
            build_policy(name, 1, 1, cfg)  # raises the ConfigError naming the choices
    if cfg.static_replicas is None:
        sizing = static_sizing(trace, cfg)
    else:
        _, ceiling, target = _sizing_target(trace, cfg)
        sizing = StaticSizing(cfg.static_replicas, cfg.slo_goal, ceiling, target, None, None)
    static_n = sizing.replicas
    results: list[SimResult] = []
    for name in names:

        def make(initial: int, name: str = name) -> Autoscaler:
            return build_policy(name, static_n, initial, cfg)

        policy = make(settled_replicas(trace, make, cfg.cluster, cfg.slo_ttft_s, cfg.seed))

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
    return results, sizing


def with_cluster(cfg: CompareConfig, cluster: ClusterConfig) -> CompareConfig:
    return replace(cfg, cluster=cluster)


def oracle_report(
    trace: Trace,
    cfg: CompareConfig,
    sizing: StaticSizing,
    summaries: Sequence[dict[str, object]],
) -> dict[str, Any]:
    """The clairvoyant bound (`oracle.py`) as a table row plus, per policy, what the
    oracle needs at the same misses and reaches with the same GPU-hours.

    The row is the oracle at the static sizing target; replica counts up to static-peak
    + 6 are replayed per 60 s window."""
    max_n = sizing.replicas + 6
    table = window_misses(
        trace, cfg.cluster, max_replicas=max_n, slo_ttft_s=cfg.slo_ttft_s, seed=cfg.seed
    )
    points = frontier(table)
    cold_s = float(cfg.cluster.cold_start.warm_median_s)
    cold_points = cold_start_frontier(table, cold_s)
    reactive_points = reactive_frontier(table, cold_s)
    admitted = table.total_requests
    target_misses = admitted * (1.0 - sizing.target)
    gpu_h = min_gpu_hours(points, target_misses)
    at = None if gpu_h is None else min_misses(points, gpu_h)
    misses = None if at is None else math.floor(at + 1e-9)
    row: dict[str, object] = {"policy": "oracle", "trace": trace.name, "requests": len(trace)}
    row.update(
        gpu_hours=None if gpu_h is None else round(gpu_h, 4),
        cost_usd=None if gpu_h is None else round(gpu_h * cfg.cluster.price_per_gpu_hour, 2),
        slo_ttft_s=cfg.slo_ttft_s,
        slo_attainment=None if misses is None else round(1 - misses / max(1, admitted), 5),
        slo_misses=misses,
    )
    per_policy: dict[str, dict[str, float | None]] = {}
    for s in summaries:
        g = s.get("gpu_hours")
        m = s.get("slo_misses")
        if not isinstance(g, float | int) or not isinstance(m, int):
            continue
        at_misses = min_gpu_hours(points, float(m))
        at_gpu = min_misses(points, float(g))
        row_p: dict[str, float | None] = {
            "oracle_gpu_hours_at_same_misses": None if at_misses is None else round(at_misses, 4),
            "oracle_misses_at_same_gpu_hours": None if at_gpu is None else round(at_gpu, 1),
        }
        for key, pts in (("cold_start_oracle", cold_points), ("reactive", reactive_points)):
            gh = min_gpu_hours(pts, float(m))
            mm = min_misses(pts, float(g))
            row_p[f"{key}_gpu_hours_at_same_misses"] = None if gh is None else round(gh, 4)
            row_p[f"{key}_misses_at_same_gpu_hours"] = None if mm is None else round(mm, 1)
        per_policy[str(s["policy"])] = row_p
    detail = {
        "window_s": table.window_s,
        "max_replicas": max_n,
        "target_attainment": round(sizing.target, 5),
        "gpu_hours_at_target": row["gpu_hours"],
        "frontier": [[round(p.gpu_hours, 4), round(p.misses, 1)] for p in points],
        "cold_start_s": cold_s,
        "cold_start_frontier": [[round(p.gpu_hours, 4), round(p.misses, 1)] for p in cold_points],
        "reactive_frontier": [[round(p.gpu_hours, 4), round(p.misses, 1)] for p in reactive_points],
        "per_policy": per_policy,
    }
    return {"row": row, "detail": detail}
