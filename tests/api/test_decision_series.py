"""Per-decision /metrics series come from the latest decision of each target, built when
/metrics is scraped (issue 16: no per-tick gauge work for 1,000 targets)."""

from __future__ import annotations

from autoscaler.api.metrics import ControllerMetrics
from autoscaler.domain import Decision, MetricRecommendation, Reason, TargetRef

REF = TargetRef("llm", "chat")
LABELS = {"namespace": "llm", "name": "chat"}


def _decision(
    desired: int, *metrics: MetricRecommendation, reason: Reason = Reason.STEADY
) -> Decision:
    return Decision(
        t=0.0,
        current_replicas=2,
        desired_replicas=desired,
        reason=reason,
        message="",
        active=True,
        metrics=metrics,
        numbers={"forecast.running.predicted": 50.0, "forecast_horizon_s": 90.0},
    )


def _rec(signal: str, value: float | None, forecast: float | None = None) -> MetricRecommendation:
    return MetricRecommendation(signal, "AverageValue", 4.0, value, 1, forecast_value=forecast)


def test_series_show_only_the_latest_decision() -> None:
    m = ControllerMetrics()
    m.observe_decision(REF, _decision(3, _rec("waiting", 9.0, 12.0), _rec("running", 40.0)))
    m.observe_decision(REF, _decision(5, _rec("waiting", None)))
    get = m.registry.get_sample_value
    assert get("llm_autoscaler_desired_replicas", LABELS) == 5.0
    # the read failed: no value (missing is not zero); a signal no longer scaled on: gone
    assert get("llm_autoscaler_metric_value", {**LABELS, "signal": "waiting"}) is None
    assert get("llm_autoscaler_forecast_value", {**LABELS, "signal": "waiting"}) is None
    assert get("llm_autoscaler_metric_value", {**LABELS, "signal": "running"}) is None
    assert get("llm_autoscaler_forecast", {**LABELS, "signal": "running"}) == 50.0
    assert get("llm_autoscaler_decisions_total", {**LABELS, "reason": "steady"}) == 2.0


def test_the_last_recommendation_of_a_signal_sets_its_series() -> None:
    m = ControllerMetrics()
    m.observe_decision(REF, _decision(3, _rec("running", 40.0), _rec("running", None)))
    get = m.registry.get_sample_value
    assert get("llm_autoscaler_metric_value", {**LABELS, "signal": "running"}) is None
    m.observe_decision(REF, _decision(3, _rec("running", None), _rec("running", 41.0)))
    assert get("llm_autoscaler_metric_value", {**LABELS, "signal": "running"}) == 41.0


def test_a_forgotten_target_has_no_gauges_but_keeps_its_decision_count() -> None:
    m = ControllerMetrics()
    m.observe_decision(REF, _decision(3, _rec("waiting", 9.0, 12.0)))
    m.forget(REF)
    get = m.registry.get_sample_value
    for name in ("llm_autoscaler_desired_replicas", "llm_autoscaler_forecast_horizon_seconds"):
        assert get(name, LABELS) is None
    assert get("llm_autoscaler_metric_value", {**LABELS, "signal": "waiting"}) is None
    assert get("llm_autoscaler_decisions_total", {**LABELS, "reason": "steady"}) == 1.0


def test_decision_families_are_registered_before_any_decision() -> None:
    names = {f.name for f in ControllerMetrics().registry.collect()}
    assert {"llm_autoscaler_decisions", "llm_autoscaler_desired_replicas"} <= names
