"""The per-tick facade: forecasts for the decision core, horizons, warm pool, numbers."""

from __future__ import annotations

import pytest

from autoscaler.domain import Forecast
from autoscaler.forecast.planner import Planner, PlannerConfig
from autoscaler.policy.schema import Prediction


def _feed(planner: Planner, t0: float, t1: float, rate: float, running_per_rate: float) -> None:
    t = t0
    while t < t1:
        planner.update(
            t,
            {
                "arrival_rate_per_s": rate,
                "running": rate * running_per_rate,
                "kv_cache_usage": 0.01 * rate,
            },
        )
        t += 1.0


def test_forecast_is_a_domain_forecast_at_the_cold_start_horizon() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", cold_start_prior_s=120.0))
    _feed(planner, 0.0, 300.0, 10.0, 4.0)
    fc = planner.forecast(299.0)
    assert isinstance(fc, Forecast)
    assert fc.horizon_s == 120.0
    assert fc.model == "ewma"
    assert fc.signals["arrival_rate_per_s"] == pytest.approx(10.0)
    assert fc.signals["running"] == pytest.approx(40.0)
    assert fc.signals["kv_cache_usage"] == pytest.approx(0.1)


def test_learned_cold_start_becomes_the_horizon_unless_the_policy_fixes_it() -> None:
    learned = Planner(PlannerConfig(cold_start_prior_s=90.0, min_pods_to_learn=2))
    fixed = Planner(PlannerConfig(horizon_s=30.0, min_pods_to_learn=2))
    for p in (learned, fixed):
        p.observe_pod_ready(10.0, 400.0)
        p.observe_pod_ready(20.0, 400.0)
    assert learned.horizon_s() == pytest.approx(400.0)
    assert fixed.horizon_s() == 30.0


def test_load_signals_scale_with_predicted_demand() -> None:
    planner = Planner(PlannerConfig(forecaster="holt", horizon_s=300.0))
    t = 0.0
    while t < 1800.0:  # rate ramps 5 -> 23 req/s; running = 4 s x rate
        rate = 5.0 + 0.01 * t
        planner.update(t, {"arrival_rate_per_s": rate, "running": 4.0 * rate})
        t += 1.0
    fc = planner.forecast(t - 1.0)
    ratio = fc.signals["arrival_rate_per_s"] / planner.numbers()["forecast.arrival_rate_per_s.now"]
    assert ratio > 1.05  # a rising trend is forecast to keep rising
    # The latest reading is scaled (not the smoothed level, which lags below it).
    latest = 4.0 * (5.0 + 0.01 * (t - 1.0))
    assert fc.signals["running"] == pytest.approx(latest * ratio)
    assert fc.signals["running"] > latest


def test_smoothed_load_base_scales_the_smoothed_level() -> None:
    planner = Planner(PlannerConfig(forecaster="holt", horizon_s=300.0, load_base="smoothed"))
    t = 0.0
    while t < 1800.0:
        rate = 5.0 + 0.01 * t
        planner.update(t, {"arrival_rate_per_s": rate, "running": 4.0 * rate})
        t += 1.0
    fc = planner.forecast(t - 1.0)
    ratio = fc.signals["arrival_rate_per_s"] / planner.numbers()["forecast.arrival_rate_per_s.now"]
    assert fc.signals["running"] == pytest.approx(planner.numbers()["forecast.running.now"] * ratio)


def test_idle_target_uses_learned_load_per_request() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", horizon_s=60.0))
    _feed(planner, 0.0, 600.0, 10.0, 4.0)  # learns running = 4 x rate
    assert planner.intensity_of("running") == pytest.approx(4.0)
    _feed(planner, 600.0, 1000.0, 0.0, 4.0)  # idle: ratio to ~0 is undefined
    fc = planner.forecast(999.0)
    rate = fc.signals["arrival_rate_per_s"]
    assert fc.signals["running"] == pytest.approx(4.0 * rate)


def test_missing_signals_are_omitted_not_zero() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", horizon_s=60.0))
    _feed(planner, 0.0, 300.0, 10.0, 4.0)
    for t in range(300, 400):  # scrapes fail: no signals at all
        planner.update(float(t), {})
    fc = planner.forecast(399.0)
    assert fc.signals["arrival_rate_per_s"] == pytest.approx(10.0)
    assert "waiting" not in fc.signals
    assert "prompt_tokens_per_s" not in fc.signals


