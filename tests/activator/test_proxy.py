"""The activator over real sockets: routing, holding, streaming pass-through, refusals."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.server import EmulatedReplica
from tests.activator.conftest import StartActivator, drop
from tests.support.waiting import until

MODEL = "tiny-model"
COLD_S = 100.0  # emulated seconds: 100 s real at speed 1, 0.1 s at speed 1000


async def turn_ready(fleet: EmulatorFleet, pod: EmulatedReplica) -> None:
    """The emulated cold start elapses (speed 1000 until /health is 200)."""
    fleet.set_speed(1000.0)
    await until(lambda: pod.ready, 5, "pod ready")
    fleet.set_speed(1.0)


def one_target(endpoints: list[str], **target: Any) -> dict[str, Any]:
    return {
        "defaults": target.pop("defaults", {}),
        "targets": [{"model": MODEL, "namespace": "ml", "autoscaler": "tiny",
                     "endpoints": endpoints, **target}],
    }  # fmt: skip


async def test_unknown_model_is_404_listing_the_served_models_and_v1_models_lists_them(
    start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    cfg = {"targets": [{"model": "a", "endpoints": ["127.0.0.1:9"]},
                       {"model": "b", "endpoints": ["127.0.0.1:9"]}]}  # fmt: skip
    act = await start_activator(cfg)
    async with http.post(act.url + "/v1/completions", json={"model": "zz", "prompt": "x"}) as r:
        body = await r.json()
    assert r.status == 404
    assert body["models"] == ["a", "b"] and "'zz' is not served" in body["error"]["message"]
    async with http.get(act.url + "/v1/models") as r:
        ids = [m["id"] for m in (await r.json())["data"]]
    assert ids == ["a", "b"]
    async with http.post(act.url + "/v1/completions", json={"prompt": "x"}) as r:
        assert r.status == 400 and "field 'model'" in (await r.json())["error"]["message"]


async def test_request_is_routed_by_model_host_and_path_prefix(
    start_activator: StartActivator, fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    a = await fleet.start_replica("a", model="model-a")
    b = await fleet.start_replica("b", model="model-b")
    cfg = {"targets": [
        {"model": "model-a", "endpoints": [f"127.0.0.1:{a.port}"], "hosts": ["a.example"]},
        {"model": "model-b", "endpoints": [f"127.0.0.1:{b.port}"], "pathPrefix": "/b"},
    ]}  # fmt: skip
    act = await start_activator(cfg)
    await until(lambda: all(g.ready for g in act.activator.gates.values()), 5, "probes")  # type: ignore[union-attr]
    body = {"model": "model-b", "prompt": "hello", "max_tokens": 2}
    async with http.post(act.url + "/v1/completions", json=body) as r:
        assert r.status == 200 and (await r.json())["model"] == "model-b"
    # By Host or path prefix the body needs no model (the prefix is stripped).
    no_model = {"prompt": "x", "max_tokens": 1}
    async with http.post(
        act.url + "/v1/completions", json=no_model, headers={"Host": "a.example"}
    ) as r:
        assert r.status == 200 and (await r.json())["model"] == "model-a"
    async with http.post(act.url + "/b/v1/completions", json={"prompt": "x", "max_tokens": 1}) as r:
        assert r.status == 200 and (await r.json())["model"] == "model-b"


async def test_held_requests_are_answered_in_arrival_order_once_the_pod_turns_ready(
    start_activator: StartActivator, fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    pod = await fleet.start_replica("p", cold_start_s=COLD_S, model=MODEL)
    act = await start_activator(one_target([f"127.0.0.1:{pod.port}"], maxConcurrencyPerReplica=1))
    gate = act.activator.gates["ml/tiny"]  # type: ignore[union-attr]
    finished: list[int] = []

    async def send(i: int) -> int:
        body = {"model": MODEL, "prompt": f"request {i}", "max_tokens": 2}
        async with http.post(act.url + "/v1/completions", json=body) as r:
            await r.read()
            finished.append(i)
            return r.status

    tasks = []
    for i in range(5):  # one at a time, so the arrival order is known
        tasks.append(asyncio.create_task(send(i)))
        await until(lambda n=i + 1: gate.held == n, 5, f"{i + 1} held")  # type: ignore[misc]
    assert finished == [] and gate.ready == ()
    await turn_ready(fleet, pod)
    statuses = await asyncio.gather(*tasks)
    assert statuses == [200] * 5
    assert finished == [0, 1, 2, 3, 4]  # one slot per replica: forwarded in arrival order
    assert gate.stats.forwarded_after_hold == 5 and gate.held == 0


async def test_streaming_passes_through_token_by_token(
    start_activator: StartActivator, fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    pod = await fleet.start_replica("p", model=MODEL)
    act = await start_activator(one_target([f"127.0.0.1:{pod.port}"]))
    gate = act.activator.gates["ml/tiny"]  # type: ignore[union-attr]
    await until(lambda: bool(gate.ready), 5, "probe")
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 12, "stream": True}
    tokens_when_first_seen = None
    events: list[str] = []
    async with http.post(act.url + "/v1/completions", json=body) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        async for line in r.content:
            text = line.decode().strip()
            if not text.startswith("data:"):
                continue
            events.append(text)
            if tokens_when_first_seen is None:
                # the first token is here while the pod is still generating the rest
                tokens_when_first_seen = gate.in_flight
    assert events[-1] == "data: [DONE]"
    assert len(events) >= 12
    assert tokens_when_first_seen == 1


async def test_held_streaming_client_gets_heartbeats_then_the_tokens(
    start_activator: StartActivator, fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    pod = await fleet.start_replica("p", cold_start_s=COLD_S, model=MODEL)
    act = await start_activator(
        one_target([f"127.0.0.1:{pod.port}"], defaults={"heartbeatS": 0.02})
    )
    body = {"model": MODEL, "prompt": "hi", "max_tokens": 3, "stream": True}
    lines: list[str] = []
    async with http.post(act.url + "/v1/completions", json=body) as r:
        assert r.status == 200
        async for line in r.content:
            text = line.decode().strip()
            if text:
                lines.append(text)
            if lines.count(": held") == 3 and not pod.ready:
                await turn_ready(fleet, pod)
    held = [x for x in lines if x == ": held"]
    data = [x for x in lines if x.startswith("data:")]
    assert len(held) >= 3 and lines.index(data[0]) > lines.index(held[-1])
    assert data[-1] == "data: [DONE]" and len(data) >= 4


async def test_client_that_disconnects_while_held_frees_its_slot(
    start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    act = await start_activator(one_target(["127.0.0.1:9"], holdCap=1))
    gate = act.activator.gates["ml/tiny"]  # type: ignore[union-attr]
    for stream in (False, True):
        body = {"model": MODEL, "prompt": "x", "stream": stream}
        task = asyncio.create_task(http.post(act.url + "/v1/completions", json=body))
        await until(lambda: gate.held == 1, 5, "held")
        task.cancel()  # the client goes away
        await until(lambda: gate.held == 0, 5, "slot freed")
        assert gate.stats.abandoned == 1 + int(stream)


async def test_past_the_cap_429_with_retry_after(
    start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    act = await start_activator(one_target(["127.0.0.1:9"], holdCap=2))
    gate = act.activator.gates["ml/tiny"]  # type: ignore[union-attr]
    body = {"model": MODEL, "prompt": "x"}
    held = [
        asyncio.create_task(http.post(act.url + "/v1/completions", json=body)) for _ in range(2)
    ]
    await until(lambda: gate.held == 2, 5, "two held")
    async with http.post(act.url + "/v1/completions", json=body) as r:
        out = await r.json()
    assert r.status == 429 and r.headers["Retry-After"] == "5"
    assert "cap 2" in out["error"]["message"] and "ml/tiny" in out["error"]["message"]
    await drop(held)


async def test_past_the_hold_timeout_503_naming_the_target_and_the_wait(
    start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    act = await start_activator(one_target(["127.0.0.1:9"], holdTimeoutS=0.1))
    async with http.post(act.url + "/v1/completions", json={"model": MODEL, "prompt": "x"}) as r:
        out = await r.json()
    assert r.status == 503 and "Retry-After" in r.headers
    msg = out["error"]["message"]
    assert "ml/tiny" in msg and "s waited" in msg and "timeout 0.1 s" in msg


async def test_shutdown_answers_held_requests_at_once_with_a_retryable_503(
    start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    act = await start_activator(one_target(["127.0.0.1:9"]))
    gate = act.activator.gates["ml/tiny"]  # type: ignore[union-attr]
    task = asyncio.create_task(
        http.post(act.url + "/v1/completions", json={"model": MODEL, "prompt": "x"})
    )
    await until(lambda: gate.held == 1, 5, "held")
    stopping = asyncio.create_task(act.stop())
    r = await asyncio.wait_for(task, 5)
    out = await r.json()
    await stopping
    assert r.status == 503 and r.headers["Retry-After"] == "5"
    assert "restarting" in out["error"]["message"]


async def test_an_endpoint_that_refuses_is_skipped_and_the_request_held_not_502(
    start_activator: StartActivator, fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    pod = await fleet.start_replica("p", model=MODEL)
    act = await start_activator(one_target([f"127.0.0.1:{pod.port}"]))
    a = act.activator
    assert a is not None
    await until(lambda: bool(a.gates["ml/tiny"].ready), 5, "first probe")
    a.set_ready("ml/tiny", ["127.0.0.1:9"])  # "Ready" but nothing listens (a pod going away)
    act.sources[0].targets = {}  # stop probing: the test drives readiness now
    task = asyncio.create_task(
        http.post(
            act.url + "/v1/completions", json={"model": MODEL, "prompt": "x", "max_tokens": 1}
        )
    )
    await until(lambda: a.gates["ml/tiny"].held == 1, 5, "held again after the refusal")
    a.set_ready("ml/tiny", [f"127.0.0.1:{pod.port}"])
    r = await asyncio.wait_for(task, 5)
    assert r.status == 200 and json.loads(await r.read())["model"] == MODEL
