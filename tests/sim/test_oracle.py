"""The oracle bound: per-window hulls, the merged frontier and the two queries."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from autoscaler.errors import ConfigError
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.oracle import (
    FrontierPoint,
    WindowTable,
    cold_start_frontier,
    frontier,
    min_gpu_hours,
    min_misses,
    reactive_frontier,
    window_misses,
)
from autoscaler.sim.replica import PROFILES
from autoscaler.sim.traces import from_arrays

CFG = ClusterConfig(profile=PROFILES["8b-h100"])


def table(rows: list[list[int]], window_s: float = 3600.0) -> WindowTable:
    width = max(len(r) for r in rows)
    misses = np.full((len(rows), width), -1, dtype=np.int64)
    for w, r in enumerate(rows):
        misses[w, : len(r)] = r
    return WindowTable(
        window_s=window_s,
        gpus_per_replica=1.0,
        requests=np.full(len(rows), 1000),
        misses=misses,
    )


def brute_force(rows: list[list[int]], budget_gpu_h: int) -> int:
    """Fewest misses with at most ``budget`` replica-hours (1-hour windows), exhaustively."""
    best = None
    for choice in itertools.product(*[range(len(r)) for r in rows]):
        cost = sum(j + 1 for j in choice)
        if cost <= budget_gpu_h:
            m = sum(r[j] for r, j in zip(rows, choice, strict=True))
            best = m if best is None else min(best, m)
    assert best is not None
    return best


def test_frontier_spends_gpu_hours_where_they_save_the_most_misses() -> None:
    # window A saves 90 misses with its 2nd replica, window B only 10
    rows = [[100, 10, 0], [20, 10, 5]]
    pts = frontier(table(rows))
    assert pts[0] == FrontierPoint(2.0, 120.0)
    assert pts[1] == FrontierPoint(3.0, 30.0)  # A's second replica first
    assert pts[-1].misses == 5.0
    assert min_misses(pts, 3.0) == 30.0


def test_frontier_is_a_lower_bound_of_every_integer_allocation() -> None:
    rng = np.random.default_rng(7)
    for _ in range(20):
        rows = []
        for _w in range(4):
            m = sorted(rng.integers(0, 200, size=4).tolist(), reverse=True)
            rows.append(m)
        pts = frontier(table(rows))
        for budget in range(4, 17):
            bound = min_misses(pts, float(budget))
            assert bound is not None
            assert bound <= brute_force(rows, budget) + 1e-9
        # at the corners the hull is exact
        assert pts[0].misses == sum(r[0] for r in rows)
        assert pts[-1].misses == sum(min(r) for r in rows)


def test_costlier_option_without_fewer_misses_is_never_chosen() -> None:
    rows = [[50, 50, 50, 0]]
    pts = frontier(table(rows))
    # straight from 1 to 4 replicas: the middle options save nothing
    assert [(p.gpu_hours, p.misses) for p in pts] == [(1.0, 50.0), (4.0, 0.0)]
    assert min_misses(pts, 2.5) == pytest.approx(25.0)


def test_queries_interpolate_and_report_unreachable() -> None:
    pts = [FrontierPoint(2.0, 100.0), FrontierPoint(4.0, 20.0), FrontierPoint(6.0, 10.0)]
    assert min_gpu_hours(pts, 60.0) == pytest.approx(3.0)
    assert min_gpu_hours(pts, 100.0) == 2.0
    assert min_gpu_hours(pts, 5.0) is None
    assert min_misses(pts, 1.0) is None
    assert min_misses(pts, 5.0) == pytest.approx(15.0)
    assert min_misses(pts, 60.0) == 10.0


def test_window_table_rejects_a_misshaped_table() -> None:
    with pytest.raises(ConfigError, match="misses: shape"):
        WindowTable(window_s=60, gpus_per_replica=1, requests=np.zeros(3), misses=np.zeros((2, 2)))


def test_window_misses_needs_more_replicas_only_where_the_load_is() -> None:
    # 60 s quiet (0.5 req/s), then 60 s at 40 req/s with long prompts, then quiet again
    rng = np.random.default_rng(0)
    parts = [
        np.sort(rng.uniform(0, 60, 30)),
        np.sort(rng.uniform(60, 120, 2400)),
        np.sort(rng.uniform(120, 180, 30)),
    ]
    arrival = np.concatenate(parts)
    n = len(arrival)
    trace = from_arrays("burst", arrival, [2000] * n, [100] * n)
    tab = window_misses(trace, CFG, max_replicas=12, window_s=60.0, warmup_s=30.0)
    assert tab.requests.tolist() == [30, 2400, 30]
    quiet, busy, after = tab.misses
    assert quiet[0] == 0 and quiet[1] == -1  # one replica is enough: stop there
    assert busy[0] > 1000  # one replica cannot take 40 req/s of 2000-token prompts
    assert list(busy[busy >= 0]) == sorted(busy[busy >= 0], reverse=True)
    assert busy[busy >= 0][-1] == 0
    # the warm-up replays the burst's last 30 s, so its backlog reaches the next window
    assert after[0] > 0
    assert after[after >= 0][-1] == 0
    pts = frontier(tab)
    # the cheapest point runs one replica everywhere; the costliest ends every window's misses
    assert pts[0].gpu_hours == pytest.approx(3 * 60 / 3600)
    assert pts[0].misses == quiet[0] + busy[0] + after[0]
    replicas = sum(int(np.count_nonzero(row >= 0)) for row in tab.misses)
    assert pts[-1] == FrontierPoint(pytest.approx(replicas * 60 / 3600), 0.0)


def brute_force_with_cold_start(rows: list[list[int]], budget: float, cold_h: float) -> int:
    """Fewest misses within ``budget`` replica-hours when each replica added pays
    ``cold_h`` hours (1-hour windows, counts from 1; the start is free), exhaustively."""
    best = None
    for choice in itertools.product(*[range(len(r)) for r in rows]):
        added = sum(max(0, b - a) for a, b in itertools.pairwise(choice))
        cost = sum(j + 1 for j in choice) + cold_h * added
        if cost <= budget + 1e-9:
            m = sum(r[j] for r, j in zip(rows, choice, strict=True))
            best = m if best is None else min(best, m)
    assert best is not None
    return best


def test_cold_start_frontier_without_cold_start_is_the_free_frontier() -> None:
    rows = [[100, 10, 0], [20, 10, 5], [50, 0], [30, 20, 10, 0]]
    free = frontier(table(rows))
    dp = cold_start_frontier(table(rows), 0.0)
    for budget in (4.0, 5.0, 6.5, 8.0, 10.0):
        assert min_misses(dp, budget) == pytest.approx(min_misses(free, budget), abs=1e-6)


def test_cold_start_frontier_is_a_lower_bound_that_charges_every_scale_up() -> None:
    # the need alternates: a free oracle follows it, one paying a cold start holds
    rows = [[100, 0], [0], [100, 0], [0], [100, 0], [0]]
    cold_h = 0.8  # hours of GPU per replica added (1-hour windows)
    free = frontier(table(rows))
    paid = cold_start_frontier(table(rows), cold_h * 3600.0)
    for budget in (7.0, 8.0, 8.5, 9.0):
        bound = min_misses(paid, budget)
        assert bound is not None
        assert bound <= brute_force_with_cold_start(rows, budget, cold_h) + 1e-9
        assert bound >= (min_misses(free, budget) or 0.0) - 1e-9
    # zero misses: 6 windows on 1 replica plus a 2nd for each burst (the first one starts
    # with the trace, free; the other two pay 0.8 each): 6 + 3 + 1.6, against 6 + 3 free
    assert min_gpu_hours(paid, 0.0) == pytest.approx(10.6)
    assert min_gpu_hours(free, 0.0) == pytest.approx(9.0)


def test_reactive_reference_cannot_catch_bursts_shorter_than_a_window() -> None:
    # bursts in windows 1, 4, 7: reacting one window late always lands between them
    rows = [[0], [100, 0], [0], [0], [100, 0], [0], [0], [100, 0], [0]]
    clairvoyant = cold_start_frontier(table(rows), 0.0)
    reactive = reactive_frontier(table(rows), 0.0)
    assert min_misses(clairvoyant, 12.0) == pytest.approx(0.0)
    # reacting one window late misses every burst: no better than the fixed fleets
    # (1 replica: 9 replica-hours, 300 misses; 2: 18, 0; the hull between them)
    assert min_misses(reactive, 12.0) == pytest.approx(200.0)
    assert min_gpu_hours(reactive, 0.0) == pytest.approx(18.0)  # a fixed fleet of 2
