"""Per-decision /metrics series come from the latest decision of each target, built when
/metrics is scraped (issue 16: no per-tick gauge work for 1,000 targets)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import httpx
from prometheus_client.metrics_core import Metric

from autoscaler.api.app import create_app
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, MetricRecommendation, Reason, TargetRef
from autoscaler.store.file import FilePolicyStore

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


class _Gate:
    """A collector that blocks its scrape until the event loop opens the gate."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.opened_in_time: bool | None = None
        self.thread: threading.Thread | None = None

    def collect(self) -> Iterator[Metric]:
        self.thread = threading.current_thread()
        self.entered.set()
        self.opened_in_time = self.gate.wait(10)
        return iter(())


async def test_metrics_page_is_rendered_off_the_event_loop(store: FilePolicyStore) -> None:
    """A slow /metrics render (1.3-2 MB at 1,000 targets) must not stall the loop: the
    collector waits for a gate only the event loop opens while the scrape is running."""
    m = ControllerMetrics()
    m.observe_decision(REF, _decision(3, _rec("waiting", 9.0)))
    gate = _Gate()
    m.registry.register(gate)  # type: ignore[arg-type]  # a duck-typed collector
    app = create_app(ControllerState(), store, metrics=m)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        scrape = asyncio.ensure_future(c.get("/metrics"))
        assert await asyncio.to_thread(gate.entered.wait, 10), "the render never started"
        gate.gate.set()  # only possible while the render runs beside the loop
        resp = await scrape
    assert gate.opened_in_time is True
    assert gate.thread is not threading.main_thread()
    assert resp.status_code == 200
    assert 'llm_autoscaler_desired_replicas{name="chat",namespace="llm"} 3.0' in resp.text
