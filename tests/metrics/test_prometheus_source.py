"""PrometheusSource against a real Prometheus server scraping real HTTP vLLM pages."""

from __future__ import annotations

import asyncio
import urllib.parse

import pytest

from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.metrics.source import PodEndpoint
from tests.metrics.vllm_pods import FakeVllm, start_pods
from tests.support.prometheus import PrometheusServer


@pytest.mark.timeout(90)
async def test_prometheus_source_reads_seed_queries_and_templates_from_real_server() -> None:
    pods = [FakeVllm(), FakeVllm()]
    pods[0].set(waiting=2, running=7, kv=0.3)
    pods[1].set(waiting=4, running=9, kv=0.7)
    runner, urls = await start_pods(pods)
    hosts = [urllib.parse.urlsplit(u) for u in urls]
    try:
        async with (
            PrometheusServer(
                [hosts[0].netloc],
                scrape_interval_s=0.5,
                metrics_path="/pod/0/metrics",
                target_labels=[{"deployment": "vllm-llama3-70b", "namespace": "llm-serving"}],
            ) as prom0,
            PrometheusServer(
                [hosts[1].netloc],
                scrape_interval_s=0.5,
                metrics_path="/pod/1/metrics",
                target_labels=[{"deployment": "vllm-llama3-70b", "namespace": "llm-serving"}],
            ) as prom1,
        ):
            await prom0.wait_for("vllm:num_requests_waiting", deadline_s=40)
            await prom1.wait_for("vllm:num_requests_waiting", deadline_s=40)
            # one server per pod keeps scrape paths apart; check the seeds' queries on one
            seed = PrometheusSource(
                prom0.url,
                {"t": ""},
                {
                    "waiting": 'sum(vllm:num_requests_waiting{deployment="vllm-llama3-70b"})',
                    "kv_cache_usage_max": (
                        'max(vllm:gpu_cache_usage_perc{deployment="vllm-llama3-70b"})'
                    ),
                },
            )
            pods_in = [PodEndpoint("p0", urls[0])]
            got = await seed.read("t", pods_in, now=0.0)
            assert got.signals == {"waiting": 2.0, "kv_cache_usage_max": 0.3}
            assert got.pods_read == 1 and got.errors == ()
            await seed.close()

            # templates: traffic then wait until rate() has two samples with the increase
            source = PrometheusSource(prom1.url, {"ns/llama": 'namespace="llm-serving"'})
            for _ in range(6):
                pods[1].serve(prompt_tokens=100, ttfts=[0.03, 0.07, 0.3])
                await asyncio.sleep(0.5)
            await prom1.wait_for(
                'sum(rate(vllm:prompt_tokens_total{namespace="llm-serving"}[1m])) > 0',
                deadline_s=20,
            )
            reading = await source.read("ns/llama", [PodEndpoint("p1", urls[1])], now=1.0)
            await source.close()
            s = reading.signals
            assert s["waiting"] == 4 and s["running"] == 9
            assert s["kv_cache_usage"] == pytest.approx(0.7)  # both KV names: not doubled
            assert s["prompt_tokens_per_s"] > 0 and s["arrival_rate_per_s"] > 0
            assert 0.0 < s["ttft_p50_s"] <= 0.1 and s["ttft_p99_s"] <= 0.5
            assert "preemptions_per_s" not in s  # the pods do not export it: absent
    finally:
        await runner.cleanup()


async def test_unreachable_prometheus_leaves_every_signal_absent() -> None:
    source = PrometheusSource("http://127.0.0.1:9", {"t": ""}, timeout_s=1.0)
    reading = await source.read("t", [PodEndpoint("p", "x")], now=0.0)
    await source.close()
    assert reading.signals == {} and reading.pods_read == 0 and len(reading.errors) == 12
