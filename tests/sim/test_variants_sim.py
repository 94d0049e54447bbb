"""The multi-variant simulator (sim/variants.py): router, capacity book, billing, profiling."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.sim.traces import from_arrays
from autoscaler.sim.variants import (
    BUCKETS,
    MIG_2G20GB,
    Observation,
    VariantSetup,
    bucket_of,
    profile_capacity,
    run_variants,
    servable_mask,
    standard_setups,
    window_loads,
)


class Fixed:
    """Holds the given counts and records what it was shown."""

    def __init__(self, counts: dict[str, int]) -> None:
        self.name = "fixed"
        self.counts = counts
        self.seen: list[Observation] = []

    def desired(self, obs: Observation) -> dict[str, int]:
        self.seen.append(obs)
        return dict(self.counts)


def _trace(n_short: int, n_long: int, gap_s: float = 2.0):  # type: ignore[no-untyped-def]
    n = n_short + n_long
    arrival = np.arange(n, dtype=np.float64) * gap_s
    prompt = np.array([300] * n_short + [20_000] * n_long, dtype=np.int64)
    order = np.random.default_rng(0).permutation(n)
    return from_arrays("t", arrival.tolist(), prompt[order].tolist(), [50] * n)


CAPS = {b: 5.0 for b in range(len(BUCKETS))}


def test_requests_too_long_for_the_only_running_variant_are_not_served() -> None:
    setups = standard_setups(long_context=True)  # the H100 with a 128k window
    caps = {"h100": CAPS, "mig-2g.20gb": {0: 5.0, 1: 5.0}, "l4": CAPS}
    trace = _trace(20, 5)
    r = run_variants(
        trace, setups, Fixed({"mig-2g.20gb": 1}), caps, slo_ttft_s=5.0, initial={"mig-2g.20gb": 1}
    )
    # the 20k-token requests fit no slice: dropped, the short ones all served in time
    assert r.dropped == 5
    assert r.attainment == pytest.approx(20 / 25)
    r = run_variants(
        trace,
        setups,
        Fixed({"mig-2g.20gb": 1, "h100": 1}),
        caps,
        slo_ttft_s=5.0,
        initial={"mig-2g.20gb": 1, "h100": 1},
    )
    assert r.dropped == 0 and r.attainment == 1.0


def test_a_full_capacity_book_leaves_pods_pending_and_unbilled() -> None:
    base = standard_setups()
    setups = {
        "mig-2g.20gb": VariantSetup("mig-2g.20gb", MIG_2G20GB, 4.0, cold_start_s=5.0, slots=1),
        "h100": base["h100"],
    }
    pol = Fixed({"mig-2g.20gb": 3, "h100": 0})
    trace = _trace(60, 0)
    r = run_variants(
        trace,
        setups,
        pol,
        {"mig-2g.20gb": CAPS, "h100": CAPS},
        slo_ttft_s=5.0,
        initial={"mig-2g.20gb": 1},
    )
    later = [o for o in pol.seen if o.now_s > 20]
    assert later and all(o.pending["mig-2g.20gb"] == 2 for o in later)
    assert all(o.free_slots["mig-2g.20gb"] == 0 for o in later)
    # billed: one slice from start to end, never the pending two
    assert r.gpu_dollars == pytest.approx(r.end_s / 3600 * 4.0 / 3, rel=1e-9)


def test_billing_counts_each_placed_replica_at_its_price() -> None:
    setups = standard_setups()
    trace = _trace(30, 0)
    r = run_variants(
        trace,
        setups,
        Fixed({"h100": 1, "l4": 2}),
        {"h100": CAPS, "l4": CAPS, "mig-2g.20gb": CAPS},
        slo_ttft_s=5.0,
        initial={"h100": 1, "l4": 2},
    )
    assert r.gpu_dollars == pytest.approx(r.end_s / 3600 * (4.0 + 2 * 0.75))
    assert r.gpu_hours == pytest.approx(r.end_s / 3600 * 3)


def test_profiled_capacity_orders_the_gpus_and_refuses_what_does_not_fit() -> None:
    rng = np.random.default_rng(1)
    prompts = rng.integers(200, 800, size=200)
    outputs = rng.integers(20, 200, size=200)
    setups = standard_setups()
    h100 = profile_capacity(
        setups["h100"].profile, prompts, outputs, 0.5, duration_s=60, iterations=4
    )
    mig = profile_capacity(MIG_2G20GB, prompts, outputs, 0.5, duration_s=60, iterations=4)
    assert h100 > mig > 0
    long_p = np.full(50, 9000)
    assert profile_capacity(MIG_2G20GB, long_p, np.full(50, 10), 5.0) == 0.0


def test_servable_mask_is_the_union_over_variants() -> None:
    setups = standard_setups()
    trace = from_arrays(
        "t",
        [0.0, 1.0, 2.0],
        [500, 20_000, 200_000],
        [10, 10, 10],
    )
    mask = servable_mask(setups, trace, slo_ttft_s=2.0)
    # 20k fits the L4 (32k window) but its prefill misses 2 s; the H100 (8k window) refuses
    # it; nobody takes 200k
    assert mask.tolist() == [True, False, False]


def test_window_loads_are_each_buckets_peak_minute() -> None:
    arrival = np.concatenate([np.linspace(0, 59, 120), np.linspace(60, 119, 30), [700.0]])
    n = len(arrival)
    trace = from_arrays("t", arrival.tolist(), [100] * n, [10] * n)
    loads = window_loads(trace, 600.0)
    assert len(loads) == 2
    assert loads[0] == {0: pytest.approx(2.0)} and loads[1] == {0: pytest.approx(1 / 60)}
    assert bucket_of(np.array([1, 1024, 1025, 10**6])).tolist() == [0, 0, 1, len(BUCKETS) - 1]
    assert math.isfinite(loads[0][0])


def test_greedy_fills_the_cheaper_slices_then_grows_the_h100_when_the_book_runs_out() -> None:
    from autoscaler.sim.variants import GreedyPolicy

    base = standard_setups()
    setups = {
        "h100": VariantSetup("h100", base["h100"].profile, 4.0, cold_start_s=5.0),
        "mig-2g.20gb": VariantSetup("mig-2g.20gb", MIG_2G20GB, 4.0, cold_start_s=5.0, slots=3),
    }
    # slices cheaper per request here: 1.33 per 2 req/s against 4.0 per 4 req/s
    caps = {"h100": {0: 4.0}, "mig-2g.20gb": {0: 2.0}}
    pol = GreedyPolicy("greedy", setups, caps, headroom=1.0, scale_down_window_s=60.0)
    # 12 req/s = 3 H100s of work: three slices (all the book has) carry 1.5, two H100s
    # the rest
    n = 1440
    trace = from_arrays("t", (np.arange(n) * (120.0 / n)).tolist(), [200] * n, [20] * n)
    seen: list[Observation] = []

    class Watch:
        name = "watch"

        def desired(self, obs: Observation) -> dict[str, int]:
            seen.append(obs)
            return pol.desired(obs)

    r = run_variants(trace, setups, Watch(), caps, slo_ttft_s=5.0, initial={}, window_s=30.0)
    assert r.max_replicas == {"h100": 2, "mig-2g.20gb": 3}
    first = next(o for o in seen if sum(o.replicas.values()) > 0)
    # the ramp (half a window of arrivals at the first poll) fits on slices alone; the
    # H100s come once the book has no slice left
    assert first.replicas == {"h100": 0, "mig-2g.20gb": 3}
    grown = next(o for o in seen if o.replicas["h100"] > 0)
    assert grown.now_s > first.now_s and grown.free_slots["mig-2g.20gb"] == 0
    # without the book's limit the same demand stays on slices
    free = {**setups, "mig-2g.20gb": VariantSetup("mig-2g.20gb", MIG_2G20GB, 4.0, cold_start_s=5.0)}
    pol = GreedyPolicy("greedy", free, caps, headroom=1.0, scale_down_window_s=60.0)
    r = run_variants(trace, free, pol, caps, slo_ttft_s=5.0, initial={}, window_s=30.0)
    assert r.max_replicas == {"h100": 0, "mig-2g.20gb": 6}
