"""Forecasters on synthetic series with known answers: level, trend, step, spike, gaps."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.forecast.models import Ewma, Holt, Seasonal
from autoscaler.forecast.robust import Robustness, decay
from tests.forecast.series import constant, feed, linear

MODELS = [Ewma(), Holt(), Seasonal(period_s=3600.0, bins=12)]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_constant_series_forecasts_the_level(model: Ewma | Holt | Seasonal) -> None:
    m = feed(model, constant(12.5, 0.0, 1800.0, noise=0.5))
    for horizon in (60.0, 180.0, 600.0):
        p = m.predict(1799.0, horizon)
        assert p is not None
        assert p == pytest.approx(12.5, rel=0.05)


def test_holt_trend_converges_to_the_slope() -> None:
    slope = 0.05
    holt = Holt(damping_s=None)
    samples = linear(10.0, slope, 8 * holt.trend_tau_s, dt=2.0)
    m = feed(holt, samples)
    assert m.trend_per_s == pytest.approx(slope, rel=0.01)
    t = samples[-1][0]
    assert m.predict(t, 600.0) == pytest.approx(10.0 + slope * (t + 600.0), rel=0.01)


def test_holt_trend_is_learned_through_noise() -> None:
    holt = Holt(damping_s=None)
    m = feed(holt, linear(10.0, 0.02, 8 * holt.trend_tau_s, noise=1.0, seed=3))
    assert m.trend_per_s == pytest.approx(0.02, rel=0.25)


def test_damped_trend_extrapolates_less_than_linear() -> None:
    samples = linear(10.0, 0.05, 3000.0)
    damped = feed(Holt(damping_s=300.0), samples)
    linear_m = feed(Holt(damping_s=None), samples)
    level = damped.predict(2999.0, 0.0)
    d600, l600 = damped.predict(2999.0, 600.0), linear_m.predict(2999.0, 600.0)
    assert level is not None and d600 is not None and l600 is not None
    assert level < d600 < l600


def test_ewma_lags_a_trend_by_about_its_time_constant() -> None:
    """A flat forecaster on a ramp lags by slope x tau: the reason Holt exists."""
    slope, tau = 0.05, 60.0
    m = feed(Ewma(tau_s=tau), linear(10.0, slope, 3000.0))
    assert m.level is not None
    lag = (10.0 + slope * 2999.0 - m.level) / slope
    assert lag == pytest.approx(tau, rel=0.05)


@pytest.mark.parametrize("model", [Ewma(), Holt()], ids=lambda m: m.name)
def test_step_change_is_adopted_within_confirm_plus_three_time_constants(
    model: Ewma | Holt,
) -> None:
    tau = model.tau_s if isinstance(model, Ewma) else model.level_tau_s
    deadline = model.robust.confirm_s + 3 * tau
    before = constant(10.0, 0.0, 600.0, noise=0.3, seed=1)
    after = constant(20.0, 600.0, 600.0 + deadline + 1, noise=0.3, seed=2)
    m = feed(model, before + after)
    assert m.predict(after[-1][0], 0.0) == pytest.approx(20.0, rel=0.1)


@pytest.mark.parametrize("model", [Ewma(), Holt()], ids=lambda m: m.name)
def test_single_spike_does_not_drag_the_level(model: Ewma | Holt) -> None:
    base = constant(10.0, 0.0, 600.0, noise=0.3, seed=4)
    m = feed(model, base)
    before = m.predict(599.0, 0.0)
    assert before is not None and m.filt is not None and m.filt.scale is not None
    m = m.update(600.0, 1000.0)  # 100x spike in one sample
    after = m.predict(600.0, 0.0)
    assert after is not None
    tau = model.tau_s if isinstance(model, Ewma) else model.level_tau_s
    band = model.robust.huber_k * max(m.filt.scale, model.robust.min_scale_rel * before)
    # Influence bounded by the clipped innovation (plus one sample of trend for Holt).
    assert after - before <= decay(1.0, tau) * band * 1.5 + 0.05
    m = feed(m, constant(10.0, 601.0, 660.0, noise=0.3, seed=5))
    later = m.predict(659.0, 180.0)
    assert later == pytest.approx(10.0, rel=0.03)


def test_a_burst_shorter_than_confirmation_is_clipped_a_longer_one_adopted() -> None:
    robust = Robustness(confirm_s=15.0)
    base = constant(10.0, 0.0, 600.0, noise=0.3, seed=6)
    short = feed(Ewma(robust=robust), base + constant(50.0, 600.0, 610.0))
    long = feed(Ewma(robust=robust), base + constant(50.0, 600.0, 660.0))
    assert short.level is not None and long.level is not None
    assert short.level < 12.0
    assert long.level > 30.0


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_missing_samples_are_skipped_not_read_as_zero(model: Ewma | Holt | Seasonal) -> None:
    samples = constant(10.0, 0.0, 600.0, noise=0.2)
    m = feed(model, samples)
    # 300 s without samples (less than max_gap_s): the level holds, no decay to zero.
    p = m.predict(900.0, 60.0)
    assert p == pytest.approx(10.0, rel=0.05)
    m = m.update(900.0, 10.0)
    assert m.predict(900.0, 0.0) == pytest.approx(10.0, rel=0.05)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_stale_state_reports_no_forecast_after_a_long_gap(model: Ewma | Holt | Seasonal) -> None:
    m = feed(model, constant(10.0, 0.0, 600.0))
    gap = m.max_gap_s if not isinstance(m, Seasonal) else m.base.max_gap_s
    assert m.predict(600.0 + gap + 1.0, 60.0) is None


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_state_restarts_from_the_first_sample_after_a_long_gap(
    model: Ewma | Holt | Seasonal,
) -> None:
    m = feed(model, linear(10.0, 0.02, 600.0))
    t = 600.0 + 2 * (m.max_gap_s if not isinstance(m, Seasonal) else m.base.max_gap_s)
    m = m.update(t, 3.0)
    assert m.predict(t, 0.0) == pytest.approx(3.0)
    assert m.predict(t, 600.0) == pytest.approx(3.0)  # no stale trend across the gap


def test_sample_after_a_pause_longer_than_tau_is_not_clipped() -> None:
    m = feed(Ewma(tau_s=60.0), constant(10.0, 0.0, 600.0))
    m = m.update(600.0 + 120.0, 30.0)  # 2 tau later: the old level is stale
    assert m.level is not None
    assert m.level == pytest.approx(10.0 + decay(121.0, 60.0) * 20.0, rel=1e-6)


def test_holt_forecast_is_never_negative_on_a_falling_series() -> None:
    m = feed(Holt(damping_s=None), linear(100.0, -0.1, 900.0))
    p = m.predict(899.0, 3600.0)
    assert p is not None and p >= 0.0


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(min_value=0.01, max_value=2000.0),
            st.floats(min_value=0.0, max_value=1e6),
        ),
        min_size=1,
        max_size=60,
    ),
    st.floats(min_value=0.0, max_value=3600.0),
)
def test_forecasts_are_never_negative_or_nan(
    steps: list[tuple[float, float]], horizon_s: float
) -> None:
    models = [Ewma(), Holt(damping_s=None), Seasonal(period_s=600.0, bins=6)]
    t = 0.0
    for dt, x in steps:
        t += dt
        models = [m.update(t, x) for m in models]
        for m in models:
            p = m.predict(t, horizon_s)
            assert p is not None and p >= 0.0 and math.isfinite(p)


def test_repeated_tick_is_ignored() -> None:
    m = Ewma().update(1.0, 5.0)
    assert m.update(1.0, 500.0) is m


@pytest.mark.parametrize(
    ("t", "value", "field"),
    [(float("nan"), 1.0, "t"), (2.0, float("inf"), "value"), (2.0, -1.0, "value")],
)
def test_bad_samples_raise_errors_naming_field_and_value(
    t: float, value: float, field: str
) -> None:
    with pytest.raises(ValueError, match=f"^{field}: value"):
        Holt().update(1.0, 1.0).update(t, value)


def test_time_going_backwards_is_an_error() -> None:
    with pytest.raises(ValueError, match=r"t: value 1\.0 must be >= the previous sample time 5\.0"):
        Ewma().update(5.0, 1.0).update(1.0, 1.0)


def test_bad_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match="tau_s: value -1"):
        Ewma(tau_s=-1)
    with pytest.raises(ValueError, match="bins: value 1"):
        Seasonal(bins=1)
