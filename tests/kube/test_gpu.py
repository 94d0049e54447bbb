"""GPU capacity cap, warm-pool resize and priority patch, events on scale changes."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.errors import PermanentError
from autoscaler.kube.cache import ClusterCache
from autoscaler.kube.capacity import GpuCapacity, template_gpu
from autoscaler.kube.config import api_client_for
from autoscaler.kube.events import EventRecorder
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.warmpool import (
    LOW_PRIORITY_VALUE,
    PAUSE_IMAGE,
    WarmPoolManager,
    pool_name,
    pool_size,
)
from autoscaler.policy.schema import load_policy
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.kube.conftest import uncovered_calls
from tests.support.workloads import deployment


def node(name: str, gpus: str, resource: str = "nvidia.com/gpu", **extra: Any) -> dict[str, Any]:
    n: dict[str, Any] = {
        "metadata": {"name": name, "labels": {"pool": "gpu"}},
        "spec": {},
        "status": {
            "allocatable": {resource: gpus, "cpu": "32"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    n["spec"].update(extra)
    return n


def placed_pod(
    name: str,
    node_name: str,
    gpus: str,
    labels: dict[str, str],
    resource: str = "nvidia.com/gpu",
    phase: str = "Running",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": labels},
        "spec": {
            "nodeName": node_name,
            "containers": [{"name": "c", "resources": {"requests": {resource: gpus}}}],
        },
        "status": {"phase": phase},
    }


def target(warm_pool: bool = False, provisionable: int = 0) -> TargetSpec:
    return TargetSpec(
        ref=TargetRef("default", "llm"),
        policy=load_policy(
            {
                "capacity": {"provisionableReplicas": provisionable},
                "warmPool": {"enabled": warm_pool, "minReplicas": 0, "maxReplicas": 3},
            }
        ),
        scale_target_ref=ScaleTargetRef(name="llm"),
    )


def test_reads_full_mig_and_shared_gpu_requests() -> None:
    def spec(res: dict[str, str]) -> dict[str, Any]:
        return {"containers": [{"resources": {"limits": res}}, {"resources": {}}]}

    assert template_gpu(spec({"nvidia.com/gpu": "2", "cpu": "4"})) == ("nvidia.com/gpu", 2.0)
    assert template_gpu(spec({"nvidia.com/mig-3g.40gb": "1"})) == ("nvidia.com/mig-3g.40gb", 1.0)
    assert template_gpu(spec({"nvidia.com/gpu.shared": "1"})) == ("nvidia.com/gpu.shared", 1.0)
    assert template_gpu(spec({"cpu": "4"})) is None
    with pytest.raises(PermanentError, match="several GPU resources"):
        template_gpu(spec({"nvidia.com/gpu": "1", "nvidia.com/mig-1g.10gb": "1"}))


async def test_caps_replicas_to_free_gpus_counting_pause_pods_as_free(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm", replicas=2, gpu={"nvidia.com/gpu": "2"}), "apps")
    kapi.create("nodes", node("n1", "8"))
    kapi.create("nodes", node("n2", "4"))
    kapi.create("nodes", node("cordoned", "8", unschedulable=True))
    kapi.create("pods", placed_pod("llm-1", "n1", "2", {"app": "llm"}))
    kapi.create("pods", placed_pod("llm-2", "n1", "2", {"app": "llm"}))
    kapi.create("pods", placed_pod("batch", "n2", "3", {"app": "batch"}))
    kapi.create("pods", placed_pod("done", "n2", "1", {"app": "batch"}, phase="Succeeded"))
    pool = {
        "app.kubernetes.io/managed-by": "llm-autoscaler",
        "app.kubernetes.io/component": "warm-pool",
    }
    kapi.create("pods", placed_pod("pause-1", "n1", "2", pool))
    cache = ClusterCache(kclient)
    await cache.wait_synced()
    try:
        cap = GpuCapacity(cache)
        report = await cap.report(target(provisionable=1))
        assert report is not None
        # n1: 8 - 2 - 2 - 2(pause) = 2 free + 2 held by pause -> 2 slots; n2: 4 - 3 = 1 -> 0.
        assert (report.placed, report.free_slots, report.pause_slots) == (2, 2, 1)
        assert await cap.max_replicas(target(provisionable=1), 2) == 2 + 2 + 1

        # Kept incrementally: a batch pod leaving n2 frees one slot, a new node adds two.
        kapi.delete("pods", "default", "batch")
        kapi.create("nodes", node("n3", "4"))
        await cache.pods.wait_for(lambda: ("default", "batch") not in cache.pods.items)
        await cache.nodes.wait_for(lambda: "n3" in cache.gpus.nodes)
        report = await cap.report(target(provisionable=1))
        assert report is not None
        assert (report.placed, report.free_slots, report.nodes) == (2, 2 + 2 + 2, 3)
    finally:
        await cache.stop()
    # The capacity reads cost no request beyond the informers' list + watch.
    assert {(c.verb, c.resource) for c in kapi.calls} <= {
        (v, r) for v in ("list", "watch") for r in ("pods", "nodes", "deployments", "statefulsets")
    }


async def test_cpu_only_target_is_not_capped(kapi: LocalKubeAPI, kclient: ApiClient) -> None:
    kapi.create("deployments", deployment("llm"), "apps")
    cache = ClusterCache(kclient)
    await cache.wait_synced()
    try:
        assert await GpuCapacity(cache).max_replicas(target(), 1) is None
    finally:
        await cache.stop()


async def test_warm_pool_created_then_resized_and_priority_patched(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm", gpu={"nvidia.com/mig-3g.40gb": "1"}), "apps")
    wp = WarmPoolManager(kclient)
    await wp.resize(target(warm_pool=True), 2, peak=False)
    name = pool_name("nvidia.com/mig-3g.40gb")
    assert name == "llm-warm-pool-nvidia-com-mig-3g-40gb"
    pool = kapi.get("deployments", "default", name, "apps")
    assert pool is not None
    pod_spec = pool["spec"]["template"]["spec"]
    assert pool["spec"]["replicas"] == 2
    assert pod_spec["containers"][0]["image"] == PAUSE_IMAGE
    assert pod_spec["containers"][0]["resources"]["requests"] == {"nvidia.com/mig-3g.40gb": "1"}
    assert pod_spec["priorityClassName"] == "llm-warm-pool-low"
    low = kapi.get("priorityclasses", None, "llm-warm-pool-low", "scheduling.k8s.io")
    assert low is not None
    assert (low["value"], low["preemptionPolicy"]) == (LOW_PRIORITY_VALUE, "Never")
    assert kapi.get("priorityclasses", None, "llm-warm-pool-peak", "scheduling.k8s.io")

    await wp.resize(target(warm_pool=True), 9, peak=True)  # clamped to maxReplicas 3
    pool = kapi.get("deployments", "default", name, "apps")
    assert pool is not None
    assert pool["spec"]["replicas"] == 3
    assert pool["spec"]["template"]["spec"]["priorityClassName"] == "llm-warm-pool-peak"
    assert pool["spec"]["template"]["spec"]["containers"][0]["image"] == PAUSE_IMAGE
    patches = [c for c in kapi.calls if c.verb == "patch" and c.resource == "deployments"]
    await wp.resize(target(warm_pool=True), 3, peak=True)  # nothing changed: no write
    assert [c for c in kapi.calls if c.verb == "patch" and c.resource == "deployments"] == patches


def test_pool_size_covers_forecast_beyond_desired_within_bounds() -> None:
    assert pool_size(forecast_replicas=7, desired_replicas=4, min_replicas=1, max_replicas=5) == 3
    assert pool_size(forecast_replicas=3, desired_replicas=4, min_replicas=1, max_replicas=5) == 1
    assert pool_size(forecast_replicas=20, desired_replicas=4, min_replicas=0, max_replicas=5) == 5


async def test_inference_pod_preempts_pause_pod_in_local_scheduler() -> None:
    async with LocalKubeAPI(port=0, controller=True) as api, api_client_for(api.url) as c:
        api.create("nodes", node("n1", "2"))
        wp = WarmPoolManager(c)
        await wp.ensure_priority_classes()
        await wp.apply("default", "nvidia.com/gpu", 1, 2, "llm-warm-pool-low")
        gpu = {"nvidia.com/gpu": "1"}
        api.create("deployments", deployment("llm", replicas=1, gpu=gpu), "apps")
        pods = api.list_objects("pods", "default")
        llm = [p for p in pods if p["metadata"]["labels"].get("app") == "llm"]
        pause = [p for p in pods if p["metadata"]["labels"].get("app") != "llm"]
        assert llm[0]["spec"].get("nodeName") == "n1"
        # One pause pod was preempted and re-created; it waits, Pending, for a GPU.
        assert sorted(bool(p["spec"].get("nodeName")) for p in pause) == [False, True]
        assert uncovered_calls(api) == []


async def test_event_on_target_for_each_applied_change(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    rec = EventRecorder(kclient, instance="ctrl-0")
    up = Decision(
        t=0,
        current_replicas=2,
        desired_replicas=4,
        reason=Reason.SCALE_UP,
        message="waiting 30 > 4 per replica",
        active=True,
    )
    capped = Decision(
        t=1,
        current_replicas=4,
        desired_replicas=5,
        reason=Reason.SCALE_UP,
        message="capacity-limited to 5",
        active=True,
        limits=(Reason.CAPACITY_LIMITED,),
    )
    steady = Decision(
        t=2,
        current_replicas=5,
        desired_replicas=5,
        reason=Reason.STEADY,
        message="steady",
        active=True,
    )
    await rec.record(target(), up, applied=True)
    await rec.record(target(), capped, applied=True)
    await rec.record(target(), steady, applied=True)
    await rec.record(target(), up, applied=False)
    events = sorted(kapi.list_objects("events", "default"), key=lambda e: e["lastTimestamp"])
    assert len(events) == 2
    assert {e["involvedObject"]["name"] for e in events} == {"llm"}
    assert {e["involvedObject"]["kind"] for e in events} == {"Deployment"}
    by_type = {e["type"]: e for e in events}
    assert by_type["Normal"]["reason"] == "ScaledUp"
    assert by_type["Normal"]["message"] == "2 -> 4 replicas: waiting 30 > 4 per replica"
    assert by_type["Warning"]["message"].endswith("capacity-limited to 5")


async def test_events_carry_the_target_uid_read_once(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    created = kapi.create("deployments", deployment("llm"), "apps")
    rec = EventRecorder(kclient, instance="ctrl-0")
    for t, (cur, want) in enumerate(((1, 2), (2, 3))):
        decision = Decision(t, cur, want, Reason.SCALE_UP, "up", active=True)
        await rec.record(target(), decision, applied=True)
    events = kapi.list_objects("events", "default")
    uid = created["metadata"]["uid"]
    assert [e["involvedObject"]["uid"] for e in events] == [uid, uid]  # kubectl describe
    reads = [c for c in kapi.calls if c.resource == "deployments" and c.verb == "get"]
    assert len(reads) == 1
