"""Endpoints from EndpointSlices through the informer (list + watch against the local
Kubernetes API): a held request is forwarded once its Service's slice says Ready."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from autoscaler.activator.endpoints import slice_record
from autoscaler.emulator import EmulatorFleet
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import SLEEPING_LABEL
from tests.activator.conftest import StartActivator
from tests.support.waiting import until


def endpoint_slice(name: str, service: str, port: int, ready: list[bool]) -> dict[str, Any]:
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": name,
            "namespace": "ml",
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": r}} for r in ready],
    }


def test_slice_record_keeps_ready_addresses_only() -> None:
    obj = endpoint_slice("s", "svc", 8000, [True, False])
    obj["endpoints"][1]["addresses"] = ["10.0.0.2"]
    obj["endpoints"].append({"addresses": ["10.0.0.3"]})  # no conditions: ready
    obj["endpoints"].append({"addresses": ["10.0.0.4"], "conditions": {"terminating": True}})
    rec = slice_record(obj)
    assert (rec.service, rec.ready, rec.ports) == ("svc", ("127.0.0.1", "10.0.0.3"), (8000,))


@pytest.fixture
async def kube() -> AsyncIterator[LocalKubeAPI]:
    async with LocalKubeAPI() as k:
        yield k


async def test_held_request_is_forwarded_when_the_endpointslice_turns_ready(
    kube: LocalKubeAPI,
    start_activator: StartActivator,
    fleet: EmulatorFleet,
    http: aiohttp.ClientSession,
) -> None:
    pod = await fleet.start_replica("p", model="m")
    kube.create("endpointslices", endpoint_slice("llama-abc", "llama", pod.port, [False]),
                group="discovery.k8s.io")  # fmt: skip
    kube.create("endpointslices", endpoint_slice("other-x", "other", pod.port, [True]),
                group="discovery.k8s.io")  # fmt: skip
    api = api_client_for(kube.url)
    try:
        cfg = {"targets": [{"model": "m", "namespace": "ml", "service": "llama", "port": 8000}]}
        act = await start_activator(cfg, kube_api=api)
        slices = act.sources[0]
        await slices.wait_synced()
        assert set(slices.informer.items) == {("ml", "llama-abc")}  # selected server-side
        gate = act.activator.gates["ml/llama"]  # type: ignore[union-attr]
        task = asyncio.create_task(
            http.post(
                act.url + "/v1/completions", json={"model": "m", "prompt": "x", "max_tokens": 1}
            )
        )
        await until(lambda: gate.held == 1, 5, "held: the slice's endpoint is not ready")
        obj = kube.get("endpointslices", "ml", "llama-abc", group="discovery.k8s.io")
        assert obj is not None
        obj["endpoints"][0]["conditions"]["ready"] = True
        kube.update("endpointslices", obj, group="discovery.k8s.io")
        r = await asyncio.wait_for(task, 5)
        assert r.status == 200  # the slice's port (the pod's) is used, not the configured one
        assert gate.ready == (f"127.0.0.1:{pod.port}",)
        assert slices.informer.lists == 1  # one list, then the watch: no call per request
    finally:
        await api.close()


async def test_a_sleeping_pod_is_left_out_of_the_ready_endpoints(
    kube: LocalKubeAPI, start_activator: StartActivator
) -> None:
    """A sleeper keeps its Ready condition (docs/policy.md#sleepers); its label takes it
    out of the activator's endpoints, and removing the label brings it back."""
    obj = endpoint_slice("llama-abc", "llama", 8000, [True, True])
    for i, ep in enumerate(obj["endpoints"]):
        ep["addresses"] = [f"10.0.0.{i + 1}"]
        ep["targetRef"] = {"kind": "Pod", "name": f"llama-{i}", "namespace": "ml"}
    kube.create("endpointslices", obj, group="discovery.k8s.io")
    for i in range(2):
        kube.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"llama-{i}", "namespace": "ml", "labels": {"app": "l"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
            },
        )
    api = api_client_for(kube.url)
    try:
        cfg = {"targets": [{"model": "m", "namespace": "ml", "service": "llama", "port": 8000}]}
        act = await start_activator(cfg, kube_api=api)
        slices = act.sources[0]
        await slices.wait_synced()
        gate = act.activator.gates["ml/llama"]  # type: ignore[union-attr]
        assert gate.ready == ("10.0.0.1:8000", "10.0.0.2:8000")
        pod = kube.get("pods", "ml", "llama-1")
        assert pod is not None
        pod["metadata"]["labels"][SLEEPING_LABEL] = "true"
        kube.update("pods", pod)
        await until(lambda: gate.ready == ("10.0.0.1:8000",), 5, "the sleeper left out")
        pod = kube.get("pods", "ml", "llama-1")
        assert pod is not None
        del pod["metadata"]["labels"][SLEEPING_LABEL]
        kube.update("pods", pod)
        await until(lambda: len(gate.ready) == 2, 5, "the woken pod back")
        assert slices.sleepers is not None and slices.sleepers.lists == 1
    finally:
        await api.close()


async def test_a_probed_endpoint_that_is_asleep_is_not_ready(
    start_activator: StartActivator, fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    from autoscaler.emulator.server import ReplicaConfig

    pod = await fleet.start_replica("p", config=ReplicaConfig(model="m", sleep_mode=True))
    act = await start_activator(
        {"targets": [{"model": "m", "endpoints": [f"127.0.0.1:{pod.port}"]}]}
    )
    gate = act.activator.gates["default/m"]  # type: ignore[union-attr]
    await until(lambda: len(gate.ready) == 1, 5, "Ready while awake")
    async with http.post(pod.url + "/sleep?level=1") as r:
        assert r.status == 200
    await until(lambda: gate.ready == (), 5, "asleep: not Ready though /health is 200")
    async with http.post(pod.url + "/wake_up") as r:
        assert r.status == 200
    await until(lambda: len(gate.ready) == 1, 5, "awake again")
