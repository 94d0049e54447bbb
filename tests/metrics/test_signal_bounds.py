"""The range check where numbers enter: every value finite, counts >= 0, fractions <= 1."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.metrics.engines import EngineSnapshot
from autoscaler.metrics.exposition import HistogramData
from autoscaler.metrics.signals import (
    REJECT_REASONS,
    Violation,
    signal_violation,
    snapshot_violation,
    split_valid,
)

INF = math.inf


def test_a_healthy_snapshot_has_no_violation() -> None:
    snap = EngineSnapshot(
        "vllm",
        {"waiting": 0.0, "running": 3.0, "kv_cache_usage": 1.0},
        {"requests": 10.0},
        {"ttft": HistogramData((0.1, INF), (1.0, 2.0), 2.0, 0.3)},
    )
    assert snapshot_violation(snap) is None


@pytest.mark.parametrize(
    ("snap", "name", "reason"),
    [
        (EngineSnapshot("vllm", {"waiting": INF}), "waiting", "not-finite"),
        (EngineSnapshot("vllm", {"running": math.nan}), "running", "not-finite"),
        (EngineSnapshot("vllm", {"waiting": -1e9}), "waiting", "negative"),
        (EngineSnapshot("vllm", {"kv_cache_usage": 1.5}), "kv_cache_usage", "above-one"),
        (EngineSnapshot("vllm", counters={"prompt_tokens": -INF}), "prompt_tokens", "not-finite"),
        (
            EngineSnapshot("vllm", histograms={"ttft": HistogramData((0.1, INF), (1.0, -2.0))}),
            "ttft_bucket{le=inf}",
            "negative",
        ),
        (
            EngineSnapshot("vllm", histograms={"ttft": HistogramData((-1.0, INF), (1.0, 2.0))}),
            "ttft_bucket.le",
            "negative",
        ),
        (
            EngineSnapshot("vllm", histograms={"ttft": HistogramData((0.1, INF), (1, 2), 2, INF)}),
            "ttft_sum",
            "not-finite",
        ),
    ],
)
def test_each_out_of_range_page_value_is_named_with_its_reason(
    snap: EngineSnapshot, name: str, reason: str
) -> None:
    v = snapshot_violation(snap)
    assert v is not None and v.name == name and v.reason == reason
    assert reason in REJECT_REASONS and name in str(v)


def test_signal_ranges_follow_the_signal_kind() -> None:
    assert signal_violation("kv_cache_usage_max", 1.01) is not None
    assert signal_violation("waiting", 1e6) is None  # counts have no upper bound
    assert signal_violation("ttft_p95_s", -0.1) is not None
    assert signal_violation("arrival_rate_per_s", INF) is not None


def test_split_valid_drops_only_the_signals_out_of_range() -> None:
    valid, bad = split_valid({"waiting": 3.0, "running": -1.0, "kv_cache_usage": math.nan})
    assert valid == {"waiting": 3.0}
    assert sorted((v.name, v.reason) for v in bad) == [
        ("kv_cache_usage", "not-finite"),
        ("running", "negative"),
    ]


def _histogram_violation_per_bucket(key: str, hist: HistogramData) -> str | None:
    """The check as it was written before its C-loop fast path: every bucket in order."""
    for bound, count in zip(hist.bounds, hist.counts, strict=True):
        if math.isnan(bound) or bound == -INF:
            return str(Violation(f"{key}_bucket.le", bound, "not-finite"))
        if bound < 0:
            return str(Violation(f"{key}_bucket.le", bound, "negative"))
        if not math.isfinite(count):
            return str(Violation(f"{key}_bucket{{le={bound:g}}}", count, "not-finite"))
        if count < 0:
            return str(Violation(f"{key}_bucket{{le={bound:g}}}", count, "negative"))
    for part, value in (("count", hist.count), ("sum", hist.sum)):
        if value is None:
            continue
        if not math.isfinite(value):
            return str(Violation(f"{key}_{part}", value, "not-finite"))
        if value < 0:
            return str(Violation(f"{key}_{part}", value, "negative"))
    return None


_NUMBERS = st.one_of(
    st.floats(min_value=0, max_value=1e6),
    st.sampled_from([0.0, -0.0, 1e308, -1e-9, -5.0, INF, -INF, math.nan]),
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.tuples(_NUMBERS, _NUMBERS), max_size=6),
    st.none() | _NUMBERS,
    st.none() | _NUMBERS,
)
def test_histogram_check_names_the_same_first_violation_as_a_per_bucket_check(
    buckets: list[tuple[float, float]], count: float | None, total: float | None
) -> None:
    hist = HistogramData(tuple(b for b, _ in buckets), tuple(c for _, c in buckets), count, total)
    got = snapshot_violation(EngineSnapshot("vllm", histograms={"ttft": hist}))
    expected = _histogram_violation_per_bucket("ttft", hist)
    assert (None if got is None else str(got)) == expected


def test_a_histogram_whose_counts_overflow_when_summed_is_still_valid() -> None:
    hist = HistogramData((0.1, 1.0, INF), (1e308, 1e308, 1e308), 1e308, 1.0)
    assert snapshot_violation(EngineSnapshot("vllm", histograms={"ttft": hist})) is None


def _scalar_violation_per_value(snap: EngineSnapshot) -> str | None:
    """The gauge and counter check as it was written before its C-loop fast path."""
    for key, value in (*snap.gauges.items(), *snap.counters.items()):
        if not math.isfinite(value):
            return str(Violation(key, value, "not-finite"))
        if value < 0:
            return str(Violation(key, value, "negative"))
        if key == "kv_cache_usage" and key in snap.gauges and value > 1:
            return str(Violation(key, value, "above-one"))
    return None


@settings(max_examples=400, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["waiting", "running", "kv_cache_usage"]), _NUMBERS),
    st.dictionaries(st.sampled_from(["requests", "prompt_tokens", "preemptions"]), _NUMBERS),
)
def test_gauge_and_counter_check_names_the_same_first_violation_as_a_per_value_check(
    gauges: dict[str, float], counters: dict[str, float]
) -> None:
    snap = EngineSnapshot("vllm", gauges, counters)
    got = snapshot_violation(snap)
    assert (None if got is None else str(got)) == _scalar_violation_per_value(snap)


def test_counters_that_overflow_when_summed_are_still_valid_and_a_later_histogram_checked() -> None:
    bad = HistogramData((0.1, INF), (1.0, -2.0))
    big = {"waiting": 1e308, "running": 1e308}  # sums to +Inf: the per-value loop decides
    snap = EngineSnapshot("vllm", big, {"requests": 1e308, "preemptions": 1e308}, {"ttft": bad})
    v = snapshot_violation(snap)
    assert v is not None and v.name == "ttft_bucket{le=inf}"
