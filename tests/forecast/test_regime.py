"""The load regime learned from a target's own history (`forecast.regime`, issue 36)."""

from __future__ import annotations

import math
import random

import pytest

from autoscaler.forecast.planner import Planner, PlannerConfig
from autoscaler.forecast.regime import RegimeConfig, RegimeEstimator
from autoscaler.policy.regime import describe


def _feed(est: RegimeEstimator, seconds: int, level: float, noise: float, t0: int = 0) -> None:
    rng = random.Random(7)
    for t in range(t0, t0 + seconds):
        burst = 3.0 if t % 240 < 20 else 0.0  # 20 s bursts every 4 min, far above the level
        est.observe(float(t), max(0.0, level + noise * rng.gauss(0.0, 1.0) + burst))


def test_a_constant_level_with_noise_and_short_bursts_is_steady_after_one_window() -> None:
    est = RegimeEstimator()
    _feed(est, 1700, level=3.0, noise=0.8)
    assert not est.steady  # less history than the window: following
    _feed(est, 1000, level=3.0, noise=0.8, t0=1700)
    assert est.steady
    numbers = est.numbers()
    assert numbers["regime.steady"] == 1.0
    assert numbers["regime.scale_down_window_s"] == RegimeConfig().hold_window_s
    assert numbers["regime.level_range_replicas"] < 1.0


def test_a_level_that_moves_more_than_one_replica_is_followed() -> None:
    est = RegimeEstimator()
    for t in range(4000):  # a daily ramp, compressed: 2 -> 8 replicas
        est.observe(float(t), 5.0 - 3.0 * math.cos(2 * math.pi * t / 8000.0))
    assert not est.steady
    assert "regime.scale_down_window_s" not in est.numbers()
    assert est.numbers()["regime.level_range_replicas"] > 1.0


def _spike(t: int) -> float:
    """A 3-replica burst of 10 s every 4 minutes."""
    return 3.0 if t % 240 < 10 else 0.0


def test_a_flat_level_without_bursts_is_followed() -> None:
    est = RegimeEstimator()
    for t in range(4000):
        est.observe(float(t), 1.5 + 0.3 * ((t * 7919) % 11) / 11)  # noise < 2 replicas
    assert not est.steady
    assert est.numbers()["regime.level_range_replicas"] < 1.0


def test_leaving_steady_takes_a_wider_range_than_entering_it() -> None:
    cfg = RegimeConfig(window_s=600.0, level_tau_s=60.0, burst_replicas=0.0)  # no burst gate
    held = RegimeEstimator(cfg)
    for t in range(1200):
        held.observe(float(t), 4.0)
    assert held.steady
    fresh = RegimeEstimator(cfg)
    for t in range(1200, 2400):  # both see a drift of 1.2 replicas per window
        value = 4.0 + 0.002 * (t - 1200)
        held.observe(float(t), value)
        fresh.observe(float(t), value)
        assert held.steady  # 1.2 <= 1.5: it stays
    assert not fresh.steady  # 1.2 > 1.0: it never enters


def test_bad_demand_is_an_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="demand_replicas"):
        RegimeEstimator().observe(0.0, -1.0)
    with pytest.raises(ValueError, match="leave_range_replicas"):
        RegimeConfig(steady_range_replicas=2.0, leave_range_replicas=1.0)


