"""Seasonal beats Holt on a periodic series; auto picks the right model per series."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from autoscaler.forecast.auto import Auto
from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from tests.forecast.series import constant, feed, linear, periodic, periodic_value

PERIOD_S = 3600.0
HORIZON_S = 600.0


def _mean_abs_error(model: Forecaster, t_from: float, t_to: float) -> float:
    errors: list[float] = []
    for t, x in periodic(50.0, 40.0, PERIOD_S, t_to):
        model = model.update(t, x)
        if t >= t_from:
            p = model.predict(t, HORIZON_S)
            assert p is not None
            errors.append(abs(p - periodic_value(50.0, 40.0, PERIOD_S, t + HORIZON_S)))
    return float(np.mean(errors))


def test_seasonal_beats_holt_on_a_periodic_series() -> None:
    seasonal = _mean_abs_error(Seasonal(period_s=PERIOD_S, bins=24), 3 * PERIOD_S, 4 * PERIOD_S)
    holt = _mean_abs_error(Holt(), 3 * PERIOD_S, 4 * PERIOD_S)
    assert seasonal < 0.5 * holt
    assert seasonal < 0.1 * 40.0  # within 10 % of the amplitude


def test_seasonal_is_holt_until_the_profile_has_history() -> None:
    samples = periodic(50.0, 40.0, PERIOD_S, 0.5 * PERIOD_S)
    seasonal = feed(Seasonal(period_s=PERIOD_S, bins=24), samples)
    holt = feed(Holt(), samples)
    t = samples[-1][0]
    assert seasonal.predict(t, HORIZON_S) == pytest.approx(holt.predict(t, HORIZON_S))


def test_seasonal_profile_ignores_a_spike() -> None:
    samples = periodic(50.0, 0.0, PERIOD_S, 2 * PERIOD_S)
    spiked = [(t, 5000.0 if i == 100 else x) for i, (t, x) in enumerate(samples)]
    m = feed(Seasonal(period_s=PERIOD_S, bins=24), spiked)
    assert max(m.profile) == pytest.approx(50.0, rel=0.02)


def _auto(seasonal_period_s: float = 86_400.0) -> Auto:
    return Auto(
        candidates=(Ewma(), Holt(), Seasonal(period_s=seasonal_period_s, bins=24)),
        horizon_s=HORIZON_S,
    )


def test_auto_picks_seasonal_on_a_periodic_series() -> None:
    m = feed(_auto(PERIOD_S), periodic(50.0, 40.0, PERIOD_S, 4 * PERIOD_S))
    assert m.model.name == "seasonal"
    errors = m.errors()
    assert errors["seasonal"] < errors["holt"] and errors["seasonal"] < errors["ewma"]


def test_auto_picks_holt_on_a_trend() -> None:
    m = feed(_auto(), linear(5.0, 0.02, 4000.0, noise=0.5, seed=2))
    assert m.model.name == "holt"
    assert m.errors()["holt"] < m.errors()["ewma"]


def test_auto_keeps_ewma_on_a_noisy_constant() -> None:
    m = feed(_auto(), constant(20.0, 0.0, 4000.0, noise=3.0, seed=9))
    assert m.model.name == "ewma"


def test_auto_reports_nothing_before_any_forecast_was_scored() -> None:
    m = feed(_auto(), constant(20.0, 0.0, HORIZON_S - 1.0))
    assert m.errors() == {}
    assert m.name == "auto:ewma"


def test_auto_does_not_score_across_a_gap() -> None:
    m = feed(_auto(), constant(20.0, 0.0, 300.0))
    m = m.update(300.0 + 2000.0, 20.0)  # targets of all pending forecasts fell in the gap
    assert m.scored == 0 and m.pending[-1].t_made == 2300.0


@dataclass(frozen=True)
class _Silent:
    """A candidate that never has a forecast (as a model without enough history)."""

    t: float = 0.0
    name: str = "silent"
    level: float | None = None

    def update(self, t: float, value: float) -> _Silent:
        return _Silent(t)

    def predict(self, t: float, horizon_s: float) -> float | None:
        return None


def test_a_pending_forecast_with_a_candidate_that_could_not_predict_is_kept_and_skipped() -> None:
    # the packed pending forecasts keep None apart from any number; a record holding one
    # is not scored
    m = Auto(candidates=(Ewma(), _Silent()), horizon_s=10.0)
    m = m.update(0.0, 5.0)
    assert [(p.t_made, p.t_target, p.values) for p in m.pending] == [(0.0, 10.0, (5.0, None))]
    for t in range(1, 12):
        m = m.update(float(t), 5.0)
    assert m.scored == 0  # the only due records held a None
    assert [p.t_made for p in m.pending] == [5.0, 10.0]
    both = Auto(candidates=(Ewma(), Holt()), horizon_s=10.0)
    for t in range(12):
        both = both.update(float(t), 5.0)
    assert both.scored == 1 and both.pending[0].values == (5.0, 5.0)
