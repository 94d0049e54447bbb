"""The planner's fast paths (issue 16) compute exactly what the slow ones did: numpy's
quantile, dataclasses.replace, capacities recomputed on every read."""

from __future__ import annotations

import bisect
import dataclasses
import math
import random
import struct
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.forecast.capacity import Book, CapacityEstimator
from autoscaler.forecast.coldstart import ColdStartEstimator
from autoscaler.forecast.models import Holt
from autoscaler.forecast.robust import evolve, quantile_sorted


@pytest.mark.parametrize("seed", range(5))
def test_quantile_of_sorted_values_equals_numpy_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(400):
        n = rng.randint(1, 80)
        pool = [rng.uniform(0.0, 100.0) for _ in range(rng.randint(1, n))]
        values = [rng.choice(pool) for _ in range(n)]  # duplicates included
        q = rng.choice((0.0, 0.5, 0.9, 1.0, rng.random()))
        expected = float(np.quantile(np.asarray(values), q))
        assert quantile_sorted(sorted(values), q) == expected, (values, q)


def test_quantile_of_nothing_is_an_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="values"):
        quantile_sorted([], 0.9)


def _numpy_capacity(est: CapacityEstimator, name: str) -> float | None:
    """The capacity as computed before the fast path (np.quantile over the books)."""
    threshold = est.fallback.get(name)
    seen = est.sustained.get(name, ())
    learned = (
        float(np.quantile(np.asarray(seen), est.quantile)) if len(seen) >= est.min_samples else None
    )
    if learned is None and threshold is None:
        return None
    value = max(x for x in (learned, threshold) if x is not None)
    bad = est.violating.get(name, ())
    if len(bad) >= est.min_samples:
        ceiling = float(np.quantile(np.asarray(bad), est.violation_quantile))
        if ceiling > 0:
            value = min(value, ceiling)
    return value


def test_capacity_over_sliding_windows_equals_numpy_quantiles() -> None:
    rng = random.Random(7)
    est = CapacityEstimator(fallback={"running": 40.0}, window=25, min_samples=5)
    for i in range(600):
        ready = rng.randint(1, 6)
        running = round(rng.uniform(0.0, 60.0), 1) * ready  # ties on purpose
        signals = {"running": running, "ttft_p95_s": rng.uniform(0.1, 0.9), "waiting": 2.0}
        before = est
        est = est.observe(float(i), ready, signals)
        for name in ("running", "arrival_rate_per_s"):
            assert est.capacity(name) == _numpy_capacity(est, name)
        assert before.capacities() == {
            n: v
            for n in sorted(set(before.fallback) | set(before.sustained))
            if (v := _numpy_capacity(before, n)) is not None
        }
    assert len(est.sustained["running"]) == 25
    assert len(est.violating["running"]) == 25


def test_a_hand_built_estimator_sorts_its_books_when_read() -> None:
    books = {"running": (30.0, 10.0, 20.0)}
    est = CapacityEstimator(sustained=books, violating=books, min_samples=3)
    assert est.capacity("running") == _numpy_capacity(est, "running")


def test_capacities_are_recomputed_after_each_observation() -> None:
    est = CapacityEstimator(fallback={"running": 40.0}, min_samples=1)
    assert est.capacities() == {"running": 40.0}
    est = est.observe(1.0, 1, {"running": 50.0, "ttft_p95_s": 0.1})
    assert est.capacities() == {"running": 50.0}
    est.capacities()["running"] = 0.0  # callers get a copy
    assert est.capacities() == {"running": 50.0}


def test_evolve_equals_dataclasses_replace_and_leaves_the_original_alone() -> None:
    model = Holt().update(0.0, 1.0).update(1.0, 3.0)
    fast = evolve(model, level=7.0, last_t=2.0)
    slow = dataclasses.replace(model, level=7.0, last_t=2.0)
    assert fast == slow
    assert model.level != 7.0
    assert type(fast) is Holt
    with pytest.raises(TypeError):
        evolve(model, no_such_field=1.0)


