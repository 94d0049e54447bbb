"""The planner's in-place forecaster cells (`forecast.cells`, issue 16) compute exactly
what the frozen models compute: the same state, bit for bit (``repr`` of every float,
-0.0 and NaN included), and the same predictions, on random sequences with repeated
ticks, gaps longer than ``max_gap_s``, bursts, idle stretches and horizon changes."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.forecast.auto import Auto
from autoscaler.forecast.cells import AutoCell, SharedEwmaCell, cell_of
from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from autoscaler.forecast.planner import Planner, PlannerConfig, make_forecaster
from autoscaler.forecast.robust import Robustness

# (dt, value) steps: dt 0 is a repeated tick, 1000 s a gap longer than max_gap_s
_DT = st.sampled_from((0.0, 0.5, 1.0, 1.0, 1.0, 2.0, 3.0, 7.5, 45.0, 130.0, 1000.0))
_VALUE = st.one_of(
    st.sampled_from((0.0, 0.0, 1.0, 3.0, 50.0)),
    st.floats(min_value=0.0, max_value=1e4, allow_nan=False, allow_infinity=False),
)
_STEPS = st.lists(st.tuples(_DT, _VALUE), min_size=1, max_size=300)
_HORIZONS = (0.0, 1.0, 37.5, 90.0, 700.0)


def _models() -> dict[str, Forecaster]:
    robust = Robustness(confirm_s=4.0)
    return {
        "ewma": Ewma(tau_s=20.0, max_gap_s=300.0),
        "ewma-robust": Ewma(tau_s=5.0, robust=robust),
        "holt": Holt(level_tau_s=30.0, trend_tau_s=200.0),
        "holt-linear": Holt(level_tau_s=10.0, damping_s=None, robust=robust),
        "seasonal": Seasonal(base=Holt(level_tau_s=20.0), period_s=120.0, bins=6),
        "auto": make_forecaster("auto", horizon_s=30.0, period_s=240.0, bins=8),
        "auto-own-bases": Auto(
            candidates=(Ewma(), Seasonal(period_s=60.0, bins=4), Holt()), horizon_s=10.0
        ),
    }


def _same(cell: Any, model: Forecaster, t: float) -> None:
    assert repr(cell.snapshot()) == repr(model)
    assert cell.name == model.name
    assert repr(cell.level) == repr(model.level)
    for h in _HORIZONS:
        for at in (t, t + 0.5, t + 400.0):
            assert repr(cell.predict(at, h)) == repr(model.predict(at, h))
    if isinstance(model, Auto):
        assert repr(cell.errors()) == repr(model.errors())


@pytest.mark.parametrize("kind", list(_models()))
@settings(max_examples=60, deadline=None)
@given(steps=_STEPS, horizons=st.lists(st.sampled_from((30.0, 30.0, 30.0, 61.0)), min_size=1))
def test_a_cell_follows_its_frozen_model_bit_for_bit(
    kind: str, steps: list[tuple[float, float]], horizons: list[float]
) -> None:
    model = _models()[kind]
    cell = cell_of(model)
    _same(cell, model, 0.0)
    t = 1000.0
    for i, (dt, value) in enumerate(steps):
        t += dt
        if isinstance(model, Auto):
            assert isinstance(cell, AutoCell)
            horizon = horizons[i % len(horizons)]
            model = model.with_horizon(horizon).update(t, value)
            cell.update(t, value, horizon)
        else:
            model = model.update(t, value)
            assert not isinstance(cell, AutoCell)
            cell.update(t, value)
        _same(cell, model, t)


def _long_steps(seed: int, n: int) -> list[tuple[float, float]]:
    """A periodic series with noise, spikes, idle stretches, repeats and gaps."""
    rng = random.Random(seed)
    steps, t = [], 0.0
    for i in range(n):
        dt = rng.choice((0.0, 0.5, 1.0, 1.0, 2.0, 3.0, 10.0)) if rng.random() > 0.003 else 950.0
        t += dt
        value = 5.0 * (1.0 + 0.8 * math.sin(2 * math.pi * t / 240.0)) * rng.uniform(0.8, 1.2)
        if rng.random() < 0.02:
            value *= 10.0
        if (i // 150) % 5 == 4:
            value = 0.0
        steps.append((dt, value))
    return steps


@pytest.mark.parametrize("kind", list(_models()))
@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_a_cell_follows_its_frozen_model_over_long_seasonal_runs(kind: str, seed: int) -> None:
    model = _models()[kind]
    cell = cell_of(model)
    t = 1000.0
    for i, (dt, value) in enumerate(_long_steps(seed, 1500)):
        t += dt
        if isinstance(model, Auto):
            assert isinstance(cell, AutoCell)
            horizon = 30.0 if (i // 400) % 2 == 0 else 45.0
            model = model.with_horizon(horizon).update(t, value)
            cell.update(t, value, horizon)
        else:
            assert not isinstance(cell, AutoCell)
            model = model.update(t, value)
            cell.update(t, value)
        if i % 7 == 0:
            _same(cell, model, t)
    _same(cell, model, t)


@pytest.mark.parametrize("kind", list(_models()))
def test_a_cell_rejects_what_its_model_rejects_and_stays_unchanged(kind: str) -> None:
    model = _models()[kind].update(10.0, 1.0).update(11.0, 2.0)
    cell = cell_of(model)
    for t, value in ((10.5, 1.0), (12.0, -1.0), (12.0, float("nan")), (float("inf"), 1.0)):
        with pytest.raises(ValueError) as frozen_error:
            model.update(t, value)
        with pytest.raises(ValueError) as cell_error:
            cell.update(t, value)
        assert str(cell_error.value) == str(frozen_error.value)
        _same(cell, model, 11.0)


def test_an_auto_cell_keeps_its_horizon_when_the_sample_is_rejected() -> None:
    cell = cell_of(make_forecaster("auto", horizon_s=30.0, period_s=600.0, bins=4))
    assert isinstance(cell, AutoCell)
    cell.update(5.0, 1.0, 30.0)
    with pytest.raises(ValueError, match="previous sample time"):
        cell.update(4.0, 1.0, 60.0)
    with pytest.raises(ValueError, match="horizon_s"):
        cell.update(6.0, 1.0, -1.0)
    assert cell.horizon_s == 30.0
    assert cell.candidates[0].last_t == 5.0


_LOADS = ("running", "waiting", "kv_cache_usage")


@settings(max_examples=80, deadline=None)
@given(
    ticks=st.lists(
        st.tuples(
            st.sampled_from((0.0, 1.0, 1.0, 2.0)),
            st.floats(min_value=0.0, max_value=20.0, allow_nan=False),
            st.lists(st.booleans(), min_size=len(_LOADS), max_size=len(_LOADS)),
        ),
        min_size=1,
        max_size=120,
    )
)
def test_load_intensity_equals_one_frozen_ewma_pair_per_signal(
    ticks: list[tuple[float, float, list[bool]]],
) -> None:
    """The intensity denominators are one shared cell while the signals are fed alike
    and split when one is missing: each must still be that signal's own EWMA of the
    driver rate."""
    config = PlannerConfig(forecaster="ewma", load_signals=_LOADS, min_rate_for_ratio=0.5)
    planner = Planner(config)
    pairs: dict[str, tuple[Ewma, Ewma]] = {}
    t = 0.0
    for dt, rate, present in ticks:
        t += dt
        signals = {"arrival_rate_per_s": rate}
        signals.update({n: 3.0 * rate + i for i, n in enumerate(_LOADS) if present[i]})
        planner.update(t, signals)
        if rate >= config.min_rate_for_ratio:
            for name in _LOADS:
                if name in signals:
                    num, den = pairs.get(name, (Ewma(tau_s=600.0), Ewma(tau_s=600.0)))
                    pairs[name] = (num.update(t, signals[name]), den.update(t, rate))
        assert repr(planner.intensity) == repr(pairs)
        for name in _LOADS:
            pair = pairs.get(name)
            expected = None
            if pair is not None and pair[0].level is not None and pair[1].level:
                expected = pair[0].level / pair[1].level
            assert repr(planner.intensity_of(name)) == repr(expected)
    dens = {id(c.den): c.den for c in planner._intensity.values() if c.den is not None}
    assert sum(d.users for d in dens.values()) == len(planner._intensity)


def test_signals_fed_together_share_one_rate_cell() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", load_signals=_LOADS))
    for i in range(5):
        planner.update(float(i), {"arrival_rate_per_s": 2.0, **dict.fromkeys(_LOADS, 4.0)})
    dens = {id(c.den) for c in planner._intensity.values()}
    assert len(dens) == 1
    shared = next(iter(planner._intensity.values())).den
    assert isinstance(shared, SharedEwmaCell) and shared.users == len(_LOADS)
