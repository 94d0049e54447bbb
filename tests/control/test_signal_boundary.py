"""One boundary for numbers: a pod page holding +Inf, -Inf, NaN or a negative count is
left unread, so it can hold a target or let it scale up, never scale it down.

Real loopback HTTP pods (prometheus_client pages), the real pod scrape source, the real
loop; a fake clock and an in-memory cluster."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest

from autoscaler.api.metrics import ControllerMetrics
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import TargetView
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.domain import Reason, TargetRef
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.metrics.vllm_pods import FakeVllm, start_pods
from tests.support.cluster_ports import NoWrites

REF = TargetRef("demo", "llama")
POLICY = {
    "minReplicaCount": 1,
    "maxReplicaCount": 20,
    "metrics": [{"signal": "waiting", "target": 4}],
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
}


@dataclass
class PodsCluster(NoWrites):
    pods: tuple[PodEndpoint, ...]
    replicas: int = 4
    writes: list[int] = field(default_factory=list)

    async def observe(self, spec: TargetSpec) -> TargetView:
        return TargetView(self.replicas, self.replicas, "1", pods=self.pods)

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        self.writes.append(replicas)
        self.replicas = replicas


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (math.inf, "not-finite"),
        (-math.inf, "not-finite"),
        (math.nan, "not-finite"),
        (-1e9, "negative"),
    ],
)
async def test_a_pod_reporting_an_impossible_queue_never_scales_the_target_down(
    bad: float, reason: str
) -> None:
    pods = [FakeVllm() for _ in range(4)]
    for pod in pods[:3]:
        pod.set(waiting=1, running=5, kv=0.2)  # healthy: 3 waiting over 4 replicas asks 1
    pods[3].set(waiting=bad, running=5, kv=0.2)
    runner, urls = await start_pods(pods)
    source = PodScrapeSource(ScrapeConfig(timeout_s=2.0))
    cluster = PodsCluster(tuple(PodEndpoint(f"llama-{i}", u) for i, u in enumerate(urls)))
    metrics = ControllerMetrics()
    clock = FakeClock()
    loop = ControlLoop(
        ControllerState(), cluster, SourceSignals(source), clock=clock, observer=metrics
    )
    loop.set_targets([StoredTarget(TargetSpec(ref=REF, policy=load_policy(POLICY)), "1")])
    try:
        decisions = []
        for _ in range(5):
            [d] = await loop.tick()
            decisions.append(d)
            await clock.advance(1.0)
    finally:
        await source.close()
        await runner.cleanup()
    assert cluster.writes == [] and all(d.desired_replicas == 4 for d in decisions)
    assert Reason.HOLD_PARTIAL_DATA in decisions[-1].limits
    assert decisions[-1].numbers[f"pods_rejected.{reason}"] == 1.0
    counted = metrics.registry.get_sample_value(
        "llm_autoscaler_rejected_values_total",
        {"namespace": "demo", "name": "llama", "reason": reason},
    )
    assert counted == 5.0


async def test_a_pod_reporting_an_impossible_queue_still_lets_the_target_scale_up() -> None:
    pods = [FakeVllm() for _ in range(4)]
    for pod in pods[:3]:
        pod.set(waiting=12, running=5, kv=0.2)  # 36 waiting asks for 9
    pods[3].set(waiting=-1e9, running=5, kv=0.2)
    runner, urls = await start_pods(pods)
    source = PodScrapeSource(ScrapeConfig(timeout_s=2.0))
    cluster = PodsCluster(tuple(PodEndpoint(f"llama-{i}", u) for i, u in enumerate(urls)))
    loop = ControlLoop(ControllerState(), cluster, SourceSignals(source), clock=FakeClock())
    loop.set_targets([StoredTarget(TargetSpec(ref=REF, policy=load_policy(POLICY)), "1")])
    try:
        [d] = await loop.tick()
    finally:
        await source.close()
        await runner.cleanup()
    assert d.desired_replicas > 4 and cluster.writes and cluster.writes[0] > 4
