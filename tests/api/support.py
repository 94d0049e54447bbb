"""Shared builders for the API and KEDA tests: targets, observations, decisions."""

from __future__ import annotations

from autoscaler.control.state import ControllerState, TargetStatus
from autoscaler.domain import Decision, MetricRecommendation, Observation, Reason, TargetRef
from autoscaler.policy.schema import load_policy
from autoscaler.target import Mode, TargetSpec

WRITE_TOKEN = "write-secret-token-5f1c"
READ_TOKEN = "read-secret-token-9a2e"


def spec(
    namespace: str = "llm", name: str = "chat", mode: Mode = "keda", **policy: object
) -> TargetSpec:
    doc = {"minReplicaCount": 1, "maxReplicaCount": 8, **policy}
    return TargetSpec(ref=TargetRef(namespace, name), policy=load_policy(doc), mode=mode)


def register(state: ControllerState, target: TargetSpec) -> TargetStatus:
    status = TargetStatus(spec=target, version="1")
    state.targets[target.ref] = status
    return status


def observation(t: float, current: int, waiting: float | None = None) -> Observation:
    signals = {} if waiting is None else {"waiting": waiting}
    return Observation(t=t, current_replicas=current, ready_replicas=current, signals=signals)


def decision(
    t: float, current: int, desired: int, *, active: bool = True, reason: Reason = Reason.STEADY
) -> Decision:
    return Decision(
        t=t,
        current_replicas=current,
        desired_replicas=desired,
        reason=reason,
        message=f"test decision {current}->{desired}",
        active=active,
        metrics=(
            MetricRecommendation(
                signal="waiting",
                metric_type="AverageValue",
                target=4.0,
                value=float(desired * 4),
                replicas=desired,
                forecast_value=float(desired * 4 + 1),
            ),
        ),
        numbers={"waiting": float(desired * 4)},
    )


async def publish(
    state: ControllerState,
    ref: TargetRef,
    t: float,
    current: int,
    desired: int,
    active: bool = True,
) -> Decision:
    d = decision(t, current, desired, active=active)
    await state.publish(ref, observation(t, current, waiting=desired * 4.0), d)
    return d
