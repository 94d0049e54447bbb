"""An optimistic bound on what any autoscaler can reach on a trace (the "oracle").

Issue 7 asks for targets such as "at least 5x fewer SLO misses than keda-seed at no more
GPU-hours". Before tuning a policy towards such a target it is worth knowing whether any
policy can reach it. The oracle here knows the future, changes the replica count every
``window_s`` seconds at no cost (no cold start, no billing of pods that are starting) and
picks each window's count to trade GPU-hours against misses optimally over the whole
trace. Whatever it cannot reach, no real policy reaches in this simulator.

How: the trace is cut into windows. For every window and every replica count ``n`` the
window is replayed on ``n`` ready replicas (after ``warmup_s`` of the preceding requests,
so queues are in their steady state for ``n``) and its misses counted; this is
`WindowTable`. The best allocation of counts to windows for every GPU-hour budget is then
the lower convex hull of the sum of the per-window trade-offs (a Lagrangian relaxation:
each window's own hull, merged by the misses saved per GPU-hour, steepest first). The hull
is a lower bound of the integer problem, so `min_gpu_hours` and `min_misses` err on the
side of the oracle, never of the policy under test.

Optimistic in four ways, each stated so the bound is not mistaken for a forecast: no cold
start, free instant changes at window edges, queues that start each window in the steady
state of its own ``n``, and fractional allocations on the hull.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.policies import StaticPeak
from autoscaler.sim.simulator import admission, simulate
from autoscaler.sim.traces import Trace

_Job = tuple[Trace, ClusterConfig, float, float, float, float, int, int]
_Row = tuple[int, list[int]]
MapFn = Callable[[Callable[[_Job], _Row], Iterable[_Job]], Iterable[_Row]]


@dataclass(frozen=True, slots=True)
class WindowTable:
    """Misses per window (rows) for 1..n replicas (columns; ``-1``: not simulated,
    meaning a smaller count already had no misses)."""

    window_s: float
    gpus_per_replica: float
    requests: np.ndarray  # shape (windows,)
    misses: np.ndarray  # shape (windows, max_replicas), int

    def __post_init__(self) -> None:
        if self.misses.ndim != 2 or self.misses.shape[0] != len(self.requests):
            raise ConfigError(
                f"misses: shape {self.misses.shape} must be (windows={len(self.requests)}, n)"
            )
        if not self.window_s > 0 or not self.gpus_per_replica > 0:
            raise ConfigError(
                f"window_s/gpus_per_replica: values {self.window_s}/{self.gpus_per_replica} "
                "must be > 0"
            )

    @property
    def total_requests(self) -> int:
        return int(self.requests.sum())

    def options(self, w: int) -> list[tuple[float, float]]:
        """(GPU-hours, misses) for each replica count simulated in window ``w``."""
        g = self.window_s / 3600.0 * self.gpus_per_replica
        out: list[tuple[float, float]] = []
        for j, m in enumerate(self.misses[w]):
            if m < 0:
                break
            out.append(((j + 1) * g, float(int(m))))
        return out


@dataclass(frozen=True, slots=True)
class FrontierPoint:
    gpu_hours: float
    misses: float


def _window_hull(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Lower convex hull of one window's (GPU-h, misses), from the cheapest option, keeping
    only options that save misses (a costlier option with no fewer misses is useless)."""
    pts: list[tuple[float, float]] = []
    best = math.inf
    for g, m in sorted(points):
        if m < best:
            pts.append((g, float(m)))
            best = m
    hull: list[tuple[float, float]] = []
    for p in pts:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            # drop the middle point when it lies on or above the segment hull[-2] -> p
            if (y2 - y1) * (p[0] - x1) >= (p[1] - y1) * (x2 - x1):
                hull.pop()
            else:
                break
        hull.append(p)
    return hull


def frontier(table: WindowTable) -> list[FrontierPoint]:
    """The oracle's GPU-hours vs misses frontier, cheapest first (convex, piecewise linear)."""
    g0 = 0.0
    m0 = 0.0
    segments: list[tuple[float, float, float]] = []  # (slope, dg, dm), dm <= 0
    for w in range(len(table.requests)):
        hull = _window_hull(table.options(w))
        if not hull:
            raise ConfigError(f"window {w}: no replica count was simulated")
        g0 += hull[0][0]
        m0 += hull[0][1]
        for (x1, y1), (x2, y2) in itertools.pairwise(hull):
            segments.append(((y2 - y1) / (x2 - x1), x2 - x1, y2 - y1))
    segments.sort(key=lambda s: s[0])  # most misses saved per GPU-hour first
    points = [FrontierPoint(g0, m0)]
    g, m = g0, m0
    for _slope, dg, dm in segments:
        g += dg
        m += dm
        points.append(FrontierPoint(g, m))
    return points


def min_gpu_hours(points: Sequence[FrontierPoint], max_misses: float) -> float | None:
    """Fewest GPU-hours on the frontier with at most ``max_misses`` (None: unreachable)."""
    if points[0].misses <= max_misses:
        return points[0].gpu_hours
    for a, b in itertools.pairwise(points):
        if b.misses <= max_misses:
            frac = (a.misses - max_misses) / (a.misses - b.misses)
            return a.gpu_hours + frac * (b.gpu_hours - a.gpu_hours)
    return None


