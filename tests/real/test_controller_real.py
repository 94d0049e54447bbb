"""The controller as its ServiceAccount, under the shipped RBAC, against the real control
plane: it scales a Deployment whose pods come from the real ReplicaSet controller (served
by the fake kubelet as emulated vLLM), writes status and Events that ``kubectl describe``
finds (by uid), reports an invalid object, and survives an API-server restart."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient
from structlog.testing import capture_logs

from autoscaler.app import Controller
from autoscaler.domain import TargetRef
from autoscaler.kube.sharding import ShardConfig, ShardManager
from autoscaler.settings import GrpcSettings, HttpSettings, Settings
from tests.real.conftest import CONTROLLER_NS, vllm_deployment
from tests.real.controlplane import ControlPlane
from tests.real.kubectl import Kube
from tests.real.test_crd_real import llmas
from tests.support.fake_kubelet import FakeKubelet
from tests.support.waiting import until

LOAD_REQUESTS = 600  # waiting requests injected into the first pod (256 run, the rest wait)


def settings(**kw: Any) -> Settings:
    return Settings(
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=0.5,
        lease_duration_s=3.0,
        lease_namespace=CONTROLLER_NS,
        **kw,
    )


@pytest.fixture
async def controller(controller_api: ApiClient) -> AsyncIterator[Controller]:
    ctl = Controller(settings(), controller_api, identity="ctrl-a")
    await ctl.start()
    try:
        yield ctl
    finally:
        await ctl.stop()


class Snapshot:
    """The last values read from the API server, for `until` predicates."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] = {}


async def _poll(
    kube: Kube, obj: dict[str, Any], pred: Any, deadline_s: float, what: str
) -> dict[str, Any]:
    snap = Snapshot()

    async def read() -> bool:
        snap.obj = await kube.read(obj)
        return bool(pred(snap.obj))

    end = time.monotonic() + deadline_s
    while not await read():
        if time.monotonic() > end:
            raise AssertionError(
                f"timed out after {deadline_s}s waiting for {what}: {snap.obj.get('status')}"
            )
        await asyncio.sleep(0.2)
    return snap.obj


async def _events(kube: Kube, namespace: str, uid: str, at_least: int) -> dict[str, Any]:
    """Events found as ``kubectl describe`` finds them: field selector on the uid."""
    path = f"/api/v1/namespaces/{namespace}/events"
    end = time.monotonic() + 10
    while True:
        events = await kube.get(path, fieldSelector=f"involvedObject.uid={uid}")
        if len(events["items"]) >= at_least or time.monotonic() > end:
            return events
        await asyncio.sleep(0.2)


def _cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == type_:
            return dict(c)
    return {}


