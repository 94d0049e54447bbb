"""Online, time-aware forecasters of one non-negative series (arrival rate, tokens/s).

Every model is a frozen dataclass holding its parameters and its state; ``update(t, x)``
returns a new model, ``predict(t, horizon_s)`` the value expected at ``t + horizon_s``
(never negative; ``None`` when there is no fresh data: missing is never zero).
Samples may arrive at irregular times: smoothing weights come from time constants, a
missing sample is simply not passed in, and after a gap longer than ``max_gap_s`` the
state restarts from the next sample instead of extrapolating stale numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar, Protocol, Self

from autoscaler.forecast.robust import (
    DEFAULT_ROBUSTNESS,
    InnovationFilter,
    Robustness,
    check_finite,
    check_positive,
    decay,
    evolve,
    evolver,
)


class Forecaster(Protocol):
    """What the planner needs from a forecaster."""

    @property
    def name(self) -> str: ...

    @property
    def level(self) -> float | None: ...

    def update(self, t: float, value: float) -> Self: ...

    def predict(self, t: float, horizon_s: float) -> float | None: ...


def _check_sample(t: float, value: float, last_t: float | None) -> bool:
    """Validate a sample; False for a repeated tick (same ``t``), which is ignored."""
    if not (_isfinite(t) and _isfinite(value) and value >= 0.0):
        check_finite("t", t)
        check_finite("value", value, minimum=0.0)
    if last_t is None:
        return True
    if t < last_t:
        raise ValueError(f"t: value {t!r} must be >= the previous sample time {last_t!r}")
    return t > last_t


def _check_horizon(horizon_s: float) -> None:
    if not (_isfinite(horizon_s) and horizon_s >= 0.0):
        check_finite("horizon_s", horizon_s, minimum=0.0)


_isfinite = math.isfinite


@dataclass(frozen=True, slots=True)
class Ewma:
    """Robust exponentially weighted level with time constant ``tau_s``; flat forecast."""

    tau_s: float = 60.0
    max_gap_s: float = 900.0
    robust: Robustness = DEFAULT_ROBUSTNESS
    last_t: float | None = None
    level: float | None = None
    filt: InnovationFilter | None = None
    kind: ClassVar[str] = "ewma"

    def __post_init__(self) -> None:
        check_positive("tau_s", self.tau_s)
        check_positive("max_gap_s", self.max_gap_s)

    @property
    def name(self) -> str:
        return self.kind

    def update(self, t: float, value: float) -> Ewma:
        if not _check_sample(t, value, self.last_t):
            return self
        filt = self.filt if self.filt is not None else InnovationFilter(self.robust)
        if self.level is None or self.last_t is None or t - self.last_t > self.max_gap_s:
            return evolve(self, last_t=t, level=value, filt=evolve(filt, run_sign=0))
        dt = t - self.last_t
        innovation = value - self.level
        clipped, new_filt = filt.step(t, dt, innovation, self.level)
        if dt >= self.tau_s:
            # A sample after a pause longer than tau stands for a stale level: not a spike.
            clipped = innovation
        level = self.level + decay(dt, self.tau_s) * clipped
        if not level > 0.0:  # max(0.0, level)
            level = 0.0
        return _evolve_ewma(self, last_t=t, level=level, filt=new_filt)

    def predict(self, t: float, horizon_s: float) -> float | None:
        _check_horizon(horizon_s)
        if self.level is None or self.last_t is None or t - self.last_t > self.max_gap_s:
            return None
        return self.level


@dataclass(frozen=True, slots=True)
class Holt:
    """Robust Holt smoothing (level + trend) on irregular times.

    The trend is the smoothed slope of the level per second. Forecasts use a damped trend
    (``damping_s``: extrapolation flattens beyond that time scale; ``None`` is linear),
    since a trend measured over minutes rarely lasts for the whole horizon. A gap longer
    than the level time constant forgets the trend rather than extrapolating across it.
    """

    level_tau_s: float = 120.0
    trend_tau_s: float = 1800.0
    damping_s: float | None = 600.0
    max_gap_s: float = 900.0
    robust: Robustness = DEFAULT_ROBUSTNESS
    last_t: float | None = None
    level: float | None = None
    trend_per_s: float = 0.0
    last_clean: float | None = None  # the last sample after the burst filter
    filt: InnovationFilter | None = None
    kind: ClassVar[str] = "holt"

    def __post_init__(self) -> None:
        check_positive("level_tau_s", self.level_tau_s)
        check_positive("trend_tau_s", self.trend_tau_s)
        check_positive("max_gap_s", self.max_gap_s)
        if self.damping_s is not None:
            check_positive("damping_s", self.damping_s)

    @property
    def name(self) -> str:
        return self.kind

    def update(self, t: float, value: float) -> Holt:
        if not _check_sample(t, value, self.last_t):
            return self
        filt = self.filt if self.filt is not None else InnovationFilter(self.robust)
        if self.level is None or self.last_t is None or t - self.last_t > self.max_gap_s:
            return evolve(
                self,
                last_t=t,
                level=value,
                trend_per_s=0.0,
                last_clean=value,
                filt=evolve(filt, run_sign=0),
            )
        dt = t - self.last_t
        trend = self.trend_per_s if dt <= self.level_tau_s else 0.0
        predicted = self.level + trend * dt
        innovation = value - predicted
        clipped, new_filt = filt.step(t, dt, innovation, predicted)
        if dt >= self.level_tau_s:  # long pause: the prediction, not the sample, is stale
            clipped = innovation
        alpha = decay(dt, self.level_tau_s)
        level = predicted + alpha * clipped
        # Slope of the level change, smoothed: T += beta * alpha * e / dt (Wright's
        # irregular-interval Holt); alpha/dt stays bounded as dt -> 0.
        trend += decay(dt, self.trend_tau_s) * alpha * clipped / dt
        return _evolve_holt(
            self,
            last_t=t,
            level=max(0.0, level),
            trend_per_s=trend,
            last_clean=max(0.0, predicted + clipped),
            filt=new_filt,
        )

    def trend_horizon_s(self, horizon_s: float) -> float:
        """Effective extrapolation time of the damped trend over ``horizon_s``."""
        if self.damping_s is None:
            return horizon_s
        return -self.damping_s * math.expm1(-horizon_s / self.damping_s)

    def predict(self, t: float, horizon_s: float) -> float | None:
        _check_horizon(horizon_s)
        if self.level is None or self.last_t is None or t - self.last_t > self.max_gap_s:
            return None
        ahead = max(0.0, t - self.last_t) + horizon_s
        return max(0.0, self.level + self.trend_per_s * self.trend_horizon_s(ahead))


_evolve_ewma = evolver(Ewma)
_evolve_holt = evolver(Holt)


@dataclass(frozen=True, slots=True)
class Seasonal:
    """Holt plus a seasonal profile (multiplicative Holt-Winters on irregular times).

    The profile holds the mean (burst-filtered) value per bin of the period (e.g. 48
    half-hour bins of a day). A bin is committed when the series leaves it, blended with
    past periods (weight ``1/memory_periods``, a plain mean for the first visits), so
    today's partial bin never biases the profile. Samples are deseasonalised against it
    (``x / profile(t)``: how busy today is compared with the usual) and that ratio is
    smoothed; the forecast is ``ratio * profile(t + h)``. A level smoothed on the raw
    series would lag every daily ramp; the ratio is flat, so it does not. Until the
    profile has history around ``t`` and ``t + h``, the forecast is Holt's.
    """

    base: Holt = Holt()
    period_s: float = 86_400.0
    bins: int = 48
    memory_periods: float = 3.0
    profile: tuple[float, ...] = ()
    visits: tuple[float, ...] = ()  # committed visits per bin (coverage-weighted)
    acc_bin: int | None = None
    acc_sum: float = 0.0
    acc_s: float = 0.0
    adjusted: Ewma | None = None  # smoothed x / profile(t)
    kind: ClassVar[str] = "seasonal"

    def __post_init__(self) -> None:
        check_positive("period_s", self.period_s)
        if self.bins < 2:
            raise ValueError(f"bins: value {self.bins!r} must be >= 2")
        check_positive("memory_periods", self.memory_periods)

    @property
    def name(self) -> str:
        return self.kind

    @property
    def level(self) -> float | None:
        return self.base.level

    @property
    def bin_width_s(self) -> float:
        return self.period_s / self.bins

    def _bin(self, t: float) -> int:
        return int((t % self.period_s) // self.bin_width_s) % self.bins

    def update(self, t: float, value: float, *, base_updated: Holt | None = None) -> Seasonal:
        """``base_updated``: ``self.base.update(t, value)`` when the caller already has it
        (`Auto` runs a Holt candidate that shares this base object: issue 16)."""
        prev_t = self.base.last_t
        base = self.base.update(t, value) if base_updated is None else base_updated
        if base is self.base:
            return self
        clean = base.last_clean if base.last_clean is not None else value
        dt = 0.0 if prev_t is None else min(t - prev_t, self.bin_width_s)
        profile = self.profile or (0.0,) * self.bins
        visits = self.visits or (0.0,) * self.bins
        b = self._bin(t)
        acc_bin, acc_sum, acc_s = self.acc_bin, self.acc_sum, self.acc_s
        gap = prev_t is not None and t - prev_t > self.bin_width_s
        if acc_bin is not None and (acc_bin != b or gap):
            profile, visits = self._commit(profile, visits, acc_bin, acc_sum, acc_s)
            acc_sum, acc_s = 0.0, 0.0
        weight_s = dt if dt > 0 else 1e-9
        adjusted = self.adjusted
        p_now = self._profile_at(t, profile, visits)
        if p_now is not None:
            eps = self._eps(profile, visits)
            ratio = (clean + eps) / (p_now + eps)
            adjusted = (adjusted or Ewma(tau_s=self.base.level_tau_s)).update(t, ratio)
        return evolve(
            self,
            adjusted=adjusted,
            base=base,
            profile=profile,
            visits=visits,
            acc_bin=b,
            acc_sum=acc_sum + clean * weight_s,
            acc_s=acc_s + weight_s,
        )

    def _commit(
        self,
        profile: tuple[float, ...],
        visits: tuple[float, ...],
        b: int,
        acc_sum: float,
        acc_s: float,
    ) -> tuple[tuple[float, ...], tuple[float, ...]]:
        coverage = min(1.0, acc_s / self.bin_width_s)
        if coverage < 0.25:  # too little of the bin seen to say what it looks like
            return profile, visits
        mean = acc_sum / acc_s
        n = visits[b] + coverage
        g = max(coverage / self.memory_periods, coverage / n)
        p = list(profile)
        v = list(visits)
        p[b] = p[b] + g * (mean - p[b])
        v[b] = n
        return tuple(p), tuple(v)

    def profile_at(self, t: float) -> float | None:
        """Profile value at ``t`` (linear between bin centres), ``None`` without history."""
        return self._profile_at(t, self.profile, self.visits)

    def _profile_at(
        self, t: float, profile: tuple[float, ...], visits: tuple[float, ...]
    ) -> float | None:
        if not visits:
            return None
        pos = (t % self.period_s) / self.bin_width_s - 0.5
        lo = math.floor(pos)
        frac = pos - lo
        i0, i1 = lo % self.bins, (lo + 1) % self.bins
        if visits[i0] <= 0 or visits[i1] <= 0:
            return None
        return profile[i0] * (1 - frac) + profile[i1] * frac

    @staticmethod
    def _eps(profile: tuple[float, ...], visits: tuple[float, ...]) -> float:
        """Offset that keeps ratios finite in idle bins (10 % of the mean profile)."""
        seen = [p for p, v in zip(profile, visits, strict=True) if v > 0]
        return 0.1 * (sum(seen) / len(seen)) + 1e-9

    def predict(self, t: float, horizon_s: float) -> float | None:
        base = self.base.predict(t, horizon_s)
        if base is None:
            return None
        p_then = self.profile_at(t + horizon_s)
        ratio = self.adjusted.predict(t, 0.0) if self.adjusted is not None else None
        if p_then is None or ratio is None or self.profile_at(t) is None:
            return base
        eps = self._eps(self.profile, self.visits)
        return max(0.0, ratio * (p_then + eps) - eps)
