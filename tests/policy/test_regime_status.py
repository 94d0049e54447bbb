"""The learned load regime as the status reports it: the ``LoadRegime`` condition (its
reason the regime, its message why) on targets decided with prediction on (issue 36)."""

from __future__ import annotations

from autoscaler.control.adapters import status_conditions
from autoscaler.domain import Decision, DecisionState, Forecast, Observation
from autoscaler.forecast.regime import RegimeEstimator
from autoscaler.policy.core import decide
from autoscaler.policy.regime import regime_name
from autoscaler.policy.schema import validate_policy

POLICY = {
    "metrics": [{"signal": "waiting", "type": "AverageValue", "target": 4}],
    "prediction": {},
}


def _learned_fleet() -> dict[str, float]:
    """What the estimator reports after 15 min of a flat level of 1 replica with 20 s
    bursts 3 replicas above it every 4 minutes, at a 90 s cold start."""
    est = RegimeEstimator()
    for t in range(900):
        burst = 3.0 if (t + 120) % 240 < 20 else 0.0
        est.observe(float(t), 1.0 + burst, 90.0)
    return est.numbers()


def _decision(regime: dict[str, float], prediction: bool = True) -> Decision:
    doc = POLICY if prediction else {"metrics": POLICY["metrics"]}
    obs = Observation(900.0, 2, 2, {"waiting": 4.0}, forecast=Forecast(90.0, {}, regime=regime))
    decision, _ = decide(validate_policy(doc), obs, DecisionState(), 900.0)
    return decision


def test_a_learned_fleet_is_reported_with_its_reason_and_why() -> None:
    numbers = _learned_fleet()
    assert regime_name(numbers) == "Fleet"
    decision = _decision(numbers)
    assert decision.desired_replicas == int(numbers["regime.fleet_replicas"])
    (regime,) = [c for c in status_conditions(decision, None) if c.type == "LoadRegime"]
    assert regime.status == "True" and regime.reason == "Fleet"
    assert "shorter than the 90 s cold start" in regime.message
    assert f"learned fleet of {numbers['regime.fleet_replicas']:.0f} replicas" in regime.message


def test_steady_and_following_are_named_too() -> None:
    base = {"regime.steady": 0.0, "regime.level_replicas": 3.0}
    base |= {"regime.level_range_replicas": 2.5, "regime.window_s": 1800.0}
    assert regime_name(base) == "Following"
    assert regime_name({**base, "regime.steady": 1.0, "regime.fleet": 0.0}) == "Steady"
    decision = _decision(base)
    (regime,) = [c for c in status_conditions(decision, None) if c.type == "LoadRegime"]
    assert regime.reason == "Following" and regime.message.startswith("following:")


def test_without_prediction_there_is_no_regime_condition() -> None:
    decision = _decision(_learned_fleet(), prediction=False)
    assert regime_name(decision.numbers) is None
    assert not [c for c in status_conditions(decision, None) if c.type == "LoadRegime"]