def test_no_data_gives_an_empty_forecast() -> None:
    fc = Planner().forecast(0.0)
    assert dict(fc.signals) == {} and fc.model == "none"


def test_warm_pool_covers_forecast_demand_beyond_current_replicas() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", horizon_s=60.0))
    _feed(planner, 0.0, 300.0, 10.0, 4.0)  # 40 running
    caps = {"running": 8.0}  # 40 / 8 = 5 replicas needed
    assert planner.warm_pool_size(299.0, 300.0, replicas_now=3, per_replica_capacity=caps) == 2
    assert planner.warm_pool_size(299.0, 300.0, replicas_now=6, per_replica_capacity=caps) == 0
    assert planner.numbers()["warm_pool.needed_replicas"] == 5.0


def test_warm_pool_holds_a_forecast_peak_for_the_lead_time() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", horizon_s=60.0))
    caps = {"running": 8.0}
    _feed(planner, 0.0, 300.0, 10.0, 4.0)  # 40 running: 5 replicas
    assert planner.warm_pool_size(299.0, 120.0, replicas_now=3, per_replica_capacity=caps) == 2
    _feed(planner, 300.0, 400.0, 2.0, 4.0)  # demand drops to 8 running: 1 replica
    # within the lead time the pool keeps the earlier peak (no pause-pod churn)
    assert planner.warm_pool_size(399.0, 120.0, replicas_now=3, per_replica_capacity=caps) == 2
    assert planner.numbers()["warm_pool.needed_replicas"] < 5
    assert planner.numbers()["warm_pool.held_replicas"] == 5
    _feed(planner, 400.0, 500.0, 2.0, 4.0)
    assert planner.warm_pool_size(499.0, 120.0, replicas_now=3, per_replica_capacity=caps) == 0


def test_warm_pool_uses_learned_capacity_by_default() -> None:
    planner = Planner(
        PlannerConfig(forecaster="ewma", horizon_s=60.0, capacity_fallback={"running": 20.0})
    )
    _feed(planner, 0.0, 300.0, 10.0, 4.0)
    assert planner.warm_pool_size(299.0, 300.0, replicas_now=1) == 1  # 40 / 20 = 2


def test_forecast_carries_only_capacities_learned_from_evidence() -> None:
    planner = Planner(
        PlannerConfig(forecaster="ewma", horizon_s=60.0, capacity_fallback={"running": 20.0})
    )
    assert dict(planner.forecast(0.0).capacity_per_replica) == {}  # threshold: not learned
    # 40 s of 2 replicas at 6000 prompt tokens/s each with TTFT p95 near the SLO (0.4 s)
    for k in range(40):
        signals = {"prompt_tokens_per_s": 12_000.0, "ttft_p95_s": 0.4, "running": 30.0}
        planner.update(float(k), signals, ready_replicas=2)
    caps = planner.forecast(40.0).capacity_per_replica
    assert caps["prompt_tokens_per_s"] == 6000.0
    assert planner.learned_capacities() == dict(caps)


def test_numbers_expose_every_forecast_input() -> None:
    planner = Planner(PlannerConfig(forecaster="auto", cold_start_prior_s=30.0))
    _feed(planner, 0.0, 600.0, 10.0, 4.0)
    planner.forecast(599.0)
    n = planner.numbers()
    for key in (
        "forecast.horizon_s",
        "forecast.cold_start_s",
        "forecast.cold_start_learned",
        "forecast.arrival_rate_per_s.now",
        "forecast.arrival_rate_per_s.predicted",
        "forecast.arrival_rate_per_s.wape.ewma",
        "forecast.arrival_rate_per_s.wape.holt",
        "forecast.running.predicted",
    ):
        assert key in n, key


def test_config_from_the_policy_prediction_block() -> None:
    pred = Prediction(forecaster="holt", horizon_seconds=45.0, min_pods_to_learn=5)
    cfg = PlannerConfig.from_prediction(pred)
    assert (cfg.forecaster, cfg.horizon_s, cfg.min_pods_to_learn) == ("holt", 45.0, 5)


def test_bad_signal_values_name_the_signal() -> None:
    with pytest.raises(ValueError, match="running: value -3.0 must be >= 0"):
        Planner().update(0.0, {"running": -3.0})
