"""A scale write that applies nothing is counted (llm_autoscaler_scale_failures_total) by
reason, so an alert can see a target stuck behind API errors or conflicts."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from autoscaler.api.metrics import ControllerMetrics
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import ControllerState
from autoscaler.errors import ActuationError, ConflictError
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.control.test_supervision import POLICY, REFS, FlakyCluster, Signals


@dataclass
class RefusingCluster(FlakyCluster):
    """Every scale write raises ``error``; the view never changes (2 replicas)."""

    error: Exception = field(default_factory=lambda: ActuationError("gave up: 500"))
    writes: int = 0

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        self.writes += 1
        raise self.error

    async def observe(self, spec: TargetSpec) -> TargetView:
        return TargetView(2, 2, str(self.writes))


class Loaded(Signals):
    """waiting=40 at a target of 4 per replica: 10 replicas wanted, 2 running."""

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        return SignalReading(signals={"waiting": 40.0}, pods_read=view.ready_replicas)


def _failures(metrics: ControllerMetrics, reason: str) -> float:
    value = metrics.registry.get_sample_value(
        "llm_autoscaler_scale_failures_total",
        {"namespace": REFS[0].namespace, "name": REFS[0].name, "reason": reason},
    )
    return 0.0 if value is None else value


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ActuationError("gave up after 3 attempts: 500"), "error"),
        (ConflictError("409"), "conflict"),
    ],
)
async def test_counts_scale_writes_that_applied_nothing(error: Exception, reason: str) -> None:
    metrics = ControllerMetrics()
    cluster = RefusingCluster(error=error)
    loop = ControlLoop(ControllerState(), cluster, Loaded(), clock=FakeClock(), observer=metrics)
    loop.set_targets([StoredTarget(TargetSpec(ref=REFS[0], policy=POLICY), "1")])
    (decision,) = await loop.tick()
    assert decision.desired_replicas > decision.current_replicas == 2  # a write was due
    assert cluster.writes >= 1
    assert _failures(metrics, reason) == 1
    assert _failures(metrics, "error" if reason == "conflict" else "conflict") == 0


async def test_a_successful_write_counts_no_failure() -> None:
    metrics = ControllerMetrics()
    loop = ControlLoop(
        ControllerState(), FlakyCluster(), Loaded(), clock=FakeClock(), observer=metrics
    )
    loop.set_targets([StoredTarget(TargetSpec(ref=REFS[0], policy=POLICY), "1")])
    await loop.tick()
    assert _failures(metrics, "error") == _failures(metrics, "conflict") == 0
