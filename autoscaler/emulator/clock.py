"""Emulated time for the emulator: ``emulated = anchor + (real - real_anchor) x speed``.

One clock is shared by every replica of a fleet so their emulated times agree, and a
speed change re-anchors it so emulated time never jumps.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from autoscaler.errors import ConfigError


def check_speed(speed: float) -> float:
    if not (speed > 0 and speed <= 1000):
        raise ConfigError(f"speed: value {speed!r} must be > 0 and <= 1000")
    return float(speed)


class EmuClock:
    """Maps real monotonic seconds to emulated seconds at a settable speed factor."""

    def __init__(self, speed: float = 1.0, real: Callable[[], float] = time.monotonic) -> None:
        self._real = real
        self._speed = check_speed(speed)
        self._real_anchor = real()
        self._emu_anchor = 0.0

    @property
    def speed(self) -> float:
        return self._speed

    def real_now(self) -> float:
        return self._real()

    def now(self) -> float:
        """Emulated seconds since the clock was made."""
        return self._emu_anchor + (self._real() - self._real_anchor) * self._speed

    def real_at(self, emu_s: float) -> float:
        """The real monotonic time at which emulated time reaches ``emu_s``."""
        return self._real_anchor + (emu_s - self._emu_anchor) / self._speed

    def emu_duration(self, real_s: float) -> float:
        return real_s * self._speed

    def real_duration(self, emu_s: float) -> float:
        return emu_s / self._speed

    def set_speed(self, speed: float) -> None:
        speed = check_speed(speed)
        now_real = self._real()
        self._emu_anchor = self.now()
        self._real_anchor = now_real
        self._speed = speed