def min_misses(points: Sequence[FrontierPoint], gpu_hours: float) -> float | None:
    """Fewest misses on the frontier within ``gpu_hours`` (None: below the cheapest point)."""
    if gpu_hours < points[0].gpu_hours:
        return None
    for a, b in itertools.pairwise(points):
        if b.gpu_hours >= gpu_hours:
            frac = (gpu_hours - a.gpu_hours) / (b.gpu_hours - a.gpu_hours)
            return a.misses + frac * (b.misses - a.misses)
    return points[-1].misses


def window_misses(
    trace: Trace,
    cluster: ClusterConfig,
    *,
    max_replicas: int,
    window_s: float = 60.0,
    warmup_s: float = 60.0,
    slo_ttft_s: float = 0.5,
    seed: int = 0,
    map_fn: MapFn | None = None,
) -> WindowTable:
    """Replay every window on 1..``max_replicas`` ready replicas (stopping at the first
    count whose only misses are the SLO-infeasible requests) and count the misses of the
    admitted requests arriving in the window (rejected ones are not misses).
    ``map_fn`` (``Executor.map``-like) parallelises over windows."""
    if max_replicas < 1:
        raise ConfigError(f"max_replicas: value {max_replicas} must be >= 1")
    n_windows = max(1, math.ceil(trace.duration_s / window_s))
    jobs = [
        (trace, cluster, w * window_s, window_s, warmup_s, slo_ttft_s, seed, max_replicas)
        for w in range(n_windows)
    ]
    rows = list(map_fn(_one_window, jobs) if map_fn is not None else map(_one_window, jobs))
    requests = np.array([r[0] for r in rows], dtype=np.int64)
    misses = np.full((n_windows, max_replicas), -1, dtype=np.int64)
    for w, (_n, row) in enumerate(rows):
        misses[w, : len(row)] = row
    return WindowTable(
        window_s=window_s,
        gpus_per_replica=cluster.gpus_billed_per_replica,
        requests=requests,
        misses=misses,
    )


def _one_window(job: _Job) -> _Row:
    trace, cluster, start_s, window_s, warmup_s, slo_ttft_s, seed, max_replicas = job
    lead = min(warmup_s, start_s)
    part = trace.window(start_s - lead, start_s + window_s)
    in_window = part.arrival_s >= lead
    n_req = int(np.count_nonzero(in_window))
    if n_req == 0:
        return 0, [0]
    rejected, infeasible = admission(part, cluster.profile, slo_ttft_s)
    counted = in_window & ~rejected  # rejected requests are vLLM's 400s, not misses
    floor = int(np.count_nonzero(infeasible & in_window))  # missed on any fleet
    stop_at_s = lead + window_s + slo_ttft_s + 1.0
    row: list[int] = []
    for n in range(1, max_replicas + 1):
        # Stop once every request of the window has had its SLO's time: who met it is
        # known then (the tail would only finish requests that already missed).
        res = simulate(
            part, StaticPeak(n), cluster, slo_ttft_s=slo_ttft_s, seed=seed, stop_at_s=stop_at_s
        )
        miss = int(np.count_nonzero(res.ttft_s[counted] > slo_ttft_s))
        row.append(miss)
        if miss <= floor:
            break
    return int(np.count_nonzero(counted)), row


# -- Bounds that keep the cold start -------------------------------------------------------
#
# The frontier above lets the oracle add a replica for one window and drop it the next at
# no cost. A real replica is billed from creation and serves only after its cold start, so
# two tighter references are computed from the same `WindowTable`:
#
# * `cold_start_frontier`: still clairvoyant (it starts each pod one cold start before the
#   window that needs it), but every replica added pays ``cold_start_s`` of GPU time
#   before it serves. A bound for every policy, causal or not, under real cold starts.
# * `reactive_frontier`: causal, with perfect hindsight. Each window runs the count that
#   would have been ideal for the windows already seen (held over ``hold`` windows, never
#   below a fixed ``floor``), one window late: what a policy that measures the load
#   perfectly and reacts at once reaches when capacity arrives one cold start after the
#   load is seen. A reference for causal policies (optimistic: it knows the previous
#   window's ideal count exactly and its pods serve from the next window's first second),
#   not a bound (a causal policy may exploit structure this rule ignores).


def dense_misses(table: WindowTable) -> np.ndarray:
    """Misses per (window, replicas - 1) with every count filled in: a count above the
    last one simulated has that one's misses (the first count with no avoidable miss)."""
    out = table.misses.astype(np.float64).copy()
    for w in range(out.shape[0]):
        row = out[w]
        valid = row >= 0
        last = int(np.flatnonzero(valid)[-1]) if valid.any() else -1
        if last < 0:
            raise ConfigError(f"window {w}: no replica count was simulated")
        row[last + 1 :] = row[last]
    return out


