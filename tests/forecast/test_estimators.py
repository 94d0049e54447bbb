"""Cold-start and capacity estimators: prior until learned, then robust quantiles."""

from __future__ import annotations

import numpy as np
import pytest

from autoscaler.forecast.capacity import CapacityEstimator
from autoscaler.forecast.coldstart import ColdStartEstimator


def test_cold_start_uses_the_prior_until_enough_pods_were_seen() -> None:
    est = ColdStartEstimator(prior_s=90.0, min_pods_to_learn=3)
    est = est.observe(10.0, 300.0).observe(20.0, 320.0)
    assert not est.learned
    assert est.estimate_s == 90.0
    est = est.observe(30.0, 310.0)
    assert est.learned
    assert est.estimate_s == pytest.approx(np.quantile([300.0, 320.0, 310.0], 0.9))


def test_cold_start_is_a_high_quantile_of_recent_samples() -> None:
    rng = np.random.default_rng(0)
    samples = rng.lognormal(np.log(60.0), 0.4, size=200)
    est = ColdStartEstimator(window=50)
    for i, s in enumerate(samples):
        est = est.observe(float(i), float(s))
    recent = samples[-50:]
    assert est.estimate_s == pytest.approx(np.quantile(recent, 0.9))
    assert est.estimate_s > np.median(recent)


def test_cold_start_caps_a_stuck_pod() -> None:
    est = ColdStartEstimator(min_pods_to_learn=1, max_s=1200.0, quantile=1.0)
    assert est.observe(0.0, 50_000.0).estimate_s == 1200.0


def test_policy_horizon_overrides_the_learned_cold_start() -> None:
    est = ColdStartEstimator(min_pods_to_learn=1).observe(0.0, 300.0)
    assert est.horizon_s(None) == 300.0
    assert est.horizon_s(45.0) == 45.0


def test_cold_start_rejects_bad_durations() -> None:
    with pytest.raises(ValueError, match=r"duration_s: value -1\.0 must be >= 0"):
        ColdStartEstimator().observe(0.0, -1.0)


def _tick(
    est: CapacityEstimator, t: float, replicas: int, tok: float, ttft: float
) -> CapacityEstimator:
    return est.observe(t, replicas, {"generation_tokens_per_s": tok, "ttft_p95_s": ttft})


def test_capacity_falls_back_to_the_configured_threshold_until_learned() -> None:
    est = CapacityEstimator(fallback={"generation_tokens_per_s": 1000.0}, min_samples=10)
    for i in range(9):
        est = _tick(est, float(i), 2, 2 * 1800.0, 0.2)
    assert est.capacity("generation_tokens_per_s") == 1000.0
    assert not est.learned("generation_tokens_per_s")


def test_capacity_learns_what_replicas_sustain_under_the_slo() -> None:
    rng = np.random.default_rng(1)
    est = CapacityEstimator(fallback={"generation_tokens_per_s": 1000.0}, min_samples=10)
    per_replica = rng.uniform(1500.0, 2000.0, size=100)
    for i, x in enumerate(per_replica):
        est = _tick(est, float(i), 4, 4 * float(x), 0.3)
    cap = est.capacity("generation_tokens_per_s")
    assert cap == pytest.approx(np.quantile(per_replica, 0.9))
    assert est.learned("generation_tokens_per_s")


def test_capacity_is_not_learned_down_from_a_lightly_loaded_fleet() -> None:
    est = CapacityEstimator(fallback={"generation_tokens_per_s": 1000.0}, min_samples=10)
    for i in range(100):
        est = _tick(est, float(i), 8, 8 * 50.0, 0.05)  # 5 % load, fast responses
    assert est.capacity("generation_tokens_per_s") == 1000.0


def test_slo_violations_lower_the_capacity_below_the_threshold() -> None:
    est = CapacityEstimator(fallback={"generation_tokens_per_s": 1000.0}, min_samples=10)
    for i in range(50):
        est = _tick(est, float(i), 2, 2 * 700.0, 1.5)  # SLO 0.5 s missed at 700 tok/s
    assert est.capacity("generation_tokens_per_s") == pytest.approx(700.0)


def test_latency_without_a_queue_is_not_capacity_evidence() -> None:
    # One replica, 1500 prompt tokens/s, TTFT over the SLO but nothing waiting: long
    # prompts, not load. Neither a violation nor a near-SLO sustained sample.
    est = CapacityEstimator(min_samples=5)
    for i in range(20):
        signals = {"prompt_tokens_per_s": 1500.0, "ttft_p95_s": 0.7, "waiting": 0.0}
        est = est.observe(float(i), 1, signals)
        signals = {"prompt_tokens_per_s": 1200.0, "ttft_p95_s": 0.4, "waiting": 0.0}
        est = est.observe(float(i) + 0.5, 1, signals)
    assert est.capacity("prompt_tokens_per_s") is None
    # the same ticks with requests queued are evidence
    for i in range(20):
        signals = {"prompt_tokens_per_s": 9000.0, "ttft_p95_s": 0.4, "waiting": 3.0}
        est = est.observe(100.0 + i, 1, signals)
    assert est.capacity("prompt_tokens_per_s") == pytest.approx(9000.0)


def test_capacity_ignores_ticks_without_a_latency_reading() -> None:
    est = CapacityEstimator(fallback={"running": 96.0}, min_samples=1)
    after = est.observe(0.0, 2, {"running": 500.0})
    assert after is est
    assert after.capacity("running") == 96.0


def test_capacity_rejects_a_non_positive_threshold() -> None:
    with pytest.raises(ValueError, match=r"fallback\[running\]: value 0"):
        CapacityEstimator(fallback={"running": 0.0})
