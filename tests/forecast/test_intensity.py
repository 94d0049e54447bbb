"""The planner's load intensity: per load signal, an EWMA of the load and one of the
driver rate. Signals fed the same rates share the rate model (advanced once per tick);
each pair must still equal that signal's own pair of frozen EWMAs."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.forecast.models import Ewma
from autoscaler.forecast.planner import Planner, PlannerConfig

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
    """The intensity denominators are one shared model while the signals are fed alike
    and part when one is missing: each must still be that signal's own EWMA of the
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


def test_signals_fed_together_share_one_rate_model() -> None:
    planner = Planner(PlannerConfig(forecaster="ewma", load_signals=_LOADS))
    for i in range(5):
        planner.update(float(i), {"arrival_rate_per_s": 2.0, **dict.fromkeys(_LOADS, 4.0)})
    dens = {id(den) for _, den in planner.intensity.values()}
    assert len(dens) == 1
    planner.update(5.0, {"arrival_rate_per_s": 2.0, "running": 4.0})  # the others missing
    planner.update(6.0, {"arrival_rate_per_s": 2.0, **dict.fromkeys(_LOADS, 4.0)})
    dens = {id(den) for _, den in planner.intensity.values()}
    assert len(dens) == 2  # "running" saw one more rate sample than the others