@pytest.mark.parametrize("seed", range(3))
def test_cold_start_quantile_equals_numpy_bit_for_bit(seed: int) -> None:
    rng = random.Random(seed)
    est = ColdStartEstimator(window=20, min_pods_to_learn=1, quantile=rng.random())
    for i in range(200):
        est = est.observe(float(i), round(rng.uniform(20.0, 400.0), rng.choice((0, 1, 6))))
        expected = float(np.quantile(np.asarray(est.samples_s), est.quantile))
        assert est.estimate_s == expected
        hand_built = ColdStartEstimator(
            samples_s=est.samples_s, seen=est.seen, quantile=est.quantile, min_pods_to_learn=1
        )
        assert hand_built.estimate_s == expected


def test_older_capacity_states_keep_their_books_when_newer_ones_observe() -> None:
    est = CapacityEstimator(window=4, min_samples=1)
    states = []
    for i in range(12):  # near the SLO without a queue reading: sustained evidence
        est = est.observe(float(i), 1, {"running": 30.0 + i, "ttft_p95_s": 0.3})
        states.append(est)
    for i, state in enumerate(states):
        kept = [30.0 + k for k in range(max(0, i - 3), i + 1)]
        assert list(state.sustained["running"]) == kept
        assert list(state.sustained["running"].ordered) == kept  # type: ignore[attr-defined]
        assert state.capacity("running") == float(np.quantile(kept, 0.9))


def _as_float32(value: float) -> float:
    return float(struct.unpack("<f", struct.pack("<f", value))[0])


@pytest.mark.parametrize("window", [1, 3, 25])
@pytest.mark.parametrize("wide_pool", [False, True])
def test_a_book_keeps_the_window_in_arrival_order_and_sorted_as_the_lists_did(
    window: int, wide_pool: bool
) -> None:
    # The reference is the previous structure: the window in arrival order and its sorted
    # copy kept by deleting the leftmost equal sample and inserting right of the equal
    # ones, of the values as stored: float32-rounded until a value outside float32's
    # normal range (1e-300, 1e300) arrives, then every later one exactly.
    rng = random.Random(window)
    pool = [0.0, -0.0, 1.5, 2.25, 7.0, 0.1, 3.4e38, -1.2e-38]
    if wide_pool:
        pool += [1e-300, 1e300]
    book = Book.of((), window)
    arrival: list[float] = []
    ordered: list[float] = []
    wide = False
    for _ in range(400):
        value = rng.choice(pool) if rng.random() < 0.5 else rng.uniform(0.0, 10.0)
        wide = wide or value in (1e-300, 1e300)
        stored = value if wide else _as_float32(value)
        older, before = book, list(book)
        book = book.appended(value, window)
        arrival.append(stored)
        ordered.insert(bisect.bisect_right(ordered, stored), stored)
        if len(arrival) > window:
            gone = arrival.pop(0)
            del ordered[bisect.bisect_left(ordered, gone)]
        assert [struct.pack("<d", v) for v in book.ordered] == [
            struct.pack("<d", v) for v in ordered
        ]  # bit for bit, the sign of zero included
        assert list(book) == arrival and len(book) == len(arrival)
        assert book[-1] == stored and book[0] == arrival[0]
        assert list(older) == before  # an older state keeps its book
        assert book.ordered.itemsize == (8 if wide else 4)


def test_a_book_stores_4_bytes_per_sample_within_float32_s_rounding() -> None:
    rng = random.Random(16)
    values = [rng.uniform(0.0, 5000.0) for _ in range(600)]
    book = Book.of(values, 600)
    assert book.ordered.itemsize == 4 and book.seqs.itemsize == 2
    for got, value in zip(book, values, strict=True):
        assert got == _as_float32(value)
        assert abs(got - value) <= abs(value) * 2.0**-24
    assert sum(1 for got, value in zip(book, values, strict=True) if got != value) > 500


