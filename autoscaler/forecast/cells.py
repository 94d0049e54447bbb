"""The planner's forecaster state, updated in place (issue 16).

The frozen models (`models.Ewma`, `Holt`, `Seasonal`, `auto.Auto`) return a new state
object per sample, and each sample's burst filter another: ~20 small objects per tick per
target, most of a planner tick. A `Planner` owns one forecaster per signal and never
hands it out, so it keeps *cells* instead: slotted objects holding the same fields
(the burst filter's inline), advanced in place by the same arithmetic in the same order,
bit for bit (tests/forecast/test_cells.py checks every cell against its frozen model on
random sequences; the golden tests check the planner end to end). ``snapshot()`` builds
the frozen model of the current state (what `Planner.models` reports).

Cells never read the clock and are never shared between planners; a failed check (bad
sample, time going backwards) raises before anything changes.
"""

from __future__ import annotations

import math
from array import array
from typing import Any, TypeAlias

from autoscaler.forecast.auto import _ANY_NONE, _T_TARGET, _VALUES, Auto
from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from autoscaler.forecast.robust import (
    InnovationFilter,
    Robustness,
    check_finite,
    decay,
    evolve,
)

_isfinite = math.isfinite
_expm1 = math.expm1
_copysign = math.copysign
_floor = math.floor
_INF = math.inf
_NAN = math.nan


class _Filtered:
    """The burst filter's state (`robust.InnovationFilter`), inline in its forecaster."""

    __slots__ = ("fparams", "has_filt", "run_sign", "run_start_t", "scale")

    fparams: Robustness
    has_filt: bool
    scale: float | None
    run_sign: int
    run_start_t: float | None

    def _load_filter(self, filt: InnovationFilter | None, robust: Robustness) -> None:
        self.has_filt = filt is not None
        self.fparams = filt.params if filt is not None else robust
        self.scale = filt.scale if filt is not None else None
        self.run_sign = filt.run_sign if filt is not None else 0
        self.run_start_t = filt.run_start_t if filt is not None else None

    def _filter(self) -> InnovationFilter | None:
        if not self.has_filt:
            return None
        return InnovationFilter(self.fparams, self.scale, self.run_sign, self.run_start_t)

    def _restart_filter(self) -> None:
        """``evolve(filt or InnovationFilter(robust), run_sign=0)``."""
        self.has_filt = True
        self.run_sign = 0

    def _step(self, t: float, dt_s: float, innovation: float, level: float) -> float:
        """`InnovationFilter.step` in place: returns the innovation to apply.

        A copy of `robust.InnovationFilter.step`, the same arithmetic in the same order
        (change both together); tests/forecast/test_cells.py
        (``test_a_cell_follows_its_frozen_model_*``: the frozen models call ``step``) pins
        it bit for bit."""
        self.has_filt = True
        scale = self.scale
        if scale is None:
            self.scale = abs(innovation)
            return innovation
        params = self.fparams
        band = scale
        floor = params.min_scale_rel * abs(level)
        if floor > band:
            band = floor
        if params.min_scale_abs > band:
            band = params.min_scale_abs
        bound = params.huber_k * band
        magnitude = abs(innovation)
        run_start: float | None = None
        if magnitude <= bound:
            clipped = innovation
            sign = 0
        else:
            sign = 1 if innovation > 0 else -1
            old_start = self.run_start_t
            if sign == self.run_sign and old_start is not None:
                run_start = old_start
                if t - old_start >= params.confirm_s:
                    clipped = innovation
                else:
                    clipped = _copysign(bound, innovation)
                    magnitude = bound
            else:
                run_start = t
                clipped = _copysign(bound, innovation)
                if not t - t >= params.confirm_s:
                    magnitude = bound
        w = -_expm1(-dt_s / params.scale_tau_s) if dt_s > 0 else 0.0
        self.scale = scale + w * (magnitude - scale)
        self.run_sign = sign
        self.run_start_t = run_start
        return clipped