def test_the_planner_judges_the_demand_at_the_policy_s_per_replica_targets() -> None:
    planner = Planner(PlannerConfig(capacity_fallback={"running": 32.0, "waiting": 4.0}))
    for t in range(2000):  # 2 replicas of running, bursts to 6 for 10 s every 5 min
        running = 192.0 if t % 300 < 10 else 64.0
        planner.update(float(t), {"running": running, "waiting": 1.0})
    forecast = planner.forecast(2000.0)
    assert forecast.regime["regime.steady"] == 1.0
    assert forecast.regime["regime.level_replicas"] == pytest.approx(68.3 / 32.0, rel=0.05)
    assert forecast.regime["regime.burst_replicas"] > 3.0
    # its 10 s bursts are shorter than the 90 s prior cold start: the fleet regime too, at
    # the 95th percentile of the demand (the level: bursts are 3% of the time)
    assert forecast.regime["regime.fleet"] == 1.0
    assert forecast.regime["regime.fleet_replicas"] == 2.0
    text = describe(dict(forecast.regime))
    assert text is not None and text.startswith("fleet:")
    steady_only = {**forecast.regime, "regime.fleet": 0.0}
    text = describe(steady_only)
    assert text is not None and text.startswith("steady:")
    assert describe({}) is None


def test_pods_ready_at_once_leave_the_planner_deciding() -> None:
    planner = Planner(PlannerConfig(capacity_fallback={"running": 32.0, "waiting": 4.0}))
    for t in range(50):  # pods Ready the moment they start: a learned cold start of 0 s
        planner.observe_pod_ready(float(t), 0.0)
    assert planner.horizon_s() == 0.0
    for t in range(120):
        planner.update(float(t), {"running": 64.0, "waiting": 1.0})
    assert planner.forecast(120.0).regime["regime.level_replicas"] > 0.0


def _ramp_with_bursts(est: RegimeEstimator, burst_s: int, seconds: int = 4000) -> None:
    """A level drifting 2 -> 5 replicas (followed, never steady) with 5-replica bursts
    of ``burst_s`` every 20 minutes; the cold start is 60 s throughout."""
    for t in range(seconds):
        level = 3.5 - 1.5 * math.cos(2 * math.pi * t / 8000.0)
        burst = 5.0 if t % 1200 < burst_s else 0.0
        est.observe(float(t), level + burst, cold_start_s=60.0)


def test_bursts_that_outlast_the_cold_start_release_one_cold_start_after_they_end() -> None:
    est = RegimeEstimator(RegimeConfig(release_long_bursts=True))
    _ramp_with_bursts(est, burst_s=300)
    numbers = est.numbers()
    assert not est.steady
    assert numbers["regime.burst_length_s"] > 60.0
    assert numbers["regime.release_window_s"] == 60.0
    assert "regime.scale_down_window_s" not in numbers


def test_bursts_shorter_than_the_cold_start_keep_the_policy_s_window() -> None:
    est = RegimeEstimator(RegimeConfig(release_long_bursts=True))
    _ramp_with_bursts(est, burst_s=20)
    numbers = est.numbers()
    assert numbers["regime.burst_length_s"] < 60.0
    assert "regime.release_window_s" not in numbers


def test_releasing_after_long_bursts_is_off_by_default() -> None:
    est = RegimeEstimator()
    _ramp_with_bursts(est, burst_s=300)
    numbers = est.numbers()
    assert "regime.release_window_s" not in numbers
    assert numbers["regime.burst_length_s"] > 60.0  # measured (the fleet regime reads it)


def test_a_bad_cold_start_is_an_error_naming_the_field() -> None:
    with pytest.raises(ValueError, match="cold_start_s"):
        RegimeEstimator().observe(0.0, 1.0, cold_start_s=0.0)


def test_the_status_sentence_names_long_bursts_and_the_release() -> None:
    est = RegimeEstimator(RegimeConfig(release_long_bursts=True))
    _ramp_with_bursts(est, burst_s=300)
    text = describe(est.numbers())
    assert text is not None and text.startswith("following, long bursts:")
    assert "60 s cold start" in text and "released 60 s after it" in text


def _flat_with_short_bursts(
    est: RegimeEstimator, seconds: int, t0: int = 0, level: float = 1.0, cold_s: float = 90.0
) -> None:
    """A flat level with 20 s bursts 3 replicas above it every 4 minutes (from t = 120 s)."""
    rng = random.Random(11)
    for t in range(t0, t0 + seconds):
        burst = 3.0 if (t + 120) % 240 < 20 else 0.0
        est.observe(float(t), max(0.0, level + 0.2 * rng.gauss(0.0, 1.0) + burst), cold_s)


