"""Several emulated replicas in one process: ports, graceful drain, abort, speed, queue jump."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.clock import EmuClock
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
    body = {"prompt": "w " * 10, "max_tokens": 600}  # ~4 s of decoding: still running below
    in_flight = asyncio.create_task(http.post(rep.url + "/v1/completions", json=body))
    # Bounded by count, not by a wall-clock budget: a loaded machine only makes it slower.
    for _ in range(2000):
        if rep.engine.in_flight:
            break
        await asyncio.sleep(0.005)
    assert rep.engine.in_flight, "the first request never reached the engine"
    stopping = asyncio.create_task(fleet.stop_replica("a", drain=True))
    for _ in range(2000):
        if rep.draining:
            break
        await asyncio.sleep(0.005)
    async with http.get(rep.url + "/health") as resp:
        assert resp.status == 503  # draining: out of the Service
    async with http.post(rep.url + "/v1/completions", json=body) as resp:
        assert resp.status == 503
    resp = await in_flight
    out = await resp.json()
    assert resp.status == 200 and out["usage"]["completion_tokens"] == 600
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
    await fleet.stop_replica("a", drain=False)
    # Aborted, not finished: a finished request would be a 200 with 2000 tokens.
    try:
        resp = await in_flight
        assert resp.status == 503
        resp.release()
    except aiohttp.ClientError:
        pass  # connection closed under the request: also an abort to the client
    assert "a" not in fleet.replicas


async def test_emulated_latency_is_the_same_at_any_speed(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    # Emulated latencies do not depend on the speed factor (the wall-clock ratio is measured
    # in benchmarks/bench_emulator_speed.py, not asserted here).
    rep = await fleet.start_replica("a")
    body = {"prompt": "w " * 10, "max_tokens": 100}
    sums: list[float] = []
    for speed in (1.0, 10.0):
        fleet.set_speed(speed)
        async with http.post(rep.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200
        m = await scrape(http, rep.url)
        sums.append(
            value(m, "vllm:e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds_sum")
        )
    slow_e2e, fast_e2e = sums[0], sums[1] - sums[0]
    assert slow_e2e > 0 and fast_e2e == pytest.approx(slow_e2e, rel=0.35)


def test_speed_factor_maps_real_to_emulated_time() -> None:
    real = [100.0]
    clock = EmuClock(1.0, real=lambda: real[0])
    real[0] = 102.0
    assert clock.now() == 2.0
    clock.set_speed(10.0)  # re-anchors: emulated time never jumps
    assert clock.now() == 2.0
    real[0] = 103.0
    assert clock.now() == 12.0 and clock.real_at(22.0) == 104.0
    assert clock.emu_duration(0.5) == 5.0 and clock.real_duration(5.0) == 0.5


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
