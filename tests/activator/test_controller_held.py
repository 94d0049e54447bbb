"""Activators -> controller: held counts pushed over HTTP, summed per target, a held
request at zero poking the loop (a decision within the tick it would otherwise wait for),
and KEDA's StreamIsActive flipping on the first held request. Real sockets: the local
Kubernetes API, the controller's REST and gRPC servers and the activators."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import grpc
import pytest

from autoscaler.app import Controller
from autoscaler.control.clock import FakeClock
from autoscaler.control.held import HeldCounts, HeldReport
from autoscaler.domain import Reason, TargetRef
from autoscaler.keda.gen import externalscaler_pb2 as pb
from autoscaler.keda.gen import externalscaler_pb2_grpc as pb_grpc
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL
from autoscaler.policy.schema import load_policy
from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object
from tests.activator.conftest import StartActivator, drop
from tests.support.waiting import until
from tests.support.workloads import controller_settings, deployment

REF = TargetRef("llm", "llama")
# Polled every 10 minutes: a decision within seconds can only come from the poke.
POLICY = {
    "minReplicaCount": 0,
    "maxReplicaCount": 8,
    "pollingInterval": 600,
    "cooldownPeriod": 600,
    "metrics": [{"signal": "waiting", "target": 2}],
}


def add_target_at_zero(kube: LocalKubeAPI, mode: str = "direct") -> None:
    kube.create("deployments", deployment("llama", 0, "llm"), group="apps")
    spec = TargetSpec(
        ref=REF,
        policy=load_policy(POLICY),
        scale_target_ref=ScaleTargetRef(name="llama"),
        mode=mode,  # type: ignore[arg-type]
    )
    kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)


@pytest.fixture
async def kube() -> AsyncIterator[LocalKubeAPI]:
    async with LocalKubeAPI() as k:
        yield k


async def start_controller(kube: LocalKubeAPI, **kw: Any) -> Controller:
    ctl = Controller(controller_settings(leader_election=False, **kw), kube_api(kube), identity="c")
    await ctl.start()

    def decided() -> bool:
        st = ctl.state.status(REF)
        return st is not None and st.last_decision is not None

    await until(decided, 10, "first tick")
    return ctl


def kube_api(kube: LocalKubeAPI) -> Any:
    return api_client_for(kube.url)


def activator_config(ctl: Controller, port: int = 9) -> dict[str, Any]:
    assert ctl.http is not None
    return {
        "controller": {"url": ctl.http.url, "resendS": 0.2},
        "targets": [{"model": "llama", "namespace": "llm", "autoscaler": "llama",
                     "endpoints": [f"127.0.0.1:{port}"]}],
    }  # fmt: skip


def replicas(kube: LocalKubeAPI) -> int:
    dep = kube.get("deployments", "llm", "llama", group="apps")
    assert dep is not None
    return int(dep["spec"]["replicas"])


async def hold(http: aiohttp.ClientSession, url: str, n: int) -> list[asyncio.Task[Any]]:
    body = {"model": "llama", "prompt": "x"}
    return [asyncio.create_task(http.post(url + "/v1/completions", json=body)) for _ in range(n)]


async def test_first_held_request_pokes_the_loop_and_scales_from_zero_held_count_as_waiting(
    kube: LocalKubeAPI, start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    add_target_at_zero(kube)
    ctl = await start_controller(kube)
    try:
        st = ctl.state.status(REF)
        assert st is not None and st.last_decision is not None
        assert st.last_decision.desired_replicas == 0
        before = len(st.history)
        act = await start_activator(activator_config(ctl))
        tasks = await hold(http, act.url, 3)
        await until(lambda: replicas(kube) >= 1, 10, "scaled from zero by the poke")
        # the scale patch lands before the decision is published: wait for both
        await until(lambda: len(st.history) > before, 10, "the poked decision published")
        decision = st.last_decision
        assert decision is not None
        assert len(st.history) > before  # decided outside the 600 s polling interval
        assert decision.desired_replicas >= 1 and decision.reason == Reason.ACTIVATE
        assert "waiting=" in decision.message  # the held count is the waiting signal
        waiting = next(m for m in decision.metrics if m.signal == "waiting")
        assert waiting.value is not None and 1 <= waiting.value <= 3
        await drop(tasks)
    finally:
        await ctl.stop()


async def test_two_activators_are_summed_and_a_leaving_one_is_dropped(
    kube: LocalKubeAPI, start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    add_target_at_zero(kube, mode="advisory")  # decide only: the count stays observable
    ctl = await start_controller(kube)
    try:
        assert ctl.held is not None
        a = await start_activator(activator_config(ctl), identity="act-a")
        b = await start_activator(activator_config(ctl), identity="act-b")
        tasks = await hold(http, a.url, 2) + await hold(http, b.url, 3)
        await until(lambda: ctl.held.totals(REF) == (5, 0), 10, "2 + 3 held summed")  # type: ignore[union-attr]
        snapshot = ctl.held.snapshot()
        assert snapshot["act-a"]["targets"]["llm/llama"]["held"] == 2  # type: ignore[index]
        await b.stop()  # its held requests get a 503 and it says it is leaving
        await until(lambda: ctl.held.totals(REF) == (2, 0), 10, "only act-a left")  # type: ignore[union-attr]
        await drop(tasks)
    finally:
        await ctl.stop()


async def test_keda_stream_is_active_flips_on_the_first_held_request(
    kube: LocalKubeAPI, start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    add_target_at_zero(kube, mode="keda")
    ctl = await start_controller(kube, mode="keda")
    try:
        assert ctl.grpc is not None
        async with grpc.aio.insecure_channel(ctl.grpc.target) as channel:
            stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            ref = pb.ScaledObjectRef(name="llama", namespace="llm")
            stream = stub.StreamIsActive(ref)
            first = await asyncio.wait_for(stream.read(), 5)
            assert first.result is False  # idle at zero
            act = await start_activator(activator_config(ctl))
            tasks = await hold(http, act.url, 1)
            pushed = await asyncio.wait_for(stream.read(), 5)
            assert pushed.result is True
            assert (await stub.IsActive(ref)).result is True
            assert replicas(kube) == 0  # keda mode: KEDA activates, the controller never writes
            stream.cancel()
            await drop(tasks)
    finally:
        await ctl.stop()


async def test_held_counts_sum_reporters_and_expire_a_silent_one() -> None:
    clock = FakeClock()
    risen: list[TargetRef] = []
    held = HeldCounts(clock, on_rise=risen.append)
    assert held.report("a", [HeldReport(REF, 2, 1)], ttl_s=5) == [REF]
    assert held.report("b", [HeldReport(REF, 3, 0)], ttl_s=60) == []  # already > 0
    assert held.totals(REF) == (5, 1) and risen == [REF]
    await clock.advance(10)  # "a" stopped reporting: past its TTL
    assert held.totals(REF) == (3, 0)
    held.report("b", [], ttl_s=60)
    assert held.totals(REF) == (0, 0)
    held.report("b", [HeldReport(REF, 1, 0)], ttl_s=60)
    assert risen == [REF, REF]  # left zero again: another poke


async def test_the_poked_scale_up_from_zero_is_sized_for_the_held_queue(
    kube: LocalKubeAPI,
) -> None:
    add_target_at_zero(kube)
    ctl = await start_controller(kube)
    try:
        assert ctl.held is not None
        ctl.held.report("act-a", [HeldReport(REF, 6, 0)], ttl_s=60)  # 6 held, waiting target 2
        await until(lambda: replicas(kube) == 3, 10, "0 -> ceil(6 / 2) from the poke")
        st = ctl.state.status(REF)
        assert st is not None

        def activations() -> list[Any]:
            return [d for d in list(st.history) if d.reason == Reason.ACTIVATE]

        await until(lambda: bool(activations()), 5, "the activation published")
        (activation,) = activations()
        assert activation.desired_replicas == 3
        assert "scaled from zero for 6 held requests" in activation.message
    finally:
        await ctl.stop()
