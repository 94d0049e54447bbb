"""A plain Service and sleepers on kube-apiserver 1.24 with the real EndpointSlice
controller: a Service selecting ``autoscaling.llmscaler.io/awake: "true"`` loses a pod from
its EndpointSlice when the controller puts it to sleep, and gets it back once the wake has
completed.

The sleeper controller (`SleeperController`) does the sleep and the wake: its pod patches
go through `PodSleepClient` under the controller's own ServiceAccount (the RBAC
``deploy/`` ships), its engine calls to an emulated vLLM with sleep mode. The pod itself
has a routable, non-loopback IP written by the test (the API server refuses loopback
addresses in an EndpointSlice, and the fake kubelet serves on loopback), on a Node of its
own that no kubelet runs, so nothing else touches its status.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from autoscaler.control.ports import Replica, TargetView
from autoscaler.control.sleepers import SleeperController
from autoscaler.domain import TargetRef
from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.server import ReplicaConfig
from autoscaler.kube.sleep import PodSleepClient
from autoscaler.names import AWAKE_LABEL, SLEEPING_LABEL
from autoscaler.policy.schema import load_policy
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.support.waiting import until

MERGE_PATCH = "application/merge-patch+json"
POD_IP = "10.244.7.21"


class EngineAt:
    """`SleepIO`: the pod patches for real, the engine calls to ``url`` (the pod's own
    address is not reachable from the test)."""

    def __init__(self, pods: PodSleepClient, url: str) -> None:
        self.pods = pods
        self.url = url

    async def sleep(self, engine_url: str) -> None:
        await self.pods.sleep(self.url)

    async def wake(self, engine_url: str) -> None:
        await self.pods.wake(self.url)

    async def is_sleeping(self, engine_url: str) -> bool | None:
        return await self.pods.is_sleeping(self.url)

    async def mark(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None:
        await self.pods.mark(namespace, name, labels=labels, annotations=annotations)


async def _node(core: Any, name: str) -> None:
    await core.create_node({"metadata": {"name": name}})
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "test"}
    status = {"status": {"conditions": [{**ready, "lastHeartbeatTime": now}]}}
    await core.patch_node_status(name, status, _content_type=MERGE_PATCH)


async def _running_pod(core: Any, namespace: str, name: str, node: str) -> None:
    labels = {"app": "llama", AWAKE_LABEL: "true"}  # as the pod template sets it
    pod = {
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "vllm", "image": "vllm", "ports": [{"containerPort": 8000}]}],
        },
    }
    await core.create_namespaced_pod(namespace, pod)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    conds = [
        {"type": t, "status": "True", "lastTransitionTime": now}
        for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
    ]
    status = {
        "status": {
            "phase": "Running",
            "podIP": POD_IP,
            "podIPs": [{"ip": POD_IP}],
            "hostIP": "10.0.0.1",
            "conditions": conds,
        }
    }
    await core.patch_namespaced_pod_status(name, namespace, status, _content_type=MERGE_PATCH)


async def _ready_addresses(discovery: Any, namespace: str, service: str) -> list[str]:
    slices = await discovery.list_namespaced_endpoint_slice(
        namespace, label_selector=f"kubernetes.io/service-name={service}"
    )
    out: list[str] = []
    for s in slices.items:
        for ep in s.endpoints or ():
            if ep.conditions is None or ep.conditions.ready is not False:
                out.extend(ep.addresses)
    return sorted(out)


async def test_a_service_selecting_awake_drops_a_sleeper_and_gets_it_back_after_wake(
    admin_api: ApiClient, controller_api: ApiClient, namespace: str
) -> None:
    core: Any = client.CoreV1Api(admin_api)
    discovery: Any = client.DiscoveryV1Api(admin_api)
    node = f"plain-{namespace}"
    await _node(core, node)
    try:
        await _running_pod(core, namespace, "llama-0", node)
        service = {
            "metadata": {"name": "llama", "namespace": namespace},
            "spec": {
                "selector": {"app": "llama", AWAKE_LABEL: "true"},
                "ports": [{"port": 8000, "targetPort": 8000}],
            },
        }
        await core.create_namespaced_service(namespace, service)

        async def addresses() -> list[str]:
            return await _ready_addresses(discovery, namespace, "llama")

        await until_async(addresses, [POD_IP], "the awake pod in the Service's slice")

        spec = TargetSpec(
            ref=TargetRef(namespace, "llama"),
            policy=load_policy({"minReplicaCount": 0, "sleep": {"maxSleeping": 1}}),
            scale_target_ref=ScaleTargetRef(name="llama"),
        )
        engine = f"http://{POD_IP}:8000"
        async with EmulatorFleet(speed=1.0) as fleet:
            config = ReplicaConfig(sleep_mode=True, wake_s=0.05)
            replica = await fleet.start_replica("llama-0", config=config)
            await until(lambda: replica.ready, 10, "the emulated engine")
            pods = PodSleepClient(controller_api)
            ctl = SleeperController(EngineAt(pods, replica.url), settle_s=0.2)
            try:
                awake = Replica("llama-0", True, False, engine, None, None)
                view = TargetView(spec_replicas=1, ready_replicas=1, replicas=(awake,))
                out = await ctl.reconcile(spec, view, desired=0)
                assert (out.replicas, out.sleeping) == (1, 1)  # asleep, not deleted
                assert replica.sleep.is_sleeping
                pod = await core.read_namespaced_pod("llama-0", namespace)
                assert pod.metadata.labels[AWAKE_LABEL] == "false"
                assert pod.metadata.labels[SLEEPING_LABEL] == "true"
                # the real EndpointSlice controller drops it: the Service routes nowhere
                await until_async(addresses, [], "the sleeper out of the Service's slice")

                asleep = Replica("llama-0", True, True, engine, time.time(), None)
                view = TargetView(
                    spec_replicas=1, ready_replicas=0, sleeping_replicas=1, replicas=(asleep,)
                )
                out = await ctl.reconcile(spec, view, desired=1)
                assert (out.replicas, out.sleeping) == (1, 0)
                assert not replica.sleep.is_sleeping  # awake before the label says so
                await until_async(addresses, [POD_IP], "the woken pod back in the slice")
                pod = await core.read_namespaced_pod("llama-0", namespace)
                assert pod.metadata.labels[AWAKE_LABEL] == "true"
                assert SLEEPING_LABEL not in pod.metadata.labels
            finally:
                await pods.close()
    finally:
        await core.delete_node(node)


async def until_async(read: Any, want: Any, what: str, timeout_s: float = 30.0) -> None:
    import asyncio

    deadline = time.monotonic() + timeout_s
    got = None
    while time.monotonic() < deadline:
        got = await read()
        if got == want:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{what}: {got!r} after {timeout_s} s, expected {want!r}")