def test_a_flat_level_with_bursts_shorter_than_the_cold_start_holds_a_learned_fleet() -> None:
    est = RegimeEstimator()
    _flat_with_short_bursts(est, 590)
    assert not est.fleet  # under ten minutes of history: following
    assert "regime.fleet_replicas" not in est.numbers()
    _flat_with_short_bursts(est, 200, t0=590)
    assert est.fleet and not est.steady  # learned long before the 30-minute steady regime
    numbers = est.numbers()
    assert numbers["regime.fleet"] == 1.0
    # ~8% of the time 3 replicas above a level of 1: the 95th percentile is ~4 replicas
    assert numbers["regime.fleet_replicas"] == 5.0 or numbers["regime.fleet_replicas"] == 4.0
    assert numbers["regime.burst_length_s"] < numbers["regime.cold_start_s"]
    text = describe(numbers)
    assert text is not None and text.startswith("fleet:")
    assert f"learned fleet of {numbers['regime.fleet_replicas']:.0f} replicas" in text


def test_bursts_that_outlast_the_cold_start_are_not_held_as_a_fleet() -> None:
    est = RegimeEstimator()
    _flat_with_short_bursts(est, 1500, cold_s=10.0)  # bursts of 20 s, Ready in 10 s
    assert not est.fleet
    assert est.numbers()["regime.fleet"] == 0.0


def test_a_level_that_moves_leaves_the_fleet_regime() -> None:
    est = RegimeEstimator()
    _flat_with_short_bursts(est, 900)
    assert est.fleet
    for t in range(900, 2700):  # the level climbs 1 -> 7 replicas over 30 minutes
        est.observe(float(t), 1.0 + 6.0 * (t - 900) / 1800.0 + (3.0 if t % 240 < 20 else 0.0))
    assert not est.fleet
    assert "regime.fleet_replicas" not in est.numbers()


def test_the_fleet_rises_at_once_and_falls_only_past_the_release_margin() -> None:
    cfg = RegimeConfig(
        fleet_window_s=600.0, fleet_min_history_s=300.0, burst_replicas=0.0, excursion_replicas=0.3
    )
    est = RegimeEstimator(cfg)
    for t in range(900):  # demand 2.0 most of the time, 3.0 for 10% of it
        est.observe(float(t), 3.0 if t % 100 < 10 else 2.0, 90.0)
    assert est.floor == 3  # the 95th percentile: 3.0
    for t in range(900, 1500):  # bursts reach 2.6 only: 3 still asked for, nothing to release
        est.observe(float(t), 2.6 if t % 100 < 10 else 2.0, 90.0)
    assert est.floor == 3
    for t in range(1500, 2100):  # 1.6 asks for 2, but is not 0.5 under 2: still 3
        est.observe(float(t), 1.6, 90.0)
    assert est.floor == 3
    for t in range(2100, 2700):  # 1.4 <= 2 - 0.5: one replica released
        est.observe(float(t), 1.4, 90.0)
    assert est.floor == 2
    for t in range(2700, 2760):  # a quantile above the fleet raises it at once
        est.observe(float(t), 4.5, 90.0)
    assert est.floor == 5


def test_fleet_settings_out_of_range_are_errors_naming_the_field() -> None:
    with pytest.raises(ValueError, match="fleet_quantile"):
        RegimeConfig(fleet_quantile=1.5)
    with pytest.raises(ValueError, match="fleet_min_bursts"):
        RegimeConfig(fleet_min_bursts=0)
    with pytest.raises(ValueError, match="fleet_window_s"):
        RegimeConfig(fleet_window_s=0.0)
    off = RegimeEstimator(RegimeConfig(fleet_quantile=None))
    _flat_with_short_bursts(off, 1500)
    assert not off.fleet
