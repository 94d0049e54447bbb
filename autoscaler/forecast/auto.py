"""`auto`: run every candidate forecaster and follow the one with the lowest measured error.

Each candidate's forecast for ``t + horizon`` is recorded (every ``record_every_s``) and
scored when a sample at or after that time arrives. The score is a recent weighted
absolute percentage error (WAPE: EW mean |forecast - actual| over EW mean |actual|), which
stays defined when the actual is zero (idle minutes) where a plain MAPE divides by zero.
A challenger replaces the chosen model only when it is better by ``switch_margin``, so
the choice does not flap between near-equal models. Choose by measured error, not taste.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field

from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from autoscaler.forecast.robust import check_finite, check_positive, decay, evolve


@dataclass(frozen=True, slots=True)
class PendingForecast:
    t_made: float
    t_target: float
    values: tuple[float | None, ...]


# A pending forecast packed in `Auto.pending_packed`: t_made, t_target, 1.0 when any value
# is None (the record is skipped when scored) else 0.0, then one value per candidate
# (NaN for None). ~48 bytes instead of ~240 for the objects (issue 16: 18 pending per
# signal at a 90 s horizon, 3 signals per planner).
_T_MADE, _T_TARGET, _ANY_NONE, _VALUES = 0, 1, 2, 3
_NAN = math.nan


def _record(t_made: float, t_target: float, values: tuple[float | None, ...]) -> array[float]:
    any_none = any(v is None for v in values)
    return array(
        "d",
        (t_made, t_target, 1.0 if any_none else 0.0, *(_NAN if v is None else v for v in values)),
    )


def default_candidates() -> tuple[Forecaster, ...]:
    holt = Holt()
    return (Ewma(), holt, Seasonal(base=holt))


@dataclass(frozen=True, slots=True)
class Auto:
    """Selects among ``candidates`` by recent WAPE at ``horizon_s`` (see module doc)."""

    candidates: tuple[Forecaster, ...] = ()
    horizon_s: float = 90.0
    error_tau_s: float = 1800.0
    record_every_s: float = 5.0
    switch_margin: float = 0.05
    min_scored: int = 20
    max_eval_lag_s: float = 60.0
    # the pending forecasts, packed (see _record); `pending` reads them as objects
    pending_packed: array[float] = field(default_factory=lambda: array("d"))
    abs_error: tuple[float, ...] = ()
    abs_actual: float = 0.0
    scored: int = 0
    last_scored_t: float | None = None
    last_record_t: float | None = None
    chosen: int = 0

    def __post_init__(self) -> None:
        if not self.candidates:
            object.__setattr__(self, "candidates", default_candidates())
        check_finite("horizon_s", self.horizon_s, minimum=0.0)
        check_positive("error_tau_s", self.error_tau_s)
        check_positive("record_every_s", self.record_every_s)
        check_finite("switch_margin", self.switch_margin, minimum=0.0)
        if not 0 <= self.chosen < len(self.candidates):
            raise ValueError(f"chosen: value {self.chosen} must index candidates")

    @property
    def pending(self) -> tuple[PendingForecast, ...]:
        """The forecasts made and not yet scored, oldest first."""
        width = _VALUES + len(self.candidates)
        p = self.pending_packed
        out = []
        for i in range(0, len(p), width):
            values: tuple[float | None, ...] = tuple(p[i + _VALUES : i + width])
            if p[i + _ANY_NONE]:
                values = tuple(None if v != v else v for v in values)
            out.append(PendingForecast(p[i + _T_MADE], p[i + _T_TARGET], values))
        return tuple(out)

    @property
    def model(self) -> Forecaster:
        return self.candidates[self.chosen]

    @property
    def name(self) -> str:
        return f"auto:{self.model.name}"

    @property
    def level(self) -> float | None:
        return self.model.level

    def errors(self) -> dict[str, float]:
        """Recent WAPE per candidate name (empty until something was scored)."""
        if self.scored == 0 or self.abs_actual <= 0:
            return {}
        return {
            c.name: e / self.abs_actual
            for c, e in zip(self.candidates, self.abs_error, strict=True)
        }

    def with_horizon(self, horizon_s: float) -> Auto:
        """Score future forecasts at a new horizon (e.g. the cold start was re-learned)."""
        check_finite("horizon_s", horizon_s, minimum=0.0)
        return self if horizon_s == self.horizon_s else evolve(self, horizon_s=horizon_s)

    def update(self, t: float, value: float) -> Auto:
        old = self.candidates
        new: list[Forecaster] = []
        # A Seasonal candidate whose base is the Holt candidate's state object (as
        # `make_forecaster` builds them) takes the Holt update instead of repeating it:
        # Holt.update is a pure function of (state, t, value). Issue 16.
        holt_old: Holt | None = None
        holt_new: Holt | None = None
        for c in old:
            if type(c) is Seasonal and holt_old is not None and c.base is holt_old:
                new.append(c.update(t, value, base_updated=holt_new))
                continue
            n = c.update(t, value)
            if type(c) is Holt and isinstance(n, Holt):
                holt_old, holt_new = c, n
            new.append(n)
        candidates = tuple(new)
        for n, o in zip(candidates, old, strict=True):
            if n is not o:
                break
        else:
            return self  # repeated tick
        state = self._score(t, value)
        if state.last_record_t is None or t - state.last_record_t >= self.record_every_s:
            values = tuple(c.predict(t, self.horizon_s) for c in candidates)
            record = _record(t, t + self.horizon_s, values)
            state = evolve(state, pending_packed=state.pending_packed + record, last_record_t=t)
        return evolve(state, candidates=candidates)

    def _score(self, t: float, actual: float) -> Auto:
        p = self.pending_packed
        width = _VALUES + len(self.candidates)
        starts = range(0, len(p), width)
        due = [i for i in starts if p[i + _T_TARGET] <= t]
        if not due:
            return self
        keep = array("d")
        for i in starts:
            if p[i + _T_TARGET] > t:
                keep += p[i : i + width]
        abs_error = list(self.abs_error or (0.0,) * len(self.candidates))
        abs_actual, scored, last = self.abs_actual, self.scored, self.last_scored_t
        for i in due:
            if t - p[i + _T_TARGET] > self.max_eval_lag_s or p[i + _ANY_NONE]:
                continue  # a gap: the actual at the target time is unknown
            w = 1.0 if last is None else max(decay(t - last, self.error_tau_s), 1e-6)
            if scored == 0:
                w = 1.0
            for k in range(len(abs_error)):
                v = p[i + _VALUES + k]
                abs_error[k] += w * (abs(v - actual) - abs_error[k])
            abs_actual += w * (abs(actual) - abs_actual)
            scored += 1
            last = t
        chosen = self.chosen
        if scored >= self.min_scored and abs_actual > 0:
            best = min(range(len(abs_error)), key=abs_error.__getitem__)
            if abs_error[best] < abs_error[chosen] * (1 - self.switch_margin):
                chosen = best
        return evolve(
            self,
            pending_packed=keep,
            abs_error=tuple(abs_error),
            abs_actual=abs_actual,
            scored=scored,
            last_scored_t=last,
            chosen=chosen,
        )

    def predict(self, t: float, horizon_s: float) -> float | None:
        return self.model.predict(t, horizon_s)
