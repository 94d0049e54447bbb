"""Pod scrape source over real loopback HTTP; the clock is passed in (no sleeping)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiohttp import web

from autoscaler.metrics.engines import read_snapshot
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint
from tests.metrics.vllm_pods import FakeVllm, start_pods

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"


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


async def _serve(handler) -> tuple[web.AppRunner, str]:  # type: ignore[no-untyped-def]
    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"


async def test_reads_a_chunked_page_whole_and_refuses_pages_over_the_limit() -> None:
    page = (FIXTURES / "vllm_v1_0.10.txt").read_bytes()

    async def chunked(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        for i in range(0, len(page), 1000):  # many small chunks
            await resp.write(page[i : i + 1000])
        await resp.write_eof()
        return resp

    async def whole(_: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/plain")

    for handler in (chunked, whole):
        runner, url = await _serve(handler)
        roomy = PodScrapeSource(ScrapeConfig(max_page_bytes=len(page)))
        tight = PodScrapeSource(ScrapeConfig(max_page_bytes=len(page) - 1))
        try:
            ok = await roomy.read("t", [PodEndpoint("p", url)], 1.0)
            refused = await tight.read("t", [PodEndpoint("p", url)], 1.0)
        finally:
            await roomy.close()
            await tight.close()
            await runner.cleanup()
        assert ok.pods_read == 1 and ok.signals["waiting"] == 11 and ok.signals["running"] == 42
        assert refused.pods_read == 0 and "larger than" in refused.errors[0]


async def test_a_pod_that_changes_engine_is_detected_again() -> None:
    pages = {"page": (FIXTURES / "vllm_v1_0.10.txt").read_bytes()}

    async def handler(_: web.Request) -> web.Response:
        return web.Response(body=pages["page"], content_type="text/plain")

    runner, url = await _serve(handler)
    source = PodScrapeSource(ScrapeConfig())
    try:
        first = await source.read("t", [PodEndpoint("p", url)], 1.0)
        pages["page"] = (FIXTURES / "sglang.txt").read_bytes()
        second = await source.read("t", [PodEndpoint("p", url)], 2.0)
    finally:
        await source.close()
        await runner.cleanup()
    sglang = read_snapshot(pages["page"].decode())
    assert first.pods_read == 1 and first.signals["waiting"] == 11
    assert second.pods_read == 1 and second.signals["waiting"] == sglang.gauges["waiting"]


async def test_scrapes_in_flight_never_exceed_max_concurrency_across_targets() -> None:
    page = (FIXTURES / "vllm_v1_0.10.txt").read_bytes()
    in_flight = [0, 0]  # now, most seen
    gate = asyncio.Event()

    async def slow(_: web.Request) -> web.Response:
        in_flight[0] += 1
        in_flight[1] = max(in_flight)
        await gate.wait()
        in_flight[0] -= 1
        return web.Response(body=page, content_type="text/plain")

    runner, url = await _serve(slow)
    source = PodScrapeSource(ScrapeConfig(max_concurrency=3))
    pods = [PodEndpoint(f"p{i}", f"{url}?pod={i}") for i in range(4)]
    try:
        reads = [asyncio.ensure_future(source.read(f"t{k}", pods, 1.0)) for k in range(2)]
        for _ in range(2000):  # yields only: the server accepts and answers in this loop
            await asyncio.sleep(0)
            if in_flight[0] == 3:
                break
        assert in_flight[0] == 3  # 8 scrapes wanted, 3 slots
        gate.set()
        readings = await asyncio.gather(*reads)
    finally:
        await source.close()
        await runner.cleanup()
    assert in_flight[1] == 3
    assert [r.pods_read for r in readings] == [4, 4]
