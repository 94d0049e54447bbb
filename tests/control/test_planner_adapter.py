"""The planner adapter: feeds cold-start samples once, forecasts, sizes the warm pool."""

from __future__ import annotations

from autoscaler.control.adapters import PlannerAdapter
from autoscaler.control.ports import TargetView
from autoscaler.domain import TargetRef
from autoscaler.policy.schema import load_policy
from autoscaler.target import TargetSpec

POLICY = {
    "metrics": [{"signal": "running", "type": "AverageValue", "target": 50}],
    "prediction": {"enabled": True, "coldStartPriorSeconds": 90, "minPodsToLearn": 2},
    "warmPool": {"enabled": True, "maxReplicas": 10, "leadTimeSeconds": 300},
}


def spec() -> TargetSpec:
    return TargetSpec(ref=TargetRef("ns", "t"), policy=load_policy(POLICY))


def test_cold_start_samples_are_learned_once_and_set_the_horizon() -> None:
    planner = PlannerAdapter(spec())
    view = TargetView(2, 2, cold_start_samples_s=(40.0, 44.0))
    for t in range(5):
        planner.update(float(t), {"arrival_rate_per_s": 1.0, "running": 20.0}, view)
    forecast = planner.forecast(5.0)
    assert forecast is not None
    assert 40.0 <= forecast.horizon_s <= 44.0  # learned, not the 90 s prior
    assert planner.planner.cold_start.seen == 2


def test_warm_pool_uses_policy_targets_until_capacity_is_learned() -> None:
    planner = PlannerAdapter(spec())
    view = TargetView(2, 2)
    # Demand ramps: running grows with the arrival rate (Little's law holds it at 20x).
    for t in range(0, 600, 5):
        rate = 1.0 + t / 60.0
        planner.update(float(t), {"arrival_rate_per_s": rate, "running": 20.0 * rate}, view)
    size = planner.warm_pool_size(600.0, replicas_now=2)
    assert size >= 1  # running ~200+ and rising needs > 4 replicas at 50 per replica
    assert "warm_pool.needed_replicas" in planner.numbers()
