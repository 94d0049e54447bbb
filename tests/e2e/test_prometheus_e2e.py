"""End to end with a real Prometheus server: emulated vLLM pods behind the local
Kubernetes API, Prometheus scraping them (file-based discovery follows the pods), the
control loop reading PromQL and patching the Deployment's scale subresource.

A burst (a queue injected into the first pod) must produce a scale-up, and the quiet
after it a scale-down, with the reasons recorded. Real time passes here: waits are
bounded by deadlines.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from autoscaler.control.adapters import KubeCluster
from autoscaler.control.loop import ControlLoop
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.control.tasks import TaskGroup
from autoscaler.demo.app import DemoOptions, _deployment, _node
from autoscaler.demo.runtime import EmulatorRuntime
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.support.prometheus import FileSdPrometheus, PrometheusServer, write_sd
from tests.support.waiting import until

REF = TargetRef("demo", "llama-3-8b")
POLICY = {
    "minReplicaCount": 1,
    "maxReplicaCount": 4,
    "metrics": [{"signal": "waiting", "type": "AverageValue", "target": 8}],
    "behavior": {
        "scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 5}]},
        "scaleDown": {
            "stabilizationWindowSeconds": 3,
            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 2}],
        },
    },
}


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    sd = tmp_path / "targets.json"
    write_sd(sd, [])
    fleet = EmulatorFleet(speed=5.0)
    kube = LocalKubeAPI(controller=True, runtime=EmulatorRuntime(fleet, cold_start_s=5.0))
    await kube.start()
    opts = DemoOptions()
    kube.create("nodes", _node("gpu-node-1", 8))
    kube.create("deployments", _deployment(opts), group="apps")
    prom = FileSdPrometheus(sd, scrape_interval_s=0.5)
    prom.start()
    tasks = TaskGroup("e2e")

    async def follow_pods() -> None:
        while True:
            write_sd(sd, fleet.ready_urls())
            await asyncio.sleep(0.2)

    tasks.spawn("file-sd", follow_pods())
    api = api_client_for(kube.url)
    cluster = KubeCluster(api)
    source = PrometheusSource(prom.url, {str(REF): 'job="vllm"'})
    state = ControllerState()
    loop = ControlLoop(state, cluster, SourceSignals(source), tick_interval_s=0.5)
    spec = TargetSpec(
        ref=REF,
        policy=load_policy(POLICY),
        scale_target_ref=ScaleTargetRef(kind="Deployment", name="llama-3-8b"),
    )
    loop.set_targets([StoredTarget(spec, "1")])
    try:
        yield {
            "fleet": fleet,
            "kube": kube,
            "prom": prom,
            "loop": loop,
            "state": state,
            "tasks": tasks,
        }
    finally:
        await tasks.stop()
        await cluster.close()
        await source.close()
        await api.close()
        prom.stop()
        await kube.close()
        await fleet.stop_all()


def spec_replicas(kube: LocalKubeAPI) -> int:
    dep = kube.get("deployments", "demo", "llama-3-8b", group="apps")
    assert dep is not None
    return int(dep["spec"]["replicas"])


async def test_burst_scales_up_and_quiet_scales_down_through_prometheus(
    world: dict[str, Any],
) -> None:
    fleet: EmulatorFleet = world["fleet"]
    kube: LocalKubeAPI = world["kube"]
    prom: PrometheusServer = world["prom"]
    state: ControllerState = world["state"]
    await until(lambda: bool(fleet.ready_urls()), 30, "the first pod to be ready")
    await prom.wait_for('vllm:num_requests_waiting{job="vllm"}', deadline_s=30)
    world["tasks"].spawn("control-loop", world["loop"].run())

    first = next(iter(fleet.replicas))
    fleet.jump_queue(first, requests=400, prompt_tokens=2048, output_tokens=400)
    await until(lambda: spec_replicas(kube) > 1, 30, "a scale-up patch")
    status = state.status(REF)
    assert status is not None
    # The tick writes the scale first and publishes its decision after the status write
    # and the warm pool (control/loop.py), so the history may trail the patch briefly.
    await until(
        lambda: any(d.desired_replicas > d.current_replicas for d in status.history),
        10,
        "the scale-up decision in the history",
    )
    ups = [d for d in status.history if d.desired_replicas > d.current_replicas]
    assert ups and ups[0].reason in (Reason.SCALE_UP, Reason.PANIC)
    assert "waiting=" in ups[0].message

    peak = spec_replicas(kube)
    await until(lambda: spec_replicas(kube) < peak, 90, "a scale-down after the burst drained")
    # As for the scale-up: the patch lands before the decision is published.
    await until(
        lambda: any(d.desired_replicas < d.current_replicas for d in status.history),
        10,
        "the scale-down decision in the history",
    )
    downs: list[Decision] = [d for d in status.history if d.desired_replicas < d.current_replicas]
    assert downs and downs[-1].reason == Reason.SCALE_DOWN
    # Every decision in between was taken on data: none on missing data after the start.
    after_start = [d for d in status.history if d.t >= ups[0].t]
    assert all(d.reason != Reason.HOLD_MISSING_DATA for d in after_start)