def _lagrangian_grid(table: WindowTable, points: int = 400) -> np.ndarray:
    """Prices (GPU-hours per miss) spanning every trade-off of the table."""
    g = table.window_s / 3600.0 * table.gpus_per_replica
    total = max(1.0, float(table.total_requests))
    return np.geomspace(g / total / 10.0, g * 10.0, points)


def _hull_points(pairs: Iterable[tuple[float, float]]) -> list[FrontierPoint]:
    """Lower convex hull (cheapest first) of (GPU-hours, misses) points, keeping only
    points that save misses."""
    hull = _window_hull(list(pairs))
    return [FrontierPoint(g, m) for g, m in hull]


def cold_start_frontier(
    table: WindowTable, cold_start_s: float, prices: Sequence[float] | None = None
) -> list[FrontierPoint]:
    """The clairvoyant frontier when each replica added pays ``cold_start_s`` of GPU time
    (a dynamic programme over windows and replica counts per price on misses; the hull of
    its solutions, so fractional between them, as `frontier`)."""
    if not cold_start_s >= 0:
        raise ConfigError(f"cold_start_s: value {cold_start_s} must be >= 0")
    m = dense_misses(table)
    n_w, n_max = m.shape
    g = table.window_s / 3600.0 * table.gpus_per_replica
    c = cold_start_s / 3600.0 * table.gpus_per_replica
    counts = np.arange(1, n_max + 1, dtype=np.float64)
    pairs: list[tuple[float, float]] = []
    for mu in prices if prices is not None else _lagrangian_grid(table):
        cost = g * counts[None, :] / mu + m  # objective in misses: GPU-h / mu + misses
        step = c / mu
        value = cost[0].copy()
        back = np.zeros((n_w, n_max), dtype=np.int64)
        for w in range(1, n_w):
            # from n' >= n: free (scale down); from n' < n: pay step * (n - n')
            suffix = np.minimum.accumulate(value[::-1])[::-1]
            suffix_arg = _suffix_argmin(value)
            shifted = value - step * counts
            prefix = np.minimum.accumulate(shifted)
            prefix_arg = _prefix_argmin(shifted)
            up = np.full(n_max, np.inf)
            up_arg = np.zeros(n_max, dtype=np.int64)
            up[1:] = prefix[:-1] + step * counts[1:]
            up_arg[1:] = prefix_arg[:-1]
            take_up = up < suffix
            back[w] = np.where(take_up, up_arg, suffix_arg)
            value = cost[w] + np.where(take_up, up, suffix)
        path = np.zeros(n_w, dtype=np.int64)
        path[-1] = int(np.argmin(value))
        for w in range(n_w - 1, 0, -1):
            path[w - 1] = back[w, path[w]]
        pairs.append(_evaluate(m, path + 1, g, c))
    return _hull_points(pairs)


def reactive_frontier(
    table: WindowTable,
    cold_start_s: float,
    holds: Sequence[int] = (1, 2, 3, 5, 8, 12),
    prices: Sequence[float] | None = None,
) -> list[FrontierPoint]:
    """The causal reference (module comment above): per price on misses, each window's
    ideal count alone; window ``w`` runs ``max(floor, max(ideal[w-hold .. w-1]))``; every
    replica added pays ``cold_start_s``. The hull over prices, holds and floors."""
    m = dense_misses(table)
    n_w, n_max = m.shape
    g = table.window_s / 3600.0 * table.gpus_per_replica
    c = cold_start_s / 3600.0 * table.gpus_per_replica
    counts = np.arange(1, n_max + 1, dtype=np.float64)
    pairs: list[tuple[float, float]] = []
    for floor in range(1, n_max + 1):
        pairs.append(_evaluate(m, np.full(n_w, floor), g, c))  # the fixed fleets
    for mu in prices if prices is not None else _lagrangian_grid(table, 120):
        ideal = np.argmin(g * counts[None, :] / mu + m, axis=1) + 1
        for hold in holds:
            seen = np.empty(n_w, dtype=np.int64)
            for w in range(n_w):
                past = ideal[max(0, w - hold) : w]
                seen[w] = int(past.max()) if len(past) else int(ideal[0])
            for floor in range(1, int(seen.max()) + 1):
                pairs.append(_evaluate(m, np.maximum(seen, floor), g, c))
    return _hull_points(pairs)


def _evaluate(m: np.ndarray, alloc: np.ndarray, g: float, c: float) -> tuple[float, float]:
    """(GPU-hours, misses) of a per-window replica allocation (counts from 1)."""
    rows = np.arange(len(alloc))
    added = np.maximum(0, np.diff(alloc)).sum()
    return float(g * alloc.sum() + c * added), float(m[rows, alloc - 1].sum())


def _suffix_argmin(v: np.ndarray) -> np.ndarray:
    out = np.empty(len(v), dtype=np.int64)
    best = len(v) - 1
    for i in range(len(v) - 1, -1, -1):
        if v[i] <= v[best]:
            best = i
        out[i] = best
    return out


def _prefix_argmin(v: np.ndarray) -> np.ndarray:
    out = np.empty(len(v), dtype=np.int64)
    best = 0
    for i in range(len(v)):
        if v[i] < v[best]:
            best = i
        out[i] = best
    return out
