"""Pod scrape source over real loopback HTTP; the clock is passed in (no sleeping)."""

from __future__ import annotations

import pytest

from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint
from tests.metrics.vllm_pods import FakeVllm, start_pods


@pytest.fixture
async def two_pods():  # type: ignore[no-untyped-def]
    pods = [FakeVllm(), FakeVllm()]
    runner, urls = await start_pods(pods)
    source = PodScrapeSource(ScrapeConfig(timeout_s=2.0, stale_after_s=10.0))
    endpoints = [PodEndpoint(f"pod-{i}", u) for i, u in enumerate(urls)]
    yield pods, endpoints, source
    await source.close()
    await runner.cleanup()


async def test_sums_counts_averages_fractions_and_rates_over_pods(two_pods) -> None:  # type: ignore[no-untyped-def]
    pods, endpoints, source = two_pods
    pods[0].set(waiting=3, running=10, kv=0.2)
    pods[1].set(waiting=5, running=20, kv=0.6)
    for pod in pods:
        pod.serve(prompt_tokens=0, ttfts=[])  # counters exist from the first scrape on
    first = await source.read("ns/llama", endpoints, now=100.0)
    assert first.pods_read == 2 and first.errors == ()
    assert first.signals["waiting"] == 8 and first.signals["running"] == 30
    assert first.signals["kv_cache_usage"] == pytest.approx(0.4)
    assert first.signals["kv_cache_usage_max"] == pytest.approx(0.6)
    assert "prompt_tokens_per_s" not in first.signals  # one scrape: no rate yet
    pods[0].serve(prompt_tokens=500, ttfts=[0.03] * 10)
    pods[1].serve(prompt_tokens=1500, ttfts=[0.03] * 10)
    second = await source.read("ns/llama", endpoints, now=110.0)
    assert second.signals["prompt_tokens_per_s"] == pytest.approx(200.0)
    assert second.signals["arrival_rate_per_s"] == pytest.approx(2.0)
    assert 0.02 < second.signals["ttft_p50_s"] <= 0.04


async def test_failed_pod_is_unknown_not_zero(two_pods) -> None:  # type: ignore[no-untyped-def]
    pods, endpoints, source = two_pods
    pods[0].set(waiting=3, running=10, kv=0.2)
    pods[1].set(waiting=5, running=20, kv=0.9)
    pods[1].status = 503
    reading = await source.read("ns/llama", endpoints, now=1.0)
    assert reading.pods_read == 1 and reading.pods_expected == 2 and not reading.complete
    assert reading.signals["waiting"] == 3 and reading.signals["kv_cache_usage_max"] == 0.2
    assert len(reading.errors) == 1 and "pod-1" in reading.errors[0] and "503" in reading.errors[0]


async def test_unreachable_pod_times_out_and_is_reported() -> None:
    source = PodScrapeSource(ScrapeConfig(timeout_s=0.5))
    try:
        reading = await source.read("t", [PodEndpoint("gone", "http://127.0.0.1:9/metrics")], 0.0)
    finally:
        await source.close()
    assert reading.pods_read == 0 and reading.signals == {} and reading.errors


async def test_no_rate_across_a_gap_longer_than_staleness(two_pods) -> None:  # type: ignore[no-untyped-def]
    pods, endpoints, source = two_pods
    await source.read("t", endpoints, now=0.0)
    pods[0].serve(prompt_tokens=1000, ttfts=[])
    reading = await source.read("t", endpoints, now=60.0)  # > stale_after_s later
    assert "prompt_tokens_per_s" not in reading.signals
