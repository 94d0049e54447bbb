"""The load regime of one target, learned from its own history (issue 36).

Two regimes, judged on the demand in replicas (each signal over its per-replica
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
- ``following`` (otherwise, and until ``window_s`` of history exists): the level moves
  (a daily ramp, a drift), so the count follows it under the policy's own windows.

Leaving ``steady`` takes a range of ``leave_range_replicas`` (hysteresis), so a level
near the threshold does not flip the windows every minute. Pure: no clock, no I/O.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from autoscaler.forecast.robust import check_finite, check_positive


@dataclass(frozen=True, slots=True)
class RegimeConfig:
    level_tau_s: float = 600.0
    window_s: float = 1800.0
    sample_every_s: float = 60.0
    steady_range_replicas: float = 1.0
    leave_range_replicas: float = 1.5
    hold_window_s: float = 1800.0
    burst_replicas: float = 2.0

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

    def observe(self, t: float, demand_replicas: float) -> None:
        """Feed the demand in replicas at ``t`` (finite, >= 0; a repeated tick is ignored)."""
        check_finite("demand_replicas", demand_replicas, minimum=0.0)
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
        seen = self.first_t is not None and t - self.first_t >= cfg.window_s
        spread = self.range_replicas()
        burst = self.burst_over_level()
        if not seen or spread is None or burst is None or burst < cfg.burst_replicas:
            self.steady = False
        elif self.steady:
            self.steady = spread <= cfg.leave_range_replicas
        else:
            self.steady = spread <= cfg.steady_range_replicas

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
        if self.steady:
            out["regime.scale_down_window_s"] = cfg.hold_window_s
        return out
