"""vLLM's sleep-mode dev endpoints on the emulated replica, over real sockets."""

from __future__ import annotations

import asyncio

import aiohttp

from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig
from tests.emulator.test_server import read_sse, scrape, value

SLEEPY = ReplicaConfig(sleep_mode=True, wake_s=2.0)


async def is_sleeping(http: aiohttp.ClientSession, rep: EmulatedReplica) -> bool:
    async with http.get(rep.url + "/is_sleeping") as resp:
        assert resp.status == 200
        body = await resp.json()
    assert set(body) == {"is_sleeping"}
    return bool(body["is_sleeping"])


async def test_without_sleep_mode_the_dev_endpoints_do_not_exist(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    async with http.post(rep.url + "/sleep?level=1") as resp:
        assert resp.status == 404
    async with http.get(rep.url + "/is_sleeping") as resp:
        assert resp.status == 404


async def test_asleep_holds_completions_shows_no_load_and_wakes_in_wake_s(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    fleet.set_speed(20.0)  # wake_s 2 emulated s = 0.1 s real
    rep = await fleet.start_replica("a", config=SLEEPY)
    assert not await is_sleeping(http, rep)
    async with http.post(rep.url + "/sleep?level=1") as resp:
        assert resp.status == 200
        assert await resp.read() == b""
    assert await is_sleeping(http, rep)
    async with http.get(rep.url + "/health") as resp:
        assert resp.status == 200  # vLLM's health check: the process is alive

    body = {"prompt": "hello " * 20, "max_tokens": 4}
    held = asyncio.create_task(http.post(rep.url + "/v1/completions", json=body))
    for _ in range(500):  # counted yields until the server has the request
        if rep._handlers:
            break
        await asyncio.sleep(0.01)
    assert rep._handlers == 1 and not held.done()
    assert rep.engine.in_flight == 0  # accepted, not scheduled
    page = await scrape(http, rep.url)
    assert value(page, "vllm:num_requests_running") == 0
    assert value(page, "vllm:num_requests_waiting") == 0
    assert value(page, "vllm:kv_cache_usage_perc") == 0

    t0 = fleet.clock.now()
    async with http.post(rep.url + "/wake_up") as resp:
        assert resp.status == 200
    assert fleet.clock.now() - t0 >= 2.0  # emulated seconds: independent of CPU load
    assert not await is_sleeping(http, rep)
    resp = await held
    assert resp.status == 200
    out = await resp.json()
    assert out["usage"]["completion_tokens"] == 4
    resp.release()


async def test_sleep_aborts_requests_in_flight_by_default(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    fleet.set_speed(0.5)  # slow steps: the stream is still running when sleep arrives
    rep = await fleet.start_replica("a", config=SLEEPY)
    body = {"prompt": "x " * 10, "max_tokens": 5000, "stream": True}
    async with http.post(rep.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        await resp.content.readline()  # the first token is out
        async with http.post(rep.url + "/sleep") as s:
            assert s.status == 200
        events, done = await read_sse(resp)
    assert any("error" in e for e in events)
    assert done
    assert rep.engine.in_flight == 0
    assert await is_sleeping(http, rep)


async def test_sleep_mode_wait_lets_requests_in_flight_finish(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    fleet.set_speed(20.0)
    rep = await fleet.start_replica("a", config=SLEEPY)
    body = {"prompt": "x " * 10, "max_tokens": 200}
    running = asyncio.create_task(http.post(rep.url + "/v1/completions", json=body))
    for _ in range(500):  # counted yields until the request is in the engine
        if rep.engine.in_flight:
            break
        await asyncio.sleep(0.005)
    assert rep.engine.in_flight == 1
    async with http.post(rep.url + "/sleep?level=1&mode=wait") as s:
        assert s.status == 200
    resp = await running
    assert resp.status == 200
    assert (await resp.json())["usage"]["completion_tokens"] == 200
    resp.release()
    assert await is_sleeping(http, rep)


async def test_partial_wake_keeps_sleeping_until_both_tags_are_back(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    fleet.set_speed(50.0)
    rep = await fleet.start_replica("a", config=SLEEPY)
    async with http.post(rep.url + "/sleep?level=1") as s:
        assert s.status == 200
    async with http.post(rep.url + "/wake_up?tags=weights") as w:
        assert w.status == 200
    assert await is_sleeping(http, rep)
    async with http.post(rep.url + "/wake_up?tags=kv_cache") as w:
        assert w.status == 200
    assert not await is_sleeping(http, rep)
    assert (rep.sleep.sleeps, rep.sleep.wakes) == (1, 1)


async def test_bad_sleep_arguments_get_400_naming_the_field(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a", config=SLEEPY)
    for path, field in (
        ("/sleep?level=2", "level"),
        ("/sleep?mode=keep", "mode"),
        ("/wake_up?tags=gpu", "tags"),
    ):
        async with http.post(rep.url + path) as resp:
            assert resp.status == 400
            assert (await resp.json())["message"].startswith(field + ":")
    assert not await is_sleeping(http, rep)
