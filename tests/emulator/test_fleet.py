"""Several emulated replicas in one process: ports, graceful drain, abort, speed, queue jump."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from autoscaler.emulator import EmulatorFleet
from autoscaler.errors import ConfigError
from tests.emulator.test_server import scrape, value


async def test_replicas_listen_on_distinct_loopback_ports(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    a = await fleet.start_replica("a")
    b = await fleet.start_replica("b")
    assert a.port != b.port and a.url.startswith("http://127.0.0.1:")
    for rep in (a, b):
        async with http.get(rep.url + "/health") as resp:
            assert resp.status == 200
    assert sorted(fleet.ready_urls()) == sorted([a.url, b.url])
    with pytest.raises(ConfigError, match="already running"):
        await fleet.start_replica("a")


async def test_graceful_stop_finishes_in_flight_and_refuses_new(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    body = {"prompt": "w " * 10, "max_tokens": 60}  # ~0.4 s of decoding
    in_flight = asyncio.create_task(http.post(rep.url + "/v1/completions", json=body))
    for _ in range(200):
        if rep.engine.in_flight:
            break
        await asyncio.sleep(0.005)
    stopping = asyncio.create_task(fleet.stop_replica("a", drain=True))
    await asyncio.sleep(0.02)
    async with http.get(rep.url + "/health") as resp:
        assert resp.status == 503  # draining: out of the Service
    async with http.post(rep.url + "/v1/completions", json=body) as resp:
        assert resp.status == 503
    resp = await in_flight
    out = await resp.json()
    assert resp.status == 200 and out["usage"]["completion_tokens"] == 60
    await stopping
    assert "a" not in fleet.replicas
    with pytest.raises(aiohttp.ClientConnectionError):
        async with http.get(rep.url + "/health"):
            pass


async def test_stop_without_drain_aborts_in_flight_requests(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    body = {"prompt": "w " * 10, "max_tokens": 2000}
    in_flight = asyncio.create_task(http.post(rep.url + "/v1/completions", json=body))
    for _ in range(200):
        if rep.engine.in_flight:
            break
        await asyncio.sleep(0.005)
    t0 = time.monotonic()
    await fleet.stop_replica("a", drain=False)
    assert time.monotonic() - t0 < 3  # did not wait for 2000 tokens
    try:
        resp = await in_flight
        assert resp.status == 503
        resp.release()
    except aiohttp.ClientError:
        pass  # connection closed under the request: also an abort to the client


async def test_speed_factor_scales_emulated_time(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    body = {"prompt": "w " * 10, "max_tokens": 100}

    async def timed() -> float:
        t0 = time.monotonic()
        async with http.post(rep.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
        return time.monotonic() - t0

    slow = await timed()
    fleet.set_speed(10.0)
    fast = await timed()
    assert fast < slow / 3
    m = await scrape(http, rep.url)
    # Emulated latencies are the same whatever the speed: both land in the same buckets.
    e2e_sum = value(m, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_sum")
    assert e2e_sum == pytest.approx(2 * slow, rel=0.35)


async def test_queue_jump_shows_in_metrics_at_once(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    before = time.monotonic()
    jump = fleet.jump_queue("a", requests=300, prompt_tokens=1000, output_tokens=20)
    assert before <= jump.t_monotonic <= time.monotonic()
    assert jump.waiting_after == 300
    m = await scrape(http, rep.url)
    assert value(m, "vllm:num_requests_waiting") + value(m, "vllm:num_requests_running") == 300
    # The 8192-token budget admits 8 prompts a step: most of the jump is queued at once.
    assert value(m, "vllm:num_requests_waiting") > 256
    fleet.set_speed(50.0)
    await asyncio.wait_for(rep.engine.wait_idle(), 10)
    m = await scrape(http, rep.url)
    total = sum(
        s.value for s in m["vllm:request_success"] if s.name == "vllm:request_success_total"
    )
    assert total == 300