class EwmaCell(_Filtered):
    """`models.Ewma` in place."""

    __slots__ = ("last_t", "level", "max_gap_s", "robust", "tau_s")

    name = "ewma"

    def __init__(self, model: Ewma) -> None:
        self.tau_s = model.tau_s
        self.max_gap_s = model.max_gap_s
        self.robust = model.robust
        self.last_t: float | None = model.last_t
        self.level: float | None = model.level
        self._load_filter(model.filt, model.robust)

    def copy(self) -> EwmaCell:
        new = EwmaCell.__new__(EwmaCell)
        for name in _EWMA_SLOTS:
            object.__setattr__(new, name, getattr(self, name))
        return new

    def update(self, t: float, value: float) -> bool:
        """Advance by one sample; False (nothing changed) for a repeated tick."""
        if not (_isfinite(t) and _isfinite(value) and value >= 0.0):
            check_finite("t", t)
            check_finite("value", value, minimum=0.0)
        return self.take(t, value)

    def take(self, t: float, value: float) -> bool:
        """`update` of a sample already checked (``t`` finite, ``value`` finite and >= 0:
        the planner checks each once per tick). The hottest code of a planner tick (12
        samples per target): `_step` inline."""
        last_t = self.last_t
        if last_t is not None and not t > last_t:
            if t < last_t:
                raise ValueError(f"t: value {t!r} must be >= the previous sample time {last_t!r}")
            return False  # a repeated tick
        level = self.level
        if level is None or last_t is None or t - last_t > self.max_gap_s:
            self.last_t = t
            self.level = value
            self.has_filt = True  # _restart_filter
            self.run_sign = 0
            return True
        dt = t - last_t
        innovation = value - level
        # -- _Filtered._step(t, dt, innovation, level), inline: robust.InnovationFilter.step's
        # arithmetic in its order (dt > 0 here, so no guard on the decay), pinned bit for bit by
        # tests/forecast/test_cells.py (test_a_cell_follows_its_frozen_model_*, "ewma*") --
        self.has_filt = True
        scale = self.scale
        if scale is None:
            self.scale = abs(innovation)
            clipped = innovation
        else:
            params = self.fparams
            band = scale
            floor = params.min_scale_rel * abs(level)
            if floor > band:
                band = floor
            if params.min_scale_abs > band:
                band = params.min_scale_abs
            bound = params.huber_k * band
            magnitude = abs(innovation)
            run_start: float | None = None
            if magnitude <= bound:
                clipped = innovation
                sign = 0
            else:
                sign = 1 if innovation > 0 else -1
                old_start = self.run_start_t
                if sign == self.run_sign and old_start is not None:
                    run_start = old_start
                    if t - old_start >= params.confirm_s:
                        clipped = innovation
                    else:
                        clipped = _copysign(bound, innovation)
                        magnitude = bound
                else:
                    run_start = t
                    clipped = _copysign(bound, innovation)
                    if not t - t >= params.confirm_s:
                        magnitude = bound
            self.scale = scale + -_expm1(-dt / params.scale_tau_s) * (magnitude - scale)
            self.run_sign = sign
            self.run_start_t = run_start
        # -- end of the filter --
        tau = self.tau_s
        if dt >= tau:
            clipped = innovation
        level = level + -_expm1(-dt / tau) * clipped  # decay(dt, tau): dt > 0 here
        if not level > 0.0:
            level = 0.0
        self.last_t = t
        self.level = level
        return True

    def predict(self, t: float, horizon_s: float) -> float | None:
        if not (_isfinite(horizon_s) and horizon_s >= 0.0):
            check_finite("horizon_s", horizon_s, minimum=0.0)
        last_t = self.last_t
        if self.level is None or last_t is None or t - last_t > self.max_gap_s:
            return None
        return self.level

    def snapshot(self) -> Ewma:
        return _evolve(
            _EWMA_TEMPLATE,
            tau_s=self.tau_s,
            max_gap_s=self.max_gap_s,
            robust=self.robust,
            last_t=self.last_t,
            level=self.level,
            filt=self._filter(),
        )


class SharedEwmaCell(EwmaCell):
    """An `EwmaCell` several signals read (the planner's intensity denominators)."""

    __slots__ = ("users",)

    def __init__(self, model: Ewma, users: int) -> None:
        super().__init__(model)
        self.users = users

    def split(self, users: int) -> SharedEwmaCell:
        """A copy for ``users`` of this cell's readers (they leave this one)."""
        new = SharedEwmaCell.__new__(SharedEwmaCell)
        for name in _EWMA_SLOTS:
            object.__setattr__(new, name, getattr(self, name))
        new.users = users
        self.users -= users
        return new


class RatioCell(EwmaCell):
    """An `EwmaCell` of a load signal with the cell of the rate it is divided by."""

    __slots__ = ("den",)

    def __init__(self, model: Ewma) -> None:
        super().__init__(model)
        self.den: SharedEwmaCell | None = None


