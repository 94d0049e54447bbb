"""`auto`: run every candidate forecaster and follow the one with the lowest measured error.

Each candidate's forecast for ``t + horizon`` is recorded (every ``record_every_s``) and
scored when a sample at or after that time arrives. The score is a recent weighted
absolute percentage error (WAPE: EW mean |forecast - actual| over EW mean |actual|), which
stays defined when the actual is zero (idle minutes) where a plain MAPE divides by zero.
A challenger replaces the chosen model only when it is better by ``switch_margin``, so
the choice does not flap between near-equal models. Choose by measured error, not taste.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from autoscaler.forecast.robust import check_finite, check_positive, decay, evolve


@dataclass(frozen=True, slots=True)
class PendingForecast:
    t_made: float
    t_target: float
    values: tuple[float | None, ...]


def default_candidates() -> tuple[Forecaster, ...]:
    return (Ewma(), Holt(), Seasonal())


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
    pending: tuple[PendingForecast, ...] = ()
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
        candidates = tuple(c.update(t, value) for c in self.candidates)
        if all(n is o for n, o in zip(candidates, self.candidates, strict=True)):
            return self  # repeated tick
        state = self._score(t, value)
        if state.last_record_t is None or t - state.last_record_t >= self.record_every_s:
            values = tuple(c.predict(t, self.horizon_s) for c in candidates)
            record = PendingForecast(t, t + self.horizon_s, values)
            state = evolve(state, pending=(*state.pending, record), last_record_t=t)
        return evolve(state, candidates=candidates)

    def _score(self, t: float, actual: float) -> Auto:
        due = [p for p in self.pending if p.t_target <= t]
        if not due:
            return self
        keep = tuple(p for p in self.pending if p.t_target > t)
        abs_error = list(self.abs_error or (0.0,) * len(self.candidates))
        abs_actual, scored, last = self.abs_actual, self.scored, self.last_scored_t
        for p in due:
            if t - p.t_target > self.max_eval_lag_s or any(v is None for v in p.values):
                continue  # a gap: the actual at the target time is unknown
            w = 1.0 if last is None else max(decay(t - last, self.error_tau_s), 1e-6)
            if scored == 0:
                w = 1.0
            for i, v in enumerate(p.values):
                assert v is not None
                abs_error[i] += w * (abs(v - actual) - abs_error[i])
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
            pending=keep,
            abs_error=tuple(abs_error),
            abs_actual=abs_actual,
            scored=scored,
            last_scored_t=last,
            chosen=chosen,
        )

    def predict(self, t: float, horizon_s: float) -> float | None:
        return self.model.predict(t, horizon_s)