async def _one_pod_under_load(
    kube: Kube, namespace: str, kubelet: FakeKubelet, ctl: Controller
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Deployment llama (1 replica, its pod Ready) with an LLMAutoscaler (max 3), ``ctl``
    the leader, then LOAD_REQUESTS queued in the pod: (deployment, target)."""
    dep = vllm_deployment("llama", namespace, replicas=1)
    await kube.apply(dep)
    await until(lambda: len(kubelet.ready_pods()) == 1, 30, "the first pod")
    target = llmas("llama", namespace, maxReplicaCount=3)
    await kube.create(target)
    await until(lambda: ctl.state.is_leader, 15, "leadership in llm-autoscaler")
    (pod,) = kubelet.replicas.values()
    pod.engine.inject(LOAD_REQUESTS, 512, 4096)
    return dep, target


async def test_scales_a_real_deployment_up_as_its_service_account_and_describe_finds_the_event(
    kube: Kube, namespace: str, kubelet: FakeKubelet, controller: Controller
) -> None:
    dep, target = await _one_pod_under_load(kube, namespace, kubelet, controller)
    scaled = await _poll(kube, dep, lambda d: d["spec"]["replicas"] == 3, 30, "scale to 3")
    await until(lambda: len(kubelet.ready_pods()) == 3, 30, "three pods from the ReplicaSet")
    events = await _events(kube, namespace, scaled["metadata"]["uid"], 1)
    assert any(e["reason"] == "ScaledUp" and "1 -> 3" in e["message"] for e in events["items"])
    status = await _poll(
        kube, target, lambda o: _cond(o, "Ready").get("status") == "True", 15, "Ready=True"
    )
    assert _cond(status, "Active")["status"] == "True"
    assert status["status"]["observedGeneration"] == status["metadata"]["generation"]


async def test_invalid_object_gets_ready_false_and_a_warning_event(
    kube: Kube, namespace: str, controller: Controller
) -> None:
    # Repeated metric: valid for the CRD's schema and CEL, refused by the controller.
    bad = llmas("dup", namespace)
    bad["spec"]["metrics"] = [
        {"signal": "waiting", "target": 4},
        {"signal": "waiting", "target": 8},
    ]
    created = await kube.create(bad)
    await until(lambda: controller.state.is_leader, 15, "leadership")
    status = await _poll(
        kube, bad, lambda o: _cond(o, "Ready").get("status") == "False", 15, "Ready=False"
    )
    ready = _cond(status, "Ready")
    assert ready["reason"] == "InvalidSpec"
    assert "metrics[1]: signal 'waiting' with type AverageValue repeated" in ready["message"]
    uid = created["metadata"]["uid"]
    events = await _events(kube, namespace, uid, 1)
    (event,) = events["items"]
    assert (event["type"], event["reason"]) == ("Warning", "InvalidSpec")
    assert "repeated" in event["message"]


async def test_lease_refused_outside_its_namespace_names_the_namespace(
    controller_api: ApiClient,
) -> None:
    timings = {"lease_duration_s": 3, "renew_deadline_s": 2, "retry_period_s": 1}
    refused = ShardManager(
        controller_api, ShardConfig(namespace="default", leader_lease="ws", **timings), "ws"
    )
    with capture_logs() as logs:
        assert await refused._take("ws", "shard", None, 0.0) is False
    (entry,) = [e for e in logs if e["event"].startswith("lease ")]
    assert entry["status"] == 403 and entry["namespace"] == "default"
    assert "--lease-namespace" in entry["hint"]
    ok = ShardManager(
        controller_api, ShardConfig(namespace=CONTROLLER_NS, leader_lease="ws", **timings), "ws"
    )
    assert await ok._take("ws", "shard", None, 0.0) is True
    await ok.release_all()


async def test_controller_recovers_after_an_api_server_restart(
    kube: Kube,
    namespace: str,
    kubelet: FakeKubelet,
    controller: Controller,
    control_plane: ControlPlane,
) -> None:
    dep = vllm_deployment("llama", namespace, replicas=1)
    await kube.apply(dep)
    await kube.create(llmas("llama", namespace, maxReplicaCount=2))
    await until(lambda: len(kubelet.ready_pods()) == 1, 30, "the first pod")
    await until(lambda: controller.state.is_leader, 15, "leadership")
    # In a thread: the controller keeps running and sees the server gone, then back.
    await asyncio.to_thread(control_plane.restart_apiserver)
    (pod,) = kubelet.replicas.values()
    pod.engine.inject(LOAD_REQUESTS, 512, 4096)
    await _poll(kube, dep, lambda d: d["spec"]["replicas"] == 2, 45, "scale after restart")


async def test_failover_mid_window_does_not_scale_down_inside_the_stabilization_window(
    kube: Kube, namespace: str, kubelet: FakeKubelet, controller_api: ApiClient
) -> None:
    """A new leader starts with no history; the HPA initial recommendation (the current
    count) keeps it from scaling down what the old leader scaled up moments ago."""
    dep = vllm_deployment("llama", namespace, replicas=1)
    await kube.apply(dep)
    await until(lambda: len(kubelet.ready_pods()) == 1, 30, "the first pod")
    down = {"scaleDown": {"stabilizationWindowSeconds": 300}}
    await kube.create(llmas("llama", namespace, maxReplicaCount=3, behavior=down))
    a = Controller(settings(), controller_api, identity="ctrl-a")
    await a.start()
    try:
        await until(lambda: a.state.is_leader, 15, "a leads")
        (pod,) = kubelet.replicas.values()
        pod.engine.inject(LOAD_REQUESTS, 512, 4096)
        await _poll(kube, dep, lambda d: d["spec"]["replicas"] == 3, 30, "a scales to 3")
        await until(lambda: len(kubelet.ready_pods()) == 3, 30, "three pods")
        for rep in kubelet.replicas.values():
            rep.engine.abort_all()  # the load is gone: demand now asks for 1 replica
    finally:
        await a.stop()  # releases the Lease: b takes over at once
    b = Controller(settings(), controller_api, identity="ctrl-b")
    await b.start()
    try:
        await until(lambda: b.state.is_leader, 15, "b leads")
        ref = TargetRef(namespace, "llama")

        def fresh() -> list[Any]:
            st = b.state.targets.get(ref)
            ds = st.recent_decisions() if st else []
            return [d for d in ds if str(d.reason) != "hold-missing-data"]

        await until(lambda: len(fresh()) >= 4, 30, "four decisions by b on fresh data")
        assert all(d.desired_replicas == 3 for d in fresh()), [d.message for d in fresh()]
        assert (await kube.read(dep))["spec"]["replicas"] == 3
    finally:
        await b.stop()


async def test_scales_a_real_deployment_on_its_tick_phase(
    kube: Kube, namespace: str, kubelet: FakeKubelet, controller_api: ApiClient
) -> None:
    """`--tick-phases 4` against the real control plane: the pods the ReplicaSet
    controller made (found by the informers) are read on the target's tick phase, in the
    controller process, and the target scales on what they read."""
    ctl = Controller(settings(tick_phases=4), controller_api, identity="ctrl-phases")
    await ctl.start()
    try:
        assert ctl.loop is not None and ctl.loop.tick_phases == 4
        dep, _ = await _one_pod_under_load(kube, namespace, kubelet, ctl)
        await _poll(kube, dep, lambda d: d["spec"]["replicas"] == 3, 30, "scale to 3")
        ref = TargetRef(namespace, "llama")
        st = ctl.state.targets[ref]
        # the write lands before the tick publishes its decision: wait for that
        await until(
            lambda: st.last_decision is not None and st.last_decision.desired_replicas == 3,
            15,
            "the published scale-up decision",
        )
        obs = st.observations[-1]
        assert obs.complete and obs.pods_read and "waiting" in obs.signals, obs
    finally:
        await ctl.stop()
