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
NAN = math.nan


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
    assert signal_violation("waiting", 1e6) is None  # the plausible bound, per pod
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
        if count > 2.0**53:
            return str(Violation(f"{key}_bucket{{le={bound:g}}}", count, "implausible", 2.0**53))
    for part, value in (("count", hist.count), ("sum", hist.sum)):
        if value is None:
            continue
        if not math.isfinite(value):
            return str(Violation(f"{key}_{part}", value, "not-finite"))
        if value < 0:
            return str(Violation(f"{key}_{part}", value, "negative"))
        if value > 2.0**53:
            return str(Violation(f"{key}_{part}", value, "implausible", 2.0**53))
    return None


_NUMBERS = st.one_of(
    st.floats(min_value=0, max_value=1e6),
    st.sampled_from(
        [0.0, -0.0, 1.0005, 1.002, 1e6 + 1, 2.0**53, 2.0**54, 1e308, -1e-9, -5.0, INF, -INF, NAN]
    ),
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


def test_a_histogram_count_above_exact_float_range_is_implausible() -> None:
    hist = HistogramData((0.1, 1.0, INF), (1e308, 1e308, 1e308), 1e308, 1.0)
    v = snapshot_violation(EngineSnapshot("vllm", histograms={"ttft": hist}))
    assert v is not None and v.reason == "implausible" and v.name == "ttft_bucket{le=0.1}"


def _scalar_violation_per_value(snap: EngineSnapshot) -> str | None:
    """The gauge and counter check as it was written before its C-loop fast path."""
    for key, value in (*snap.gauges.items(), *snap.counters.items()):
        if not math.isfinite(value):
            return str(Violation(key, value, "not-finite"))
        if value < 0:
            return str(Violation(key, value, "negative"))
        if key == "kv_cache_usage" and key in snap.gauges:
            if value > 1.001:
                return str(Violation(key, value, "above-one"))
            continue
        limit = 1e6 if key in ("waiting", "running") and key in snap.gauges else 2.0**53
        if value > limit:
            return str(Violation(key, value, "implausible", limit))
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


def test_counters_whose_sum_overflows_are_judged_one_by_one_and_a_later_histogram_checked() -> None:
    bad = HistogramData((0.1, INF), (1.0, -2.0))
    big = {"waiting": 1e6, "running": 1e6}
    counters = {"requests": 2.0**53, "preemptions": 2.0**53}  # each within its bound
    snap = EngineSnapshot("vllm", big, counters, {"ttft": bad})
    v = snapshot_violation(snap)
    assert v is not None and v.name == "ttft_bucket{le=inf}"


def test_a_pod_reporting_1e308_waiting_is_implausible_and_says_the_bound() -> None:
    v = snapshot_violation(EngineSnapshot("vllm", {"waiting": 1e308, "running": 3.0}))
    assert v is not None and (v.name, v.reason) == ("waiting", "implausible")
    assert "must be <= 1e+06" in str(v) and "implausible" in REJECT_REASONS


def test_kv_usage_within_the_slack_above_one_is_read_as_one() -> None:
    assert snapshot_violation(EngineSnapshot("vllm", {"kv_cache_usage": 1.0005})) is None
    valid, bad = split_valid({"kv_cache_usage": 1.0005, "kv_cache_usage_max": 1.0005})
    assert valid == {"kv_cache_usage": 1.0, "kv_cache_usage_max": 1.0} and not bad
    v = snapshot_violation(EngineSnapshot("vllm", {"kv_cache_usage": 1.002}))
    assert v is not None and v.reason == "above-one"


@pytest.mark.parametrize(
    ("name", "per_pod_max"),
    [
        ("waiting", 1e6),
        ("running", 1e6),
        ("arrival_rate_per_s", 1e5),
        ("prompt_tokens_per_s", 1e7),
        ("generation_tokens_per_s", 1e6),
        ("preemptions_per_s", 1e5),
    ],
)
def test_target_signal_bounds_scale_with_the_pods_read(name: str, per_pod_max: float) -> None:
    assert signal_violation(name, per_pod_max * 8, pods=8) is None
    v = signal_violation(name, per_pod_max * 8 * 1.01, pods=8)
    assert v is not None and v.reason == "implausible"
    assert signal_violation(name, per_pod_max * 1.01, pods=1) is not None


def test_a_latency_quantile_from_a_huge_bucket_bound_is_implausible() -> None:
    assert signal_violation("ttft_p99_s", 60.0) is None
    v = signal_violation("ttft_p99_s", 1e308)
    assert v is not None and v.reason == "implausible"
    valid, bad = split_valid({"ttft_p99_s": 1e308, "waiting": 2.0}, pods=1)
    assert valid == {"waiting": 2.0} and [b.name for b in bad] == ["ttft_p99_s"]
