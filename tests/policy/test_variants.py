"""The greedy split of one model's demand across its GPU variants (policy/variants.py)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.errors import ConfigError
from autoscaler.policy.variants import (
    LengthDemand,
    Variant,
    VariantState,
    capacity_units,
    demand_by_length,
    length_shares_from_buckets,
    plan_replicas,
    shortfall,
    split,
)

# relative prices: a MIG 2g.20gb slice at 2/7 of an H100, the H100 itself
SLICE = Variant(
    "slice", cost_per_replica_hour=4.0 * 2 / 7, capacity_per_replica=1.0, max_model_len=8192
)
H100 = Variant("h100", cost_per_replica_hour=4.0, capacity_per_replica=6.0)


def _states(**counts: int) -> dict[str, VariantState]:
    return {k: VariantState(v) for k, v in counts.items()}


def test_scale_up_goes_to_the_cheapest_per_capacity_variant() -> None:
    # slice: 1.14 per unit of capacity; h100: 0.67 -> the H100 is cheaper per unit
    s = split([SLICE, H100], _states(slice=0, h100=0), [LengthDemand(100, 5.0)])
    assert s.replicas == {"slice": 0, "h100": 1}
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)  # cheaper per unit now
    s = split([cheap, H100], _states(slice=0, h100=0), [LengthDemand(100, 5.0)])
    assert s.replicas == {"slice": 5, "h100": 0}


def test_gap_aware_sends_a_sliver_of_demand_to_a_slice_not_a_whole_gpu() -> None:
    # the H100 is cheaper per unit of capacity (0.67 vs 1.14), but closing a gap of 0.5
    # costs one slice (1.14) against one H100 (4.0)
    d = [LengthDemand(100, 6.5)]
    assert split([SLICE, H100], _states(slice=0, h100=1), d, gap_aware=True).replicas == {
        "slice": 1,
        "h100": 1,
    }
    assert split([SLICE, H100], _states(slice=0, h100=1), d).replicas == {"slice": 0, "h100": 2}
    # a gap of 5 costs 5 slices (5.71) or one H100 (4.0)
    s = split([SLICE, H100], _states(slice=0, h100=1), [LengthDemand(100, 11.0)], gap_aware=True)
    assert s.replicas == {"slice": 0, "h100": 2}


def test_scale_up_skips_a_variant_with_pending_pods() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)
    states = {"slice": VariantState(2, pending=1), "h100": VariantState(0)}
    s = split([cheap, H100], states, [LengthDemand(100, 5.0)])
    assert s.replicas["slice"] == 2
    assert s.replicas["h100"] == 1
    assert s.unplaced_demand == 0


def test_scale_up_spills_to_the_next_variant_when_slices_run_out() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)
    states = {"slice": VariantState(1, free_slots=2), "h100": VariantState(0)}
    s = split([cheap, H100], states, [LengthDemand(100, 5.0)])
    # slices first (1 -> 3, no slot left), then one H100; with the H100's 6 the two new
    # slices are surplus and are not started; the running slice stays
    assert s.replicas == {"slice": 1, "h100": 1}
    s = split([cheap, H100], states, [LengthDemand(100, 2.5)])
    assert s.replicas == {"slice": 3, "h100": 0}  # the free slots suffice: no H100


def test_nothing_placeable_reports_the_unplaced_demand_and_why() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_replicas=2, max_model_len=8192)
    pinned = Variant("h100", 4.0, 6.0, max_replicas=0)
    s = split([cheap, pinned], _states(slice=0, h100=0), [LengthDemand(100, 5.0)])
    assert s.replicas == {"slice": 2, "h100": 0}
    assert s.unplaced_demand == pytest.approx(3.0)
    assert "max_replicas" in s.blocked["slice"] and "max_replicas" in s.blocked["h100"]


def test_scale_down_removes_the_most_expensive_first() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)
    s = split([cheap, H100], _states(slice=4, h100=2), [LengthDemand(100, 5.0)])
    # one H100 goes first (4 + 6 still covers 5), then the slices it makes surplus
    assert s.replicas == {"slice": 0, "h100": 1}
    s = split([cheap, H100], _states(slice=4, h100=2), [LengthDemand(100, 3.5)])
    assert s.replicas == {"slice": 4, "h100": 0}


def test_a_decision_that_grows_never_also_shrinks() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)
    s = split([cheap, H100], _states(slice=0, h100=1), [LengthDemand(100, 9.0)])
    assert s.replicas["h100"] == 1  # the ready H100 stays while slices start
    assert s.replicas["slice"] == 3


def test_long_requests_count_only_toward_variants_that_serve_them() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)
    demand = [LengthDemand(4096, 3.0), LengthDemand(32_768, 2.0)]
    s = split([cheap, H100], _states(slice=0, h100=0), demand)
    # the 32k class needs an H100 (capacity 6 covers 2); the short class then fits on it too
    assert s.replicas == {"slice": 0, "h100": 1}
    assert shortfall([cheap, H100], {"slice": 10, "h100": 0}, demand) == pytest.approx(2.0)


def test_demand_longer_than_every_variant_is_reported_not_chased() -> None:
    cheap = Variant("slice", 4.0 / 7, 1.0, max_model_len=8192)
    s = split([cheap], _states(slice=1), [LengthDemand(100, 1.0), LengthDemand(9000, 7.0)])
    assert s.replicas == {"slice": 1}
    assert s.unservable_demand == pytest.approx(7.0)


def test_min_and_max_bound_the_counts_even_without_demand() -> None:
    v = Variant("a", 1.0, 1.0, min_replicas=2, max_replicas=3)
    assert split([v], _states(a=0), []).replicas == {"a": 2}
    assert split([v], _states(a=9), []).replicas == {"a": 2}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"cost_per_replica_hour": 0.0}, "cost_per_replica_hour"),
        ({"capacity_per_replica": -1.0}, "capacity_per_replica"),
        ({"capacity_per_replica": math.nan}, "capacity_per_replica"),
        ({"min_replicas": 3, "max_replicas": 2}, "max_replicas"),
        ({"max_model_len": 0}, "max_model_len"),
    ],
)
def test_bad_variants_are_refused_naming_field_value_and_rule(
    kwargs: dict[str, float], field: str
) -> None:
    base: dict[str, object] = {
        "name": "v",
        "cost_per_replica_hour": 1.0,
        "capacity_per_replica": 1.0,
    }
    base.update(kwargs)
    with pytest.raises(ConfigError) as e:
        Variant(**base)  # type: ignore[arg-type]
    assert f"variants[v].{field}: value" in str(e.value) and "must be" in str(e.value)


def test_duplicate_names_and_missing_states_are_refused() -> None:
    with pytest.raises(ConfigError, match="unique"):
        split([H100, H100], _states(h100=0), [])
    with pytest.raises(ConfigError, match="no state"):
        split([SLICE, H100], _states(h100=0), [])


def test_demand_by_length_keeps_the_total_and_refuses_negative_demand() -> None:
    d = demand_by_length(10.0, {4096: 3, 32_768: 1})
    assert [x.max_len_tokens for x in d] == [4096, 32_768]
    assert sum(x.demand for x in d) == pytest.approx(10.0)
    assert d[1].demand == pytest.approx(2.5)
    assert demand_by_length(4.0, {}) == (LengthDemand(1, 4.0),)
    with pytest.raises(ConfigError, match="demand: value -1"):
        demand_by_length(-1.0, {})


# ----------------------------------------------------------------- properties

variant_st = st.builds(
    Variant,
    name=st.just("x"),
    cost_per_replica_hour=st.floats(0.1, 10.0),
    capacity_per_replica=st.floats(0.2, 20.0),
    min_replicas=st.integers(0, 2),
    max_replicas=st.one_of(st.none(), st.integers(2, 12)),
    max_model_len=st.one_of(st.none(), st.sampled_from([2048, 8192, 32_768])),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[Variant], dict[str, VariantState], list[LengthDemand]]:
    raw = draw(st.lists(variant_st, min_size=1, max_size=4))
    variants = [
        Variant(
            f"v{i}",
            v.cost_per_replica_hour,
            v.capacity_per_replica,
            v.min_replicas,
            v.max_replicas,
            v.max_model_len,
        )
        for i, v in enumerate(raw)
    ]
    states = {}
    for v in variants:
        n = draw(st.integers(0, 10))
        states[v.name] = VariantState(
            n,
            pending=draw(st.integers(0, n)),
            free_slots=draw(st.one_of(st.none(), st.integers(0, 6))),
        )
    demand = draw(
        st.lists(
            st.builds(
                LengthDemand,
                max_len_tokens=st.sampled_from([1024, 4096, 16_384, 65_536]),
                demand=st.floats(0.0, 50.0),
            ),
            max_size=4,
        )
    )
    return variants, states, demand


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.booleans())
def test_split_respects_max_pending_and_the_capacity_book(
    sc: tuple[list[Variant], dict[str, VariantState], list[LengthDemand]], gap_aware: bool
) -> None:
    variants, states, demand = sc
    s = split(variants, states, demand, gap_aware=gap_aware)
    for v in variants:
        n, st_ = s.replicas[v.name], states[v.name]
        assert n >= v.min_replicas
        assert v.max_replicas is None or n <= v.max_replicas
        grown = n - max(st_.replicas, v.min_replicas)
        if st_.pending:
            assert grown <= 0  # never places on a variant with Pending pods
        if st_.free_slots is not None:
            assert n - st_.replicas <= max(st_.free_slots, v.min_replicas - st_.replicas)


@settings(max_examples=300, deadline=None)
@given(scenarios(), st.booleans())
def test_split_covers_the_servable_demand_when_capacity_allows(
    sc: tuple[list[Variant], dict[str, VariantState], list[LengthDemand]], gap_aware: bool
) -> None:
    variants, states, demand = sc
    # an unconstrained cluster: no Pending pods, no slot limit, no max
    free = [
        Variant(
            v.name,
            v.cost_per_replica_hour,
            v.capacity_per_replica,
            v.min_replicas,
            None,
            v.max_model_len,
        )
        for v in variants
    ]
    s = split(
        free, {k: VariantState(x.replicas) for k, x in states.items()}, demand, gap_aware=gap_aware
    )
    longest = max(math.inf if v.max_model_len is None else v.max_model_len for v in free)
    servable = [d for d in demand if d.max_len_tokens <= longest]
    assert s.unplaced_demand == 0
    assert shortfall(free, s.replicas, servable) == 0
    assert s.unservable_demand == pytest.approx(
        sum(d.demand for d in demand if d.max_len_tokens > longest)
    )
    # and minimal at the top: no variant above its min and its starting count could lose one
    for v in free:
        n = s.replicas[v.name]
        if n > max(v.min_replicas, states[v.name].replicas):
            fewer = dict(s.replicas)
            fewer[v.name] -= 1
            assert shortfall(free, fewer, servable) > 0


@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_split_is_a_fixed_point(
    sc: tuple[list[Variant], dict[str, VariantState], list[LengthDemand]],
) -> None:
    variants, states, demand = sc
    s = split(variants, {k: VariantState(x.replicas) for k, x in states.items()}, demand)
    again = split(variants, {k: VariantState(n) for k, n in s.replicas.items()}, demand)
    # applying the decision and deciding again on the same demand changes nothing,
    # unless the first decision grew (then the next one may trim what became surplus)
    if s.replicas == again.replicas:
        return
    assert any(s.replicas[v.name] > states[v.name].replicas for v in variants)


# ------------------------------------------------------------ the controller's split

MIG = Variant("mig", cost_per_replica_hour=1.33, capacity_per_replica=1.0)
FULL = Variant("h100", cost_per_replica_hour=4.0, capacity_per_replica=1.0, min_replicas=1)


def test_plan_grows_the_cheaper_variant_until_its_slots_run_out_then_the_other() -> None:
    states = {"mig": VariantState(0, free_slots=3), "h100": VariantState(1, free_slots=4)}
    plan = plan_replicas([MIG, FULL], states, 5, now=12.5)
    assert plan.replicas == {"mig": 3, "h100": 2}
    assert plan.t == 12.5 and plan.unplaced_replicas == 0
    by_name = {c.name: c for c in plan.changes}
    assert (by_name["mig"].from_replicas, by_name["mig"].to_replicas) == (0, 3)
    assert by_name["h100"].reason == "scale-up"
    assert "skipped cheaper: mig (no free slot in the capacity book)" in by_name["h100"].message


def test_plan_skips_a_variant_with_unschedulable_pods_for_scale_up() -> None:
    states = {"mig": VariantState(1, pending=1), "h100": VariantState(1)}
    plan = plan_replicas([MIG, FULL], states, 3, now=0.0)
    # three replicas that can run: all on the H100s, the stuck slice kept on top
    assert plan.replicas == {"mig": 1, "h100": 3}
    (change,) = plan.changes
    assert change.name == "h100" and "mig (1 pod(s) Pending)" in change.message
    assert plan.blocked == {"mig": "1 pod(s) Pending"}


def test_plan_scales_down_the_most_expensive_variant_first_down_to_its_min() -> None:
    states = {"mig": VariantState(3), "h100": VariantState(3)}
    plan = plan_replicas([MIG, FULL], states, 3, now=0.0)
    assert plan.replicas == {"mig": 2, "h100": 1}  # h100 to its min 1 first, then a slice
    assert [(c.name, c.reason) for c in plan.changes] == [
        ("mig", "scale-down"),
        ("h100", "scale-down"),
    ]


def test_plan_keeps_each_variant_within_its_min_and_max_and_reports_the_rest() -> None:
    capped = Variant("mig", 1.33, 1.0, max_replicas=2)
    states = {"mig": VariantState(4), "h100": VariantState(0)}
    plan = plan_replicas([capped, FULL], states, 3, now=0.0)
    assert plan.replicas == {"mig": 2, "h100": 1}
    reasons = {c.name: c.reason for c in plan.changes}
    assert reasons == {"mig": "max-replicas", "h100": "min-replicas"}
    plan = plan_replicas([capped, FULL], states, 1, now=0.0)
    assert plan.replicas == {"mig": 0, "h100": 1}  # the floor of h100 covers the total
    full = {"mig": VariantState(2), "h100": VariantState(1, free_slots=0)}
    plan = plan_replicas([capped, FULL], full, 6, now=0.0)
    assert plan.replicas == {"mig": 2, "h100": 1} and plan.unplaced_replicas == 3
    assert plan.changes == ()


def test_plan_without_change_writes_nothing() -> None:
    states = {"mig": VariantState(2, free_slots=1), "h100": VariantState(1)}
    assert plan_replicas([MIG, FULL], states, 3, now=0.0).changes == ()


def test_plan_refuses_a_negative_total() -> None:
    with pytest.raises(ConfigError, match="desired_replicas: value -1 must be >= 0"):
        plan_replicas([MIG], {"mig": VariantState(0)}, -1, now=0.0)


def test_a_growing_split_drops_an_addition_a_later_one_made_redundant() -> None:
    # gap-aware: the sliver of short demand (1.0) goes to the cheapest way to close it,
    # a small replica; then ten big replicas for the long class (14.0) cover all 15
    # alone, so the small one would be paid for nothing (found by hypothesis)
    vs = [
        Variant("big", 2.0, 1.5, 0, None, None),
        Variant("small", 1.0, 0.5, 0, None, None),
        Variant("mid", 2.0, 1.0, 0, None, None),
    ]
    demand = [LengthDemand(1024, 1.0), LengthDemand(4096, 14.0)]
    s = split(vs, {v.name: VariantState(0) for v in vs}, demand, gap_aware=True)
    assert s.replicas == {"big": 10, "small": 0, "mid": 0}
    assert shortfall(vs, s.replicas, demand) == 0
    # a running replica is never traded for a starting one: from small=1 running, the
    # growth keeps it
    running = {"big": VariantState(0), "small": VariantState(1), "mid": VariantState(0)}
    kept = split(vs, running, demand, gap_aware=True)
    assert kept.replicas["small"] == 1


# ------------------------------------------------ capacity and length (issue 37)

# a MIG slice: 1 unit of capacity at 1/hour, prompts up to 8192 tokens; an H100: 3 units
# at 2.5/hour (0.83 per unit: cheaper per unit of capacity), any length
SLICE8K = Variant("slice", 1.0, 1.0, max_model_len=8192, max_replicas=3)
H100X3 = Variant("h100", 2.5, 3.0)


def test_one_h100_of_capacity_three_replaces_three_slices_worth_of_demand() -> None:
    # the slices are at their max 3; the decision asks for 6 reference replicas: the
    # other 3 units are one H100 (capacity 3), not three (as replica counting would do)
    states = {"slice": VariantState(3), "h100": VariantState(0)}
    plan = plan_replicas([SLICE8K, H100X3], states, 6, now=0.0)
    assert plan.replicas == {"slice": 3, "h100": 1}
    assert plan.demand_capacity == 6.0 and plan.unplaced_replicas == 0
    (change,) = plan.changes
    assert (change.name, change.from_replicas, change.to_replicas) == ("h100", 0, 1)
    assert "0.833333/capacity-hour" in change.message


def test_scale_up_picks_the_cheapest_per_unit_of_capacity_not_per_replica() -> None:
    # per replica the slice is cheaper (1 < 2.5); per unit of capacity the H100 is
    states = {"slice": VariantState(0), "h100": VariantState(0)}
    assert plan_replicas([SLICE8K, H100X3], states, 3, now=0.0).replicas == {
        "slice": 0,
        "h100": 1,
    }


def test_a_decision_that_holds_the_current_capacity_moves_no_variant() -> None:
    vs = [SLICE8K, H100X3]
    counts = {"slice": 2, "h100": 2}
    held = capacity_units(vs, counts)
    assert held == 8  # 2 x 1 + 2 x 3 reference replicas
    states = {k: VariantState(n) for k, n in counts.items()}
    assert plan_replicas(vs, states, held, now=0.0).changes == ()


def test_scale_down_removes_the_most_expensive_per_unit_of_capacity_first() -> None:
    # the slice costs 1 per unit, this H100 4/3: the H100 goes first while covered
    dear = Variant("h100", 4.0, 3.0)
    states = {"slice": VariantState(3), "h100": VariantState(1)}
    plan = plan_replicas([SLICE8K, dear], states, 3, now=0.0)
    assert plan.replicas == {"slice": 3, "h100": 0}
    (change,) = plan.changes
    assert change.reason == "scale-down" and "most expensive" in change.message


def test_capacity_units_rounds_a_fraction_up_and_keeps_zero() -> None:
    half = Variant("half", 1.0, 0.5)
    assert capacity_units([half], {"half": 3}) == 2
    assert capacity_units([half], {"half": 0}) == 0


def test_long_prompts_grow_only_the_variant_whose_max_model_len_serves_them() -> None:
    # half the demand is prompts of 8193..16384 tokens: the slices (max 8192) are cheaper
    # per unit here, yet they only take the short half; the H100 serves the long half
    cheap_slice = Variant("slice", 0.5, 1.0, max_model_len=8192)
    states = {"slice": VariantState(0), "h100": VariantState(0)}
    shares = {4096: 0.5, 16384: 0.5}
    plan = plan_replicas([cheap_slice, H100X3], states, 6, now=0.0, length_shares=shares)
    assert plan.replicas == {"slice": 3, "h100": 1}
    assert plan.lengths_known and plan.notes == ()
    assert plan.too_long_share == {"slice": 0.5}
    by_name = {c.name: c for c in plan.changes}
    assert by_name["h100"].message.startswith("requests over 8192 tokens: only h100 serves them")
    assert "requests over" not in by_name["slice"].message
    # the same decision without a histogram: everything on the slices, and a note says
    # the lengths were not known (missing is never "no long requests")
    blind = plan_replicas([cheap_slice, H100X3], states, 6, now=0.0)
    assert blind.replicas == {"slice": 6, "h100": 0} and not blind.lengths_known
    assert blind.too_long_share == {}
    assert any("no request-length histogram" in n for n in blind.notes)
    (grown,) = blind.changes
    assert grown.message.endswith("; request lengths unknown: its maxModelLen not applied")


def test_the_plan_reports_the_share_no_variant_serves_and_splits_the_rest() -> None:
    short_h100 = Variant("h100", 2.5, 3.0, max_model_len=8192)
    states = {"slice": VariantState(0), "h100": VariantState(0)}
    plan = plan_replicas(
        [SLICE8K, short_h100], states, 4, now=0.0, length_shares={1024: 0.75, 32768: 0.25}
    )
    assert plan.unservable_share == pytest.approx(0.25)
    assert plan.replicas == {"slice": 0, "h100": 1}  # the 3 servable units only
    assert any("over 8192 tokens: no variant serves it" in n for n in plan.notes)


def test_length_shares_weigh_each_bucket_by_its_requests_and_midpoint() -> None:
    # 6 requests <= 1024 tokens (midpoint 512), 2 in (1024, 16384] (midpoint 8704)
    shares = length_shares_from_buckets({1024.0: 6.0, 16384.0: 8.0, math.inf: 8.0})
    assert shares.keys() == {1024, 16384}
    assert shares[1024] == pytest.approx(6 * 512 / (6 * 512 + 2 * 8704))
    # requests above the highest finite bound are at least that bound + 1 long
    assert length_shares_from_buckets({1024.0: 0.0, math.inf: 4.0}) == {1025: 1.0}
    # nothing observed in the window: unknown, not "all short"
    assert length_shares_from_buckets({1024.0: 0.0, math.inf: 0.0}) == {}
    assert length_shares_from_buckets({}) == {}


def test_the_rounding_slack_comes_off_the_demand_and_is_checked() -> None:
    h100 = Variant("h100", 4.0, 2.5)
    states = {"slice": VariantState(0), "h100": VariantState(1)}
    # 2.5 running was counted 3: a decision of 3 with slack 0.5 is 2.5, covered
    assert plan_replicas([SLICE8K, h100], states, 3, now=0.0, rounding_slack=0.5).changes == ()
    assert plan_replicas([SLICE8K, h100], states, 3, now=0.0).replicas["slice"] == 1
    with pytest.raises(ConfigError, match=r"rounding_slack: value 1.0 must be in \[0, 1\)"):
        plan_replicas([SLICE8K, h100], states, 3, now=0.0, rounding_slack=1.0)