class HoltCell(_Filtered):
    """`models.Holt` in place."""

    __slots__ = (
        "damping_s",
        "last_clean",
        "last_t",
        "level",
        "level_tau_s",
        "max_gap_s",
        "robust",
        "trend_per_s",
        "trend_tau_s",
    )

    name = "holt"

    def __init__(self, model: Holt) -> None:
        self.level_tau_s = model.level_tau_s
        self.trend_tau_s = model.trend_tau_s
        self.damping_s = model.damping_s
        self.max_gap_s = model.max_gap_s
        self.robust = model.robust
        self.last_t: float | None = model.last_t
        self.level: float | None = model.level
        self.trend_per_s = model.trend_per_s
        self.last_clean: float | None = model.last_clean
        self._load_filter(model.filt, model.robust)

    def update(self, t: float, value: float) -> bool:
        if not (_isfinite(t) and _isfinite(value) and value >= 0.0):
            check_finite("t", t)
            check_finite("value", value, minimum=0.0)
        return self.take(t, value)

    def take(self, t: float, value: float) -> bool:
        """`update` of a sample already checked (see `EwmaCell.take`)."""
        last_t = self.last_t
        if last_t is not None and not t > last_t:
            if t < last_t:
                raise ValueError(f"t: value {t!r} must be >= the previous sample time {last_t!r}")
            return False  # a repeated tick
        level = self.level
        if level is None or last_t is None or t - last_t > self.max_gap_s:
            self.last_t = t
            self.level = value
            self.trend_per_s = 0.0
            self.last_clean = value
            self._restart_filter()
            return True
        dt = t - last_t
        level_tau = self.level_tau_s
        trend = self.trend_per_s if dt <= level_tau else 0.0
        predicted = level + trend * dt
        innovation = value - predicted
        clipped = self._step(t, dt, innovation, predicted)
        if dt >= level_tau:
            clipped = innovation
        alpha = -_expm1(-dt / level_tau)  # decay(): dt > 0 here
        level = predicted + alpha * clipped
        trend += -_expm1(-dt / self.trend_tau_s) * alpha * clipped / dt
        clean = predicted + clipped
        self.last_t = t
        self.level = level if level > 0.0 else 0.0  # max(0.0, level)
        self.trend_per_s = trend
        self.last_clean = clean if clean > 0.0 else 0.0
        return True

    def predict(self, t: float, horizon_s: float) -> float | None:
        if not (_isfinite(horizon_s) and horizon_s >= 0.0):
            check_finite("horizon_s", horizon_s, minimum=0.0)
        last_t = self.last_t
        level = self.level
        if level is None or last_t is None or t - last_t > self.max_gap_s:
            return None
        since = t - last_t
        ahead = (since if since > 0.0 else 0.0) + horizon_s
        damping = self.damping_s
        if damping is not None:  # Holt.trend_horizon_s
            ahead = -damping * _expm1(-ahead / damping)
        value = level + self.trend_per_s * ahead
        return value if value > 0.0 else 0.0

    def snapshot(self) -> Holt:
        return _evolve(
            _HOLT_TEMPLATE,
            level_tau_s=self.level_tau_s,
            trend_tau_s=self.trend_tau_s,
            damping_s=self.damping_s,
            max_gap_s=self.max_gap_s,
            robust=self.robust,
            last_t=self.last_t,
            level=self.level,
            trend_per_s=self.trend_per_s,
            last_clean=self.last_clean,
            filt=self._filter(),
        )


