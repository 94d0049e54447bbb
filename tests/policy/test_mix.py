"""The cost-optimal variant mix (policy/mix.py) against brute-force enumeration."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from autoscaler.errors import ConfigError
from autoscaler.policy.mix import MixVariant, optimal_mix

MAX_N = 5


def _feasible(variants: list[MixVariant], n: tuple[int, ...], load: dict[str, float]) -> bool:
    """Can replicas ``n`` serve ``load``? An LP on the assignment only (no integers)."""
    buckets = [b for b, x in load.items() if x > 0]
    nv, nb = len(variants), len(buckets)
    if not nb:
        return True
    a_eq = np.zeros((nb, nv * nb))
    a_ub = np.zeros((nv, nv * nb))
    bounds = []
    for i, v in enumerate(variants):
        for j, b in enumerate(buckets):
            k = i * nb + j
            a_eq[j, k] = 1.0
            c = v.capacity.get(b, 0.0)
            if c > 0:
                a_ub[i, k] = load[b] / c
            bounds.append((0.0, 1.0 if c > 0 else 0.0))
    res = linprog(
        np.zeros(nv * nb),
        A_ub=a_ub,
        b_ub=np.array(n, float),
        A_eq=a_eq,
        b_eq=np.ones(nb),
        bounds=bounds,
    )
    return bool(res.status == 0)


def _brute(variants: list[MixVariant], load: dict[str, float]) -> float | None:
    best: float | None = None
    ranges = [
        range(v.min_replicas, (MAX_N if v.max_replicas is None else v.max_replicas) + 1)
        for v in variants
    ]
    for n in itertools.product(*ranges):
        c = sum(v.cost_per_replica_hour * k for v, k in zip(variants, n, strict=True))
        if (best is None or c < best - 1e-9) and _feasible(variants, n, load):
            best = c
    return best


@st.composite
def instances(draw: st.DrawFn) -> tuple[list[MixVariant], dict[str, float]]:
    buckets = ["short", "mid", "long"][: draw(st.integers(1, 3))]
    variants = []
    for i in range(draw(st.integers(1, 3))):
        cap = {b: draw(st.sampled_from([0.0, 0.5, 1.0, 2.0, 3.5, 6.0])) for b in buckets}
        variants.append(
            MixVariant(
                f"v{i}",
                draw(st.sampled_from([0.6, 1.0, 1.2, 2.5, 4.0])),
                cap,
                max_replicas=MAX_N,
            )
        )
    load = {b: draw(st.sampled_from([0.0, 0.4, 1.0, 2.5, 4.0])) for b in buckets}
    return variants, load


@settings(max_examples=60, deadline=None)
@given(instances())
def test_optimal_mix_costs_what_brute_force_enumeration_finds(
    inst: tuple[list[MixVariant], dict[str, float]],
) -> None:
    variants, load = inst
    want = _brute(variants, load)
    got = optimal_mix(variants, load)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got.cost_per_hour == pytest.approx(want, abs=1e-6)
    n = tuple(got.replicas[v.name] for v in variants)
    assert _feasible(variants, n, load)  # and the mix it returns does serve the load


def test_a_mix_beats_one_type_when_the_sizes_differ() -> None:
    # slices are cheap per short request, useless for long ones; the H100 serves both
    slice_ = MixVariant("slice", 4.0 * 2 / 7, {"short": 2.0, "long": 0.0})
    h100 = MixVariant("h100", 4.0, {"short": 6.0, "long": 1.0})
    load = {"short": 8.0, "long": 1.0}
    mix = optimal_mix([slice_, h100], load)
    assert mix is not None
    assert mix.replicas == {"slice": 4, "h100": 1}
    only_h100 = optimal_mix([h100], load)
    assert only_h100 is not None and only_h100.cost_per_hour == pytest.approx(12.0)
    assert mix.cost_per_hour < only_h100.cost_per_hour
    # the long bucket goes to the H100 only
    assert mix.shares["h100"]["long"] == pytest.approx(1.0)


def test_no_variant_serving_a_bucket_means_no_mix() -> None:
    slice_ = MixVariant("slice", 1.0, {"short": 2.0})
    assert optimal_mix([slice_], {"short": 1.0, "long": 0.5}) is None
    capped = MixVariant("slice", 1.0, {"short": 2.0}, max_replicas=1)
    assert optimal_mix([capped], {"short": 3.0}) is None


def test_min_replicas_are_paid_for_even_without_load() -> None:
    v = MixVariant("a", 2.0, {"short": 1.0}, min_replicas=2)
    mix = optimal_mix([v], {})
    assert mix is not None and mix.replicas == {"a": 2} and mix.cost_per_hour == 4.0


def test_bad_input_names_field_value_and_rule() -> None:
    with pytest.raises(ConfigError, match=r"variants\[a\]\.capacity\[short\]: value -1"):
        MixVariant("a", 1.0, {"short": -1.0})
    with pytest.raises(ConfigError, match=r"load\[short\]: value nan"):
        optimal_mix([MixVariant("a", 1.0, {"short": 1.0})], {"short": float("nan")})
