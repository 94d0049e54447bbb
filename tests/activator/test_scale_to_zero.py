"""Scale to zero end to end over real sockets: the local Kubernetes API runs the
Deployment's pods as emulated vLLM replicas, the controller scales the target to zero
after its idle period, and a request that arrives while the last pod goes away is held
by the activator, not lost: its poke brings the target back and it is answered. The cold
start is recorded (``status.held``, a ``ScaledFromZero`` Event) and timed from the held
reports (`HeldCounts`, fake clock)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from autoscaler.app import Controller
from autoscaler.control.clock import FakeClock
from autoscaler.control.held import HeldCounts, HeldReport, poke_at_zero
from autoscaler.control.state import ControllerState, TargetStatus
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.emulator import EmulatorFleet
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.runtime import PodEndpoint
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL
from autoscaler.policy.schema import load_policy
from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object
from tests.activator.conftest import StartActivator
from tests.support.waiting import until
from tests.support.workloads import controller_settings, deployment

REF = TargetRef("llm", "llama")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class OnePortRuntime:
    """`PodRuntime`: each pod is an emulated vLLM replica on one fixed loopback port (the
    activator's fixed endpoint), Ready after its cold start; a deleted pod drains, and
    ``stopping`` is set while it goes away (the moment a new request races it)."""

    def __init__(self, fleet: EmulatorFleet, port: int) -> None:
        self.fleet, self.port = fleet, port
        self.started = 0
        self.stopping = asyncio.Event()
        self.stopped = asyncio.Event()

    async def start(self, pod: dict[str, Any]) -> PodEndpoint:
        rep = await self.fleet.start_replica(
            pod["metadata"]["name"], port=self.port, cold_start_s=0.3, model="llama"
        )
        await until(lambda: rep.ready, 10, "emulated cold start")
        self.started += 1
        return PodEndpoint("127.0.0.1", metrics_port=self.port)

    async def stop(self, pod: dict[str, Any]) -> None:
        self.stopping.set()
        await asyncio.sleep(0.05)  # the racing request is sent now, while the pod drains
        await self.fleet.stop_replica(pod["metadata"]["name"], drain=True, timeout_s=5)
        self.stopped.set()


@pytest.fixture
async def fleet() -> AsyncIterator[EmulatorFleet]:
    async with EmulatorFleet(speed=1.0) as f:
        yield f


async def test_scale_down_racing_a_new_request_holds_it_and_the_target_comes_back(
    fleet: EmulatorFleet, start_activator: StartActivator, http: aiohttp.ClientSession
) -> None:
    port = free_port()
    runtime = OnePortRuntime(fleet, port)
    async with LocalKubeAPI(controller=True, runtime=runtime) as kube:
        kube.create("deployments", deployment("llama", 1, "llm"), group="apps")
        policy = {
            "minReplicaCount": 1,
            "maxReplicaCount": 1,
            "pollingInterval": 0.2,
            "scaleToZero": {"enabled": True, "idlePeriodSeconds": 1, "holdCap": 7},
            "metrics": [{"signal": "waiting", "target": 4}],
        }
        spec = TargetSpec(
            ref=REF, policy=load_policy(policy), scale_target_ref=ScaleTargetRef(name="llama")
        )
        kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
        ctl = Controller(
            controller_settings(leader_election=False), api_client_for(kube.url), identity="c"
        )
        await ctl.start()
        try:
            assert ctl.http is not None
            act = await start_activator(
                {
                    "controller": {"url": ctl.http.url, "resendS": 0.2},
                    "targets": [
                        {"model": "llama", "namespace": "llm", "endpoints": [f"127.0.0.1:{port}"]}
                    ],
                }
            )
            gate = act.activator.gates["llm/llama"]  # type: ignore[union-attr]
            await until(lambda: gate.ready != (), 10, "the first pod Ready")
            # the LLMAutoscaler's holdCap reaches the activator in the answer to its report
            assert act.reporter is not None
            await until(lambda: gate.cap == 7, 5, "holdCap 7 from the controller (file: 1000)")

            def replicas() -> int:
                dep = kube.get("deployments", "llm", "llama", group="apps")
                assert dep is not None
                return int(dep["spec"]["replicas"])

            # idle past idlePeriodSeconds: scaled to zero; a request races the last pod
            await asyncio.wait_for(runtime.stopping.wait(), 15)
            assert replicas() == 0
            body = {"model": "llama", "prompt": "x", "max_tokens": 2}
            racing = asyncio.create_task(http.post(act.url + "/v1/completions", json=body))
            await asyncio.wait_for(runtime.stopped.wait(), 10)
            after = asyncio.create_task(http.post(act.url + "/v1/completions", json=body))
            for task in (racing, after):
                async with await asyncio.wait_for(task, 20) as r:
                    assert r.status == 200, await r.text()  # held, not lost
            assert replicas() == 1 and runtime.started == 2  # the target came back
            assert gate.stats.forwarded_after_hold >= 1
            assert (gate.stats.rejected_full, gate.stats.timed_out) == (0, 0)

            def event() -> dict[str, Any] | None:
                for e in kube.list_objects("events", "llm"):
                    if e.get("reason") == "ScaledFromZero":
                        return e
                return None

            await until(lambda: event() is not None, 10, "the ScaledFromZero Event")
            e = event()
            assert e is not None
            assert e["message"].startswith("scaled from zero for ")
            assert "held requests; first answered after " in e["message"]
            assert e["involvedObject"]["name"] == "llama"
        finally:
            await ctl.stop()


async def test_cold_start_is_timed_from_the_first_held_report_to_the_first_forward() -> None:
    clock = FakeClock()
    answered: list[tuple[TargetRef, int, float]] = []
    held = HeldCounts(
        clock,
        on_rise=lambda ref: True,  # the target was at zero
        on_answered=lambda ref, n, s: answered.append((ref, n, s)),
    )
    held.report("a", [HeldReport(REF, 1, 0, 0)], ttl_s=60)
    await clock.advance(3.0)
    held.report("b", [HeldReport(REF, 4, 0, 0)], ttl_s=60)  # a second activator holds 4
    held.report("a", [HeldReport(REF, 2, 0, 0)], ttl_s=60)
    assert answered == []
    await clock.advance(4.5)
    held.report("a", [HeldReport(REF, 1, 1, 1)], ttl_s=60)  # the first handed to a pod
    assert answered == [(REF, 6, 7.5)]  # peak 2 + 4 held, 7.5 s after the first held
    held.report("a", [HeldReport(REF, 0, 2, 2)], ttl_s=60)
    assert len(answered) == 1  # one Event per cold start


async def test_cold_start_whose_requests_all_left_closes_without_an_event() -> None:
    clock = FakeClock()
    answered: list[object] = []
    held = HeldCounts(clock, on_rise=lambda ref: True, on_answered=lambda *a: answered.append(a))
    held.report("a", [HeldReport(REF, 2, 0, 5)], ttl_s=60)
    held.report("a", [], ttl_s=60)  # clients gone (or 503 after the hold timeout)
    held.report("a", [HeldReport(REF, 0, 1, 0)], ttl_s=60)
    assert answered == []
    # a target that was not at zero (on_rise false) opens no cold start
    warm = HeldCounts(clock, on_rise=lambda ref: False, on_answered=lambda *a: answered.append(a))
    warm.report("a", [HeldReport(REF, 1, 0, 0)], ttl_s=60)
    warm.report("a", [HeldReport(REF, 0, 1, 1)], ttl_s=60)
    assert answered == []


def test_a_request_racing_a_written_but_unpublished_scale_down_still_pokes() -> None:
    state = ControllerState()
    st = TargetStatus(spec=TargetSpec(ref=REF, policy=load_policy({"minReplicaCount": 0})))
    st.last_decision = Decision(0.0, 1, 1, Reason.STEADY, "hold at 1", False)
    state.targets[REF] = st
    poked: list[TargetRef] = []
    on_rise = poke_at_zero(state, poked.append)
    assert on_rise(REF) is False and poked == []  # running: its next tick sees the count
    st.applied_replicas = 0  # the loop wrote 0; its decision is not published yet
    assert on_rise(REF) is True and poked == [REF]


async def test_a_scale_from_zero_decided_after_the_rise_is_timed_from_the_rise() -> None:
    clock = FakeClock()
    answered: list[tuple[TargetRef, int, float]] = []
    held = HeldCounts(clock, on_rise=lambda ref: False, on_answered=lambda *a: answered.append(a))
    held.report("a", [HeldReport(REF, 2, 0, 0)], ttl_s=60)  # rise: not known at zero yet
    await clock.advance(0.5)
    held.scaled_from_zero(REF)  # the loop's activation 0 -> N for the held requests
    await clock.advance(2.0)
    held.report("a", [HeldReport(REF, 1, 1, 1)], ttl_s=60)
    assert answered == [(REF, 2, 2.5)]