class SeasonalCell:
    """`models.Seasonal` in place; ``base`` may be the Holt candidate's own cell (`Auto`
    advances it once, then this cell with `advance`)."""

    __slots__ = (
        "acc_bin",
        "acc_s",
        "acc_sum",
        "adjusted",
        "base",
        "bin_width_s",
        "bins",
        "eps",
        "memory_periods",
        "period_s",
        "profile",
        "visits",
    )

    name = "seasonal"

    def __init__(self, model: Seasonal, base: HoltCell | None = None) -> None:
        self.base = base if base is not None else HoltCell(model.base)
        self.period_s = model.period_s
        self.bins = model.bins
        self.bin_width_s = model.bin_width_s
        self.memory_periods = model.memory_periods
        # tuples, rebuilt when a bin is committed (rare): what the frozen model holds
        self.profile = model.profile
        self.visits = model.visits
        self.acc_bin = model.acc_bin
        self.acc_sum = model.acc_sum
        self.acc_s = model.acc_s
        self.adjusted = EwmaCell(model.adjusted) if model.adjusted is not None else None
        self.eps: float | None = None  # Seasonal._eps of the profile, once computed

    @property
    def level(self) -> float | None:
        return self.base.level

    @property
    def last_t(self) -> float | None:
        return self.base.last_t

    def update(self, t: float, value: float) -> bool:
        if not (_isfinite(t) and _isfinite(value) and value >= 0.0):
            check_finite("t", t)
            check_finite("value", value, minimum=0.0)
        return self.take(t, value)

    def take(self, t: float, value: float) -> bool:
        """`update` of a sample already checked (see `EwmaCell.take`)."""
        prev_t = self.base.last_t
        if not self.base.take(t, value):
            return False
        self.advance(t, value, prev_t)
        return True

    def advance(self, t: float, value: float, prev_t: float | None) -> None:
        """The seasonal part of `Seasonal.update` once ``base`` took the sample (its
        previous sample time was ``prev_t``)."""
        clean = self.base.last_clean
        if clean is None:
            clean = value
        width = self.bin_width_s
        dt = 0.0 if prev_t is None else min(t - prev_t, width)
        bins = self.bins
        if not self.profile:
            self.profile = _zeros(bins)
        if not self.visits:
            self.visits = _zeros(bins)
        b = int((t % self.period_s) // width) % bins
        acc_bin, acc_sum, acc_s = self.acc_bin, self.acc_sum, self.acc_s
        gap = prev_t is not None and t - prev_t > width
        if acc_bin is not None and (acc_bin != b or gap):
            self._commit(acc_bin, acc_sum, acc_s)
            acc_sum, acc_s = 0.0, 0.0
        weight_s = dt if dt > 0 else 1e-9
        p_now = self.profile_at(t)
        if p_now is not None:
            eps = self._eps()
            ratio = (clean + eps) / (p_now + eps)
            adjusted = self.adjusted
            if adjusted is None:
                adjusted = self.adjusted = EwmaCell(Ewma(tau_s=self.base.level_tau_s))
            adjusted.update(t, ratio)
        self.acc_bin = b
        self.acc_sum = acc_sum + clean * weight_s
        self.acc_s = acc_s + weight_s

    def _commit(self, b: int, acc_sum: float, acc_s: float) -> None:
        coverage = min(1.0, acc_s / self.bin_width_s)
        if coverage < 0.25:
            return
        mean = acc_sum / acc_s
        profile, visits = list(self.profile), list(self.visits)
        n = visits[b] + coverage
        g = max(coverage / self.memory_periods, coverage / n)
        profile[b] = profile[b] + g * (mean - profile[b])
        visits[b] = n
        self.profile, self.visits = tuple(profile), tuple(visits)
        self.eps = None

    def _eps(self) -> float:
        eps = self.eps
        if eps is None:
            seen = [p for p, v in zip(self.profile, self.visits, strict=True) if v > 0]
            eps = self.eps = 0.1 * (sum(seen) / len(seen)) + 1e-9
        return eps

    def profile_at(self, t: float) -> float | None:
        visits = self.visits
        if not visits or visits is _ZEROS.get(self.bins):  # no bin has history yet
            return None
        pos = (t % self.period_s) / self.bin_width_s - 0.5
        lo = _floor(pos)
        frac = pos - lo
        bins = self.bins
        i0, i1 = lo % bins, (lo + 1) % bins
        if visits[i0] <= 0 or visits[i1] <= 0:
            return None
        profile = self.profile
        return profile[i0] * (1 - frac) + profile[i1] * frac

    def predict(self, t: float, horizon_s: float) -> float | None:
        base = self.base.predict(t, horizon_s)
        if base is None:
            return None
        p_then = self.profile_at(t + horizon_s)
        adjusted = self.adjusted
        ratio = adjusted.predict(t, 0.0) if adjusted is not None else None
        if p_then is None or ratio is None or self.profile_at(t) is None:
            return base
        eps = self._eps()
        value = ratio * (p_then + eps) - eps
        return value if value > 0.0 else 0.0  # max(0.0, value)

    def snapshot(self, base: Holt | None = None) -> Seasonal:
        return _evolve(
            _SEASONAL_TEMPLATE,
            base=base if base is not None else self.base.snapshot(),
            period_s=self.period_s,
            bins=self.bins,
            memory_periods=self.memory_periods,
            profile=self.profile,
            visits=self.visits,
            acc_bin=self.acc_bin,
            acc_sum=self.acc_sum,
            acc_s=self.acc_s,
            adjusted=self.adjusted.snapshot() if self.adjusted is not None else None,
        )


Cell: TypeAlias = EwmaCell | HoltCell | SeasonalCell


class AutoCell:
    """`auto.Auto` in place, over cells of its candidates."""

    __slots__ = (
        "abs_actual",
        "abs_error",
        "candidate_names",
        "candidates",
        "chosen",
        "error_tau_s",
        "first_target",
        "horizon_s",
        "last_record_t",
        "last_scored_t",
        "max_eval_lag_s",
        "min_scored",
        "pending",
        "record_every_s",
        "scored",
        "shared",
        "switch_margin",
    )

    def __init__(self, model: Auto) -> None:
        cells: list[Cell] = []
        # follows[i]: candidate i is a Seasonal whose base is the object of the Holt
        # candidate just before it (as `make_forecaster` builds them): it shares that cell.
        # (Another layout gets its own base cell: the same values, computed twice.)
        follows: list[bool] = []
        for c in model.candidates:
            prev = model.candidates[len(cells) - 1] if cells else None
            shares = type(c) is Seasonal and type(prev) is Holt and c.base is prev
            cells.append(_cell(c, cells[-1] if shares else None))
            follows.append(shares)
        self.candidates = tuple(cells)
        shared = tuple(follows)
        self.shared = _NAMES.setdefault(shared, shared)  # one tuple for all cells
        names = tuple(c.name for c in cells)
        self.candidate_names = _NAMES.setdefault(names, names)
        self.horizon_s = model.horizon_s
        self.error_tau_s = model.error_tau_s
        self.record_every_s = model.record_every_s
        self.switch_margin = model.switch_margin
        self.min_scored = model.min_scored
        self.max_eval_lag_s = model.max_eval_lag_s
        self.pending = array("d", model.pending_packed)
        width = _VALUES + len(cells)
        p = self.pending
        self.first_target = min((p[i + _T_TARGET] for i in range(0, len(p), width)), default=_INF)
        self.abs_error = model.abs_error
        self.abs_actual = model.abs_actual
        self.scored = model.scored
        self.last_scored_t = model.last_scored_t
        self.last_record_t = model.last_record_t
        self.chosen = model.chosen

    @property
    def model(self) -> Cell:
        return self.candidates[self.chosen]

    @property
    def name(self) -> str:
        return "auto:" + self.candidates[self.chosen].name

    @property
    def level(self) -> float | None:
        return self.candidates[self.chosen].level

    def errors(self) -> dict[str, float]:
        """`Auto.errors`."""
        abs_actual = self.abs_actual
        if self.scored == 0 or abs_actual <= 0:
            return {}
        return {
            c.name: e / abs_actual for c, e in zip(self.candidates, self.abs_error, strict=True)
        }

    def update(self, t: float, value: float, horizon_s: float | None = None) -> bool:
        """`Auto.with_horizon(horizon_s).update(t, value)` (the horizon is kept only when
        the sample is valid, as the planner stored nothing when an update raised)."""
        if horizon_s is not None:  # checked before any candidate changes
            check_finite("horizon_s", horizon_s, minimum=0.0)
        if not (_isfinite(t) and _isfinite(value) and value >= 0.0):
            check_finite("t", t)
            check_finite("value", value, minimum=0.0)
        return self.take(t, value, horizon_s)

    def take(self, t: float, value: float, horizon_s: float | None = None) -> bool:
        """`update` of a sample already checked (see `EwmaCell.take`)."""
        if horizon_s is not None and not (_isfinite(horizon_s) and horizon_s >= 0.0):
            check_finite("horizon_s", horizon_s, minimum=0.0)
        cands = self.candidates
        changed = took = False
        prev_t: float | None = None
        for c, follows in zip(cands, self.shared, strict=True):
            if follows:  # a Seasonal on the previous candidate's Holt cell
                if took:
                    c.advance(t, value, prev_t)  # type: ignore[union-attr]
                    changed = True
                continue
            prev_t = c.last_t
            took = c.take(t, value)
            if took:
                changed = True
        if horizon_s is not None:
            self.horizon_s = horizon_s
        if not changed:
            return False
        self._score(t, value)
        last_record = self.last_record_t
        if last_record is None or t - last_record >= self.record_every_s:
            horizon = self.horizon_s
            values = [c.predict(t, horizon) for c in cands]
            any_none = None in values
            target = t + horizon
            record = (t, target, 1.0 if any_none else 0.0)
            # a new array of the exact size (extend would over-allocate: issue 16 memory)
            self.pending = self.pending + array(
                "d", (*record, *(_NAN if v is None else v for v in values))
            )
            if target < self.first_target:
                self.first_target = target
            self.last_record_t = t
        return True

    def _score(self, t: float, actual: float) -> None:
        if t < self.first_target:  # nothing due (`Auto._score`'s empty ``due``)
            return
        p = self.pending
        n = len(self.candidates)
        width = _VALUES + n
        starts = range(0, len(p), width)
        due = [i for i in starts if p[i + _T_TARGET] <= t]
        keep = array("d")
        for i in starts:
            if p[i + _T_TARGET] > t:
                keep += p[i : i + width]
        abs_error = list(self.abs_error or (0.0,) * n)
        abs_actual, scored, last = self.abs_actual, self.scored, self.last_scored_t
        error_tau = self.error_tau_s
        for i in due:
            if t - p[i + _T_TARGET] > self.max_eval_lag_s or p[i + _ANY_NONE]:
                continue
            w = 1.0 if last is None else max(decay(t - last, error_tau), 1e-6)
            if scored == 0:
                w = 1.0
            for k in range(n):
                v = p[i + _VALUES + k]
                abs_error[k] += w * (abs(v - actual) - abs_error[k])
            abs_actual += w * (abs(actual) - abs_actual)
            scored += 1
            last = t
        chosen = self.chosen
        if scored >= self.min_scored and abs_actual > 0:
            best = min(range(n), key=abs_error.__getitem__)
            if abs_error[best] < abs_error[chosen] * (1 - self.switch_margin):
                chosen = best
        self.pending = keep
        self.first_target = min(
            (keep[i + _T_TARGET] for i in range(0, len(keep), width)), default=_INF
        )
        self.abs_error = tuple(abs_error)
        self.abs_actual = abs_actual
        self.scored = scored
        self.last_scored_t = last
        self.chosen = chosen

    def predict(self, t: float, horizon_s: float) -> float | None:
        return self.candidates[self.chosen].predict(t, horizon_s)

    def snapshot(self) -> Auto:
        shots: list[Forecaster] = []
        for c, follows in zip(self.candidates, self.shared, strict=True):
            if follows:
                base = shots[-1]
                assert isinstance(c, SeasonalCell) and isinstance(base, Holt)
                shots.append(c.snapshot(base))
            else:
                shots.append(c.snapshot())
        return _evolve(
            _AUTO_TEMPLATE,
            candidates=tuple(shots),
            horizon_s=self.horizon_s,
            error_tau_s=self.error_tau_s,
            record_every_s=self.record_every_s,
            switch_margin=self.switch_margin,
            min_scored=self.min_scored,
            max_eval_lag_s=self.max_eval_lag_s,
            pending_packed=array("d", self.pending),
            abs_error=self.abs_error,
            abs_actual=self.abs_actual,
            scored=self.scored,
            last_scored_t=self.last_scored_t,
            last_record_t=self.last_record_t,
            chosen=self.chosen,
        )


ForecasterCell: TypeAlias = EwmaCell | HoltCell | SeasonalCell | AutoCell


def _cell(model: Forecaster, holt: Cell | None = None) -> Cell:
    if type(model) is Ewma:
        return EwmaCell(model)
    if type(model) is Holt:
        return HoltCell(model)
    if type(model) is Seasonal:
        assert holt is None or isinstance(holt, HoltCell)
        return SeasonalCell(model, holt)
    raise TypeError(f"forecaster: {type(model).__name__} has no in-place cell")


def cell_of(model: Forecaster) -> ForecasterCell:
    """The cell of a frozen forecaster (`Ewma`, `Holt`, `Seasonal` or `Auto`)."""
    if type(model) is Auto:
        return AutoCell(model)
    return _cell(model)


_evolve = evolve
_ZEROS: dict[int, tuple[float, ...]] = {}


def _zeros(bins: int) -> tuple[float, ...]:
    """``(0.0,) * bins``, one tuple shared by every cell (a profile without history)."""
    zeros = _ZEROS.get(bins)
    if zeros is None:
        zeros = _ZEROS[bins] = (0.0,) * bins
    return zeros


_NAMES: dict[Any, Any] = {}  # shared tuples (candidate names, layouts)
_EWMA_TEMPLATE = Ewma()
_HOLT_TEMPLATE = Holt()
_SEASONAL_TEMPLATE = Seasonal()
_AUTO_TEMPLATE = Auto()
_EWMA_SLOTS = (*_Filtered.__slots__, *EwmaCell.__slots__)