def test_a_sample_outside_float32_s_range_widens_its_book_and_is_kept_exactly() -> None:
    for far in (1e39, -1e39, 1e-39, 1e-310):
        book = Book.of([0.1, 2.5], 4).appended(far, 4)
        assert book.ordered.itemsize == 8
        assert list(book) == [_as_float32(0.1), 2.5, far]  # earlier ones as stored
        assert math.isfinite(book[-1]) and book[-1] != 0.0
        assert list(book.appended(0.1, 4))[-1] == 0.1  # wide for good: exact from then on


def test_a_book_s_arrival_numbers_wrap_around_without_losing_the_order() -> None:
    book = Book.of((), 3)
    for i in range(70_000):  # more appends than 2**16 arrival numbers
        book = book.appended(float(i % 5), 3)
    assert list(book) == [float(i % 5) for i in range(69_997, 70_000)]
    assert list(book.ordered) == sorted(book)
    assert book.seqs.typecode == "H"
    assert Book.of((), 1 << 16).seqs.typecode == "Q"  # a larger window: 8-byte numbers


def test_a_book_built_from_a_hand_built_sequence_drops_the_oldest_to_hold_the_window() -> None:
    assert list(Book.of((4.0, 1.0, 3.0, 2.0), 3)) == [1.0, 3.0, 2.0]
    assert Book.of((1.0, 2.0), 5) == Book.of((1.0, 2.0), 5)
    assert Book.of((1.0, 2.0), 5) != Book.of((2.0, 1.0), 5)


def test_the_controller_imports_without_numpy() -> None:
    code = "import sys, autoscaler.app; print('numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _recomputed(est: CapacityEstimator) -> dict[str, float]:
    """Every capacity computed from the books, as before capacities were carried over."""
    fresh = CapacityEstimator(
        fallback=est.fallback,
        window=est.window,
        min_samples=est.min_samples,
        sustained=est.sustained,
        violating=est.violating,
    )
    names = sorted(set(fresh.fallback) | set(fresh.sustained))
    return {n: v for n in names if (v := fresh.capacity(n)) is not None}


_OBSERVATION = st.tuples(
    st.integers(0, 4),  # ready replicas (0: ignored)
    st.sampled_from((0.1, 0.3, 0.45, 0.6, 2.0)),  # latency around the 0.5 s SLO
    st.sampled_from((None, 0.0, 3.0)),  # queue
    st.lists(st.sampled_from((0.0, 5.0, 21.0, 40.0, 90.0)), min_size=4, max_size=4),
    st.booleans(),  # read the capacities after this tick
)


@settings(max_examples=150, deadline=None)
@given(ticks=st.lists(_OBSERVATION, min_size=1, max_size=80))
def test_capacities_carried_over_between_observations_equal_a_full_recompute(
    ticks: list[tuple[int, float, float | None, list[float], bool]],
) -> None:
    """`observe` keeps the previous capacities and recomputes only the signals whose
    books changed, whether or not the intermediate states were read."""
    est = CapacityEstimator(fallback={"running": 40.0}, window=6, min_samples=3)
    names = ("running", "arrival_rate_per_s", "prompt_tokens_per_s", "generation_tokens_per_s")
    for i, (ready, latency, queue, values, read) in enumerate(ticks):
        signals = dict(zip(names, values, strict=True))
        signals["ttft_p95_s"] = latency
        if queue is not None:
            signals["waiting"] = queue
        est = est.observe(float(i), ready, signals)
        if read:
            caps = est.capacities()
            assert list(caps.items()) == list(_recomputed(est).items())
            assert caps == {
                n: v
                for n in sorted(set(est.fallback) | set(est.sustained))
                if (v := _numpy_capacity(est, n)) is not None
            }
        assert len(est.changed) == len(set(est.changed)) <= len(names)
    assert list(est.capacities().items()) == list(_recomputed(est).items())
