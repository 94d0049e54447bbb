"""Rates and windowed quantiles follow PromQL; missing data is absent, never zero."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.metrics.engines import EngineSnapshot
from autoscaler.metrics.exposition import HistogramData
from autoscaler.metrics.signals import aggregate, histogram_quantile, observe

INF = math.inf


def snap(
    counters: dict[str, float] | None = None, ttft: tuple[float, ...] | None = None, **g: float
) -> EngineSnapshot:
    hist = {}
    if ttft is not None:
        hist["ttft"] = HistogramData((0.1, 0.5, 1.0, INF), ttft)
    return EngineSnapshot("vllm", g, counters or {}, hist)


def test_quantile_interpolates_linearly_inside_the_bucket() -> None:
    # 10 obs <= 0.1, 10 more <= 0.5: p75 has rank 15, halfway through (0.1, 0.5]
    assert histogram_quantile(0.75, {0.1: 10, 0.5: 20, INF: 20}) == pytest.approx(0.3)


def test_quantile_in_first_bucket_starts_from_zero() -> None:
    assert histogram_quantile(0.5, {0.1: 10, 0.5: 10, INF: 10}) == pytest.approx(0.05)


def test_quantile_in_inf_bucket_returns_highest_finite_bound() -> None:
    assert histogram_quantile(0.99, {0.1: 1, 0.5: 2, INF: 10}) == 0.5


def test_quantile_without_observations_is_missing() -> None:
    assert histogram_quantile(0.5, {0.1: 0, INF: 0}) is None
    assert histogram_quantile(0.5, {0.1: 3}) is None


def test_counter_rate_over_window_and_reset_counts_from_zero() -> None:
    h = observe(None, snap({"prompt_tokens": 100}), 0.0, 60)
    h = observe(h, snap({"prompt_tokens": 300}), 10.0, 60)
    assert aggregate([h])["prompt_tokens_per_s"] == pytest.approx(20.0)
    h = observe(h, snap({"prompt_tokens": 50}), 20.0, 60)  # pod restarted
    assert aggregate([h])["prompt_tokens_per_s"] == pytest.approx((200 + 50) / 20)


def test_window_drops_old_scrapes() -> None:
    h = observe(None, snap({"requests": 0}), 0.0, 30)
    h = observe(h, snap({"requests": 1000}), 10.0, 30)
    h = observe(h, snap({"requests": 1000}), 50.0, 30)
    h = observe(h, snap({"requests": 1010}), 60.0, 30)
    assert aggregate([h])["arrival_rate_per_s"] == pytest.approx(1.0)


def test_first_scrape_gives_gauges_but_no_rates_or_quantiles() -> None:
    h = observe(None, snap({"requests": 5}, ttft=(1, 2, 3, 3), waiting=2), 0.0, 60)
    out = aggregate([h])
    assert out == {"waiting": 2.0}


def test_quantile_merges_bucket_increases_across_pods() -> None:
    a = observe(None, snap(ttft=(0, 0, 0, 0)), 0.0, 60)
    a = observe(a, snap(ttft=(10, 10, 10, 10)), 5.0, 60)
    b = observe(None, snap(ttft=(100, 100, 100, 100)), 0.0, 60)
    b = observe(b, snap(ttft=(100, 110, 110, 110)), 5.0, 60)
    out = aggregate([a, b])
    # merged increases: 10 in (0, 0.1], 10 in (0.1, 0.5]; p50 rank 10 -> 0.1
    assert out["ttft_p50_s"] == pytest.approx(0.1)
    assert out["ttft_p95_s"] == pytest.approx(0.1 + 0.4 * 9 / 10)


def test_fractions_are_mean_and_max_counts_are_sums() -> None:
    pods = [
        observe(None, snap(waiting=w, kv_cache_usage=k), 0.0, 60) for w, k in ((1, 0.2), (3, 0.8))
    ]
    out = aggregate(pods)
    assert out["waiting"] == 4 and out["kv_cache_usage"] == pytest.approx(0.5)
    assert out["kv_cache_usage_max"] == 0.8


def test_no_pods_read_means_no_signals() -> None:
    assert aggregate([]) == {}


def test_time_going_backwards_is_rejected() -> None:
    h = observe(None, snap(), 10.0, 60)
    with pytest.raises(ValueError, match="backwards"):
        observe(h, snap(), 5.0, 60)


def test_bucket_layout_change_mid_window_counts_new_buckets_from_their_first_sight() -> None:
    h = observe(None, snap(ttft=(0, 0, 0, 0)), 0.0, 60)
    h = observe(h, snap(ttft=(0, 10, 10, 10)), 5.0, 60)
    # The engine restarts with a finer layout (0.25 added): counts start again from zero.
    finer = EngineSnapshot(
        "vllm", {}, {}, {"ttft": HistogramData((0.1, 0.25, 0.5, 1.0, INF), (0, 4, 4, 4, 4))}
    )
    h = observe(h, finer, 10.0, 60)
    out = aggregate([h])
    # Increases: 4 in (0.1, 0.25] (new bucket, from zero) and 10 + 4 in (0.1, 0.5]:
    # cumulative 0.25 -> 4, 0.5 -> 14; p50 rank 7 lies in (0.25, 0.5].
    assert out["ttft_p50_s"] == pytest.approx(0.25 + 0.25 * (7 - 4) / 10)


def _quantile_per_bucket(q: float, buckets: dict[float, float]) -> float | None:
    """`histogram_quantile` as written before its C-loop running maximum and bisection."""
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1] != INF:
        return None
    counts: list[float] = []
    running = 0.0
    for b in bounds:
        running = max(running, buckets[b])
        counts.append(running)
    if counts[-1] <= 0:
        return None
    rank = q * counts[-1]
    idx = next(i for i, c in enumerate(counts) if c >= rank)
    if idx == len(bounds) - 1:
        return bounds[-2]
    if idx == 0 and bounds[0] <= 0:
        return bounds[0]
    start, end, count = 0.0, bounds[idx], counts[idx]
    if idx > 0:
        start = bounds[idx - 1]
        count -= counts[idx - 1]
        rank -= counts[idx - 1]
    return start if count == 0 else start + (end - start) * (rank / count)


@settings(max_examples=500, deadline=None)
@given(
    st.floats(min_value=0.0, max_value=1.0),
    st.dictionaries(
        st.floats(min_value=-1.0, max_value=100.0) | st.just(INF),
        st.floats(min_value=0.0, max_value=1e6) | st.sampled_from([0.0, 1.0, 5.0]),
        max_size=8,
    ),
)
def test_quantile_equals_the_per_bucket_computation(q: float, buckets: dict[float, float]) -> None:
    assert histogram_quantile(q, buckets) == _quantile_per_bucket(q, buckets)
