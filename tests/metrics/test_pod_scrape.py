"""Pod scrape source over real loopback HTTP; the clock is passed in (no sleeping)."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from fastapi import FastAPI
from prometheus_client import Histogram, make_asgi_app
from starlette.routing import Mount

from autoscaler.api.server import serve_http
from autoscaler.metrics.engines import (
    ADAPTERS,
    VLLM_LENGTH_SAMPLES,
    VLLM_REQUEST_SAMPLES,
    read_snapshot,
)
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint, TargetReading
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


def _with_unread_families(pod: FakeVllm) -> FakeVllm:
    """A pod that also exports histograms the adapter never reads (as vLLM does)."""
    for name in ("vllm:e2e_request_latency_seconds", "vllm:request_prefill_time_seconds"):
        h = Histogram(name, "unread", ["model_name", "engine"], registry=pod.registry)
        h.labels(*pod.key()).observe(0.3)
    return pod


async def _read_side_by_side(
    pods: list[FakeVllm], config: ScrapeConfig, ticks: int = 4
) -> tuple[list[TargetReading], list[TargetReading], PodScrapeSource]:
    """The same pods read each tick by a source with ``config`` and by one that never
    filters; the first source is returned too (closed)."""
    runner, urls = await start_pods(pods)
    endpoints = [PodEndpoint(f"pod-{i}", u) for i, u in enumerate(urls)]
    source = PodScrapeSource(config)
    whole = PodScrapeSource(dataclasses.replace(config, filter_families=False))
    got, expected = [], []
    try:
        for tick in range(ticks):
            for i, pod in enumerate(pods):
                pod.set(waiting=tick + i, running=10 + tick, kv=0.1 * (tick + 1))
                pod.serve(prompt_tokens=100 * tick, ttfts=[0.03 * (i + 1)] * (tick + 1))
            got.append(await source.read("ns/llama", endpoints, now=float(tick)))
            expected.append(await whole.read("ns/llama", endpoints, now=float(tick)))
    finally:
        await source.close()
        await whole.close()
        await runner.cleanup()
    return got, expected, source


def _same_readings(got: list[TargetReading], expected: list[TargetReading]) -> None:
    for a, b in zip(got, expected, strict=True):
        assert a.pods_read == b.pods_read == a.pods_expected and a.errors == ()
        assert a.signals == b.signals
    assert "prompt_tokens_per_s" in got[-1].signals and "ttft_p95_s" in got[-1].signals


async def test_asks_a_vllm_pod_for_only_the_families_it_reads_once_detected() -> None:
    pods = [_with_unread_families(FakeVllm()), _with_unread_families(FakeVllm())]
    got, expected, _ = await _read_side_by_side(pods, ScrapeConfig())
    _same_readings(got, expected)
    for pod in pods:  # whole page to detect the engine, then only the samples read
        mine = pod.asked[0::2]  # the unfiltered source's requests are the odd ones
        assert mine == [(), *[VLLM_REQUEST_SAMPLES] * 3]
        assert all(asked == () for asked in pod.asked[1::2])
    restricted = pods[0].page(VLLM_REQUEST_SAMPLES)
    assert b"e2e_request_latency" not in restricted and b"time_to_first_token" in restricted


async def test_prompt_lengths_are_asked_for_and_windowed_only_for_targets_that_want_them() -> None:
    pod = FakeVllm()
    lengths = Histogram(
        "vllm:request_prompt_tokens",
        "prompt tokens per request",
        ["model_name", "engine"],
        buckets=[1000, 10000, 20000],
        registry=pod.registry,
    )
    runner, urls = await start_pods([pod])
    source = PodScrapeSource(ScrapeConfig(engine="vllm"))
    endpoints = [PodEndpoint("pod-0", urls[0])]
    try:
        source.want_lengths("ns/variants", True)
        pod.set(waiting=1, running=1, kv=0.1)
        lengths.labels(*pod.key()).observe(500)
        first = await source.read("ns/variants", endpoints, now=0.0)
        for n in (500, 12000, 12000):
            lengths.labels(*pod.key()).observe(n)
        second = await source.read("ns/variants", endpoints, now=1.0)
        plain = await source.read("ns/plain", endpoints, now=1.0)
    finally:
        await source.close()
        await runner.cleanup()
    assert pod.asked[0] == VLLM_REQUEST_SAMPLES + VLLM_LENGTH_SAMPLES
    assert pod.asked[2] == VLLM_REQUEST_SAMPLES  # a target without maxModelLen: not asked
    assert first.length_buckets == {}  # one scrape: no window yet (unknown, not "short")
    assert second.length_buckets == {1000.0: 1.0, 10000.0: 1.0, 20000.0: 3.0, math.inf: 3.0}
    assert plain.length_buckets == {} and plain.signals == second.signals


async def test_a_configured_engine_is_asked_for_its_families_from_the_first_scrape() -> None:
    pods = [_with_unread_families(FakeVllm())]
    got, expected, _ = await _read_side_by_side(pods, ScrapeConfig(engine="vllm"))
    _same_readings(got, expected)
    assert pods[0].asked[0::2] == [VLLM_REQUEST_SAMPLES] * 4


async def test_reads_the_whole_page_of_a_pod_whose_filtered_answer_holds_no_family() -> None:
    pods = [FakeVllm(filtering="empty"), FakeVllm()]
    got, expected, source = await _read_side_by_side(pods, ScrapeConfig())
    _same_readings(got, expected)  # never missing: read whole in the same scrape
    # per tick, this source's requests then the other source's one: detection; one
    # filtered request answered empty and the whole page at once; then whole pages only
    names = VLLM_REQUEST_SAMPLES
    assert pods[0].asked == [(), (), names, (), (), (), (), (), ()]
    assert pods[1].asked[0::2] == [(), *[VLLM_REQUEST_SAMPLES] * 3]
    assert len(source.unfiltered_pods) == 1


async def test_a_server_that_ignores_the_filter_is_read_from_its_whole_page() -> None:
    pods = [_with_unread_families(FakeVllm(filtering="ignored"))]
    got, expected, source = await _read_side_by_side(pods, ScrapeConfig())
    _same_readings(got, expected)
    assert pods[0].asked[0::2] == [(), *[VLLM_REQUEST_SAMPLES] * 3]  # one request a scrape
    assert source.unfiltered_pods == set()


async def test_never_adds_a_query_with_filtering_off() -> None:
    pods = [FakeVllm()]
    got, expected, _ = await _read_side_by_side(pods, ScrapeConfig(filter_families=False))
    _same_readings(got, expected)
    assert pods[0].asked == [()] * 8


async def test_filters_through_prometheus_client_asgi_app_mounted_as_vllm_mounts_it() -> None:
    """The real server side: prometheus_client's ASGI app at ``/metrics`` of a FastAPI app
    under uvicorn (vLLM's `attach_router`), parsing the query itself."""
    pod = _with_unread_families(FakeVllm())
    seen: list[tuple[bytes, int]] = []  # (query string, body bytes) per request
    metrics_app = make_asgi_app(registry=pod.registry, disable_compression=True)

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        sent = [0]

        async def counting_send(message: Any) -> None:
            if message["type"] == "http.response.body":
                sent[0] += len(message.get("body", b""))
            await send(message)

        await metrics_app(scope, receive, counting_send)
        seen.append((scope["query_string"], sent[0]))

    app = FastAPI()
    route = Mount("/metrics", recording)
    route.path_regex = re.compile("^/metrics(?P<path>.*)$")  # as vLLM: no 307 redirect
    app.routes.append(route)
    server = await serve_http(app)
    url = f"{server.url}/metrics"
    source = PodScrapeSource(ScrapeConfig())
    whole = PodScrapeSource(ScrapeConfig(filter_families=False))
    try:
        for tick in range(3):
            pod.set(waiting=tick, running=5, kv=0.5)
            pod.serve(prompt_tokens=50 * tick, ttfts=[0.02, 0.2])
            got = await source.read("t", [PodEndpoint("p", url)], float(tick))
            expected = await whole.read("t", [PodEndpoint("p", url)], float(tick))
            assert got.pods_read == 1 and got.errors == () and got.signals == expected.signals
    finally:
        await source.close()
        await whole.close()
        await server.stop()
    queries = [q for q, _ in seen]
    assert queries[0::2] == [b"", ADAPTERS["vllm"].request_query, ADAPTERS["vllm"].request_query]
    filtered, full = seen[4][1], seen[5][1]
    assert 0 < filtered < full / 2


async def test_a_pod_with_an_implausible_queue_is_unread_with_its_reason(two_pods) -> None:  # type: ignore[no-untyped-def]
    pods, endpoints, source = two_pods
    pods[0].set(waiting=3, running=10, kv=0.2)
    pods[1].set(waiting=1e308, running=20, kv=0.6)
    reading = await source.read("ns/llama", endpoints, now=1.0)
    assert reading.pods_read == 1 and reading.rejected == {"implausible": 1}
    assert reading.signals["waiting"] == 3  # the implausible pod's queue is not summed
    assert any("pod-1" in e and "implausible" in e for e in reading.errors)
