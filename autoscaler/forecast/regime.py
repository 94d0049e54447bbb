"""The load regime of one target, learned from its own history (issue 36).

Regimes judged on the demand in replicas (each signal over its per-replica
capacity, the largest: what the decision core asks for) smoothed over ``level_tau_s``:

- ``steady``: over the last ``window_s`` the smoothed level stayed within
  ``steady_range_replicas`` (one replica), while bursts above it reached at least
  ``burst_replicas`` (two replicas: the demand's per-minute peak over the level). What
  moves is bursts around a constant level, shorter than a stabilisation window.
  Following them buys replicas that start a cold start late and are held for the
  scale-down window: a constant count, the one a right-sized fixed fleet would hold,
  costs less for the same misses. The decision then holds for ``hold_window_s`` before
  scaling down. (A flat level without such bursts is followed: there is little to
  chase, and a long hold would only lag a slow daily ramp.)
- ``fleet`` (alongside the others, learned after ``fleet_min_history_s``): the level is
  flat as for ``steady``, bursts reach ``burst_replicas`` above it, and they last
  (excursions ``excursion_replicas`` above the level, time-weighted length) less than the
  cold start: a replica bought for one is Ready after it ended. The decision holds the
  learned fleet (``regime.fleet_replicas``: the ``fleet_quantile`` of the demand over
  ``fleet_window_s``, rounded up, slow to come down) and buys no replica for a burst:
  the count a right-sized fixed fleet would hold, found online.
- ``following`` (otherwise, and until ``window_s`` of history exists): the level moves
  (a daily ramp, a drift), so the count follows it under the policy's own windows.

Opt-in (``release_long_bursts``, off by default: on the benchmark scenarios it helped
conv x4 and hurt the mixed RAG + chat hours, docs/benchmarks.md): when the load follows
and its bursts (excursions ``excursion_replicas`` above the level, time-weighted length)
last longer than the cold start, replicas bought for a burst arrive inside it, so they
are released one cold start after the demand drops (``regime.release_window_s``, which
shortens the decision's scale-down window) instead of being held for the next burst.

Leaving ``steady`` takes a range of ``leave_range_replicas`` (hysteresis), so a level
near the threshold does not flip the windows every minute. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from autoscaler.forecast.robust import check_finite, check_positive, quantile_sorted

_EPS = 1e-9  # a quantile of exactly N replicas asks for N, not N + 1


@dataclass(frozen=True, slots=True)
class RegimeConfig:
    level_tau_s: float = 600.0
    window_s: float = 1800.0
    sample_every_s: float = 60.0
    steady_range_replicas: float = 1.0
    leave_range_replicas: float = 1.5
    hold_window_s: float = 1800.0
    burst_replicas: float = 2.0
    excursion_replicas: float = 1.0
    # opt-in (measured against the frontier, not a default: docs/benchmarks.md): when
    # bursts outlast the cold start, release one cold start after the demand drops
    release_long_bursts: bool = False
    # the fleet regime: a flat level with bursts shorter than the cold start holds the
    # count a right-sized fixed fleet would (the quantile of the demand over
    # fleet_window_s) and does not buy replicas for bursts; None: never
    fleet_quantile: float | None = 0.95
    fleet_window_s: float = 1800.0
    fleet_sample_s: float = 10.0
    fleet_min_history_s: float = 600.0
    fleet_min_bursts: int = 3
    fleet_release_replicas: float = 0.5

    def __post_init__(self) -> None:
        check_positive("level_tau_s", self.level_tau_s)
        check_positive("window_s", self.window_s)
        check_positive("sample_every_s", self.sample_every_s)
        check_positive("steady_range_replicas", self.steady_range_replicas)
        if self.leave_range_replicas < self.steady_range_replicas:
            raise ValueError(
                f"leave_range_replicas: value {self.leave_range_replicas!r} must be >= "
                f"steady_range_replicas ({self.steady_range_replicas!r})"
            )
        check_positive("hold_window_s", self.hold_window_s)
        check_finite("burst_replicas", self.burst_replicas, minimum=0.0)
        check_positive("excursion_replicas", self.excursion_replicas)
        if self.fleet_quantile is not None and not 0.0 < self.fleet_quantile <= 1.0:
            raise ValueError(
                f"fleet_quantile: value {self.fleet_quantile!r} must be in (0, 1] or None"
            )
        check_positive("fleet_window_s", self.fleet_window_s)
        check_positive("fleet_sample_s", self.fleet_sample_s)
        check_finite("fleet_min_history_s", self.fleet_min_history_s, minimum=0.0)
        if self.fleet_min_bursts < 1:
            raise ValueError(f"fleet_min_bursts: value {self.fleet_min_bursts!r} must be >= 1")
        check_finite("fleet_release_replicas", self.fleet_release_replicas, minimum=0.0)


class RegimeEstimator:
    """Smoothed demand in replicas, its range over the window, and the regime."""

    def __init__(self, config: RegimeConfig | None = None) -> None:
        self.config = config if config is not None else RegimeConfig()
        self.level: float | None = None
        self.last_t: float | None = None
        self.first_t: float | None = None
        self._levels: deque[tuple[float, float]] = deque()  # (t, level) every sample_every_s
        self._peaks: deque[tuple[float, float]] = deque()  # (t, max demand) per sample_every_s
        self.steady = False
        self._above_since: float | None = None  # start of the excursion in progress
        self._excursions: deque[tuple[float, float]] = deque()  # (t ended, duration s)
        self.cold_start_s: float | None = None
        self.long_bursts = False
        self._samples: deque[tuple[float, float]] = deque()  # (t, demand) every fleet_sample_s
        self.fleet = False  # the fleet regime (a flat level, bursts shorter than a cold start)
        self.floor: int | None = None  # the learned fleet while in that regime
        self._quantile: float | None = None  # of the fleet window (None: recompute)

    def observe(self, t: float, demand_replicas: float, cold_start_s: float | None = None) -> None:
        """Feed the demand in replicas at ``t`` (finite, >= 0; a repeated tick is ignored)
        and the cold start the policy expects (its forecast horizon; None: unknown)."""
        check_finite("demand_replicas", demand_replicas, minimum=0.0)
        if cold_start_s is not None:
            self.cold_start_s = check_positive("cold_start_s", cold_start_s)
        cfg = self.config
        last = self.last_t
        if last is not None and t <= last:
            return
        if self.level is None or last is None or self.first_t is None:
            self.level, self.first_t = demand_replicas, t
        else:
            # the mean of what was seen until ``level_tau_s`` of history, then an EWMA: a
            # level started from the first sample would take a time constant to forget it
            dt = t - last
            w = max(-math.expm1(-dt / cfg.level_tau_s), dt / (t - self.first_t))
            self.level += w * (demand_replicas - self.level)
        self.last_t = t
        levels = self._levels
        if not levels or t - levels[-1][0] >= cfg.sample_every_s:
            levels.append((t, self.level))
        while levels and levels[0][0] < t - cfg.window_s:
            levels.popleft()
        peaks = self._peaks
        if peaks and t - peaks[-1][0] < cfg.sample_every_s:
            if demand_replicas > peaks[-1][1]:
                peaks[-1] = (peaks[-1][0], demand_replicas)
        else:
            peaks.append((t, demand_replicas))
        while peaks and peaks[0][0] < t - cfg.window_s:
            peaks.popleft()
        self._track_excursions(t, demand_replicas)
        samples = self._samples
        if not samples or t - samples[-1][0] >= cfg.fleet_sample_s:
            samples.append((t, demand_replicas))
            while samples and samples[0][0] < t - cfg.fleet_window_s:
                samples.popleft()
            self._quantile = None
        self._update_fleet(t)
        seen = self.first_t is not None and t - self.first_t >= cfg.window_s
        spread = self.range_replicas()
        burst = self.burst_over_level()
        if not seen or spread is None or burst is None or burst < cfg.burst_replicas:
            self.steady = False
        elif self.steady:
            self.steady = spread <= cfg.leave_range_replicas
        else:
            self.steady = spread <= cfg.steady_range_replicas
        self.long_bursts = False
        if cfg.release_long_bursts and seen and not self.steady:
            length, cold = self.burst_length_s(), self.cold_start_s
            self.long_bursts = length is not None and cold is not None and length > cold

    def _update_fleet(self, t: float) -> None:
        """The fleet regime and its learned floor. Entered once ``fleet_min_history_s`` of
        history shows a flat level (range within ``steady_range_replicas``, left above
        ``leave_range_replicas``) with bursts at least ``burst_replicas`` above it that are
        shorter than the cold start (completed excursions, time-weighted, at least
        ``fleet_min_bursts`` of them). The floor is the ``fleet_quantile`` of the demand over
        ``fleet_window_s``, raised at once, lowered only when the quantile falls
        ``fleet_release_replicas`` under the next count down (slow decay, no flapping)."""
        cfg = self.config
        assert self.first_t is not None
        spread, burst = self.range_replicas(), self.burst_over_level()
        length, cold = self.burst_length_s(), self.cold_start_s
        limit = cfg.leave_range_replicas if self.fleet else cfg.steady_range_replicas
        self.fleet = (
            cfg.fleet_quantile is not None
            and t - self.first_t >= cfg.fleet_min_history_s
            and spread is not None
            and spread <= limit
            and burst is not None
            and burst >= cfg.burst_replicas
            and len(self._excursions) >= cfg.fleet_min_bursts
            and length is not None
            and cold is not None
            and length < cold
        )
        if not self.fleet or cfg.fleet_quantile is None:
            self.floor = None
            return
        q = self._quantile
        if q is None:
            q = quantile_sorted(sorted(v for _, v in self._samples), cfg.fleet_quantile)
            self._quantile = q
        up = math.ceil(q - _EPS)
        if self.floor is None or up > self.floor:
            self.floor = up
        else:
            down = math.ceil(q + cfg.fleet_release_replicas - _EPS)
            if down < self.floor:
                self.floor = down

    def _track_excursions(self, t: float, demand: float) -> None:
        """Excursions of the demand above the level by ``excursion_replicas``: when each
        started and how long it lasted (completed ones within the window)."""
        assert self.level is not None
        above = demand > self.level + self.config.excursion_replicas
        if above and self._above_since is None:
            self._above_since = t
        elif not above and self._above_since is not None:
            self._excursions.append((t, t - self._above_since))
            self._above_since = None
        while self._excursions and self._excursions[0][0] < t - self.config.window_s:
            self._excursions.popleft()

    def burst_length_s(self) -> float | None:
        """How long the load spends in one excursion, time-weighted (sum d^2 / sum d over
        the window's completed excursions: a second of burst is counted in the burst it
        belongs to, so many one-tick crossings of noise weigh little); None without."""
        total = sum(d for _, d in self._excursions)
        if not total > 0:
            return None
        return sum(d * d for _, d in self._excursions) / total

    def range_replicas(self) -> float | None:
        """Max - min of the smoothed level over the window (None before any sample)."""
        if not self._levels:
            return None
        values = [v for _, v in self._levels]
        return max(values) - min(values)

    def burst_over_level(self) -> float | None:
        """How far the demand's peak over the window rose above the smoothed level now."""
        if not self._peaks or self.level is None:
            return None
        return max(v for _, v in self._peaks) - self.level

    def numbers(self) -> dict[str, float]:
        """What the decision and the status read (``regime.*``; empty before data)."""
        spread = self.range_replicas()
        if spread is None or self.level is None:
            return {}
        cfg = self.config
        out = {
            "regime.steady": 1.0 if self.steady else 0.0,
            "regime.level_replicas": self.level,
            "regime.level_range_replicas": spread,
            "regime.burst_replicas": self.burst_over_level() or 0.0,
            "regime.window_s": cfg.window_s,
            "regime.steady_range_replicas": cfg.steady_range_replicas,
        }
        length = self.burst_length_s()
        if length is not None:
            out["regime.burst_length_s"] = length
        if self.cold_start_s is not None:
            out["regime.cold_start_s"] = self.cold_start_s
        out["regime.fleet"] = 1.0 if self.fleet else 0.0
        if self.floor is not None and self.floor > 0:
            out["regime.fleet_replicas"] = float(self.floor)
        if self.steady:
            out["regime.scale_down_window_s"] = cfg.hold_window_s
        elif cfg.release_long_bursts and self.long_bursts and self.cold_start_s is not None:
            out["regime.release_window_s"] = self.cold_start_s
        return out
