"""The cyclic GC's young collections between control-loop ticks, at a bounded rate.

CPython starts a young collection when the young generation's net allocation count
passes its threshold, wherever that happens: at 1,000 targets a tick holds >50,000
container objects in flight (tasks, coroutines, parsed pages), so a threshold of 50,000
was reached mid-tick 1-2 times per tick, and each collection walked those in-flight
objects and promoted them (~70 ms each, 67-85 ms of CPU per second,
benchmarks/bench_scale.py gc_ms_per_s). Between two ticks the in-flight objects are
gone and the young generation holds only what the tick kept, so a collection there is
cheaper. `GcPacer.between_ticks` runs it there, at most once per ``min_interval_s``, and
the older generations by CPython's own counting (a middle collection every
``thresholds[1]`` young ones, a full one every ``thresholds[2]`` middle ones).

Safety bound: the automatic collector stays on with ``BACKSTOP_THRESHOLDS``, so if ticks
stop (a stalled loop, a process without a control loop) cyclic garbage still never
exceeds ~``BACKSTOP_THRESHOLDS[0]`` objects before a collection.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Final

# The automatic collector's thresholds once paced: young collections only past 1,000,000
# net allocations (the backstop; a steady tick at 1,000 targets stays far below between
# two paced collections), then CPython's usual 10 young per middle and 10 middle per full.
BACKSTOP_THRESHOLDS: Final = (1_000_000, 10, 10)
# The paced collections: a young one at most every 30 s, when at least 10,000 objects
# (net) were allocated since the last one; every 10th a middle one, every 30th of those
# full. Not more often: between ticks the young generation still holds what the last tick
# kept (at 1,000 targets ~120 ms to walk, benchmarks/bench_scale.py), and a steady tick
# makes almost no cyclic garbage (0 objects found by ~50 young collections a minute).
PACED_THRESHOLDS: Final = (10_000, 10, 30)
MIN_INTERVAL_S: Final = 30.0


class GcPacer:
    """Decides and runs the collections between ticks. ``clock``, ``collect`` and
    ``get_count`` are injectable (tests use fakes; defaults are ``time.monotonic`` and the
    ``gc`` module)."""

    def __init__(
        self,
        *,
        min_interval_s: float = MIN_INTERVAL_S,
        thresholds: tuple[int, int, int] = PACED_THRESHOLDS,
        clock: Callable[[], float] = time.monotonic,
        collect: Callable[[int], object] = gc.collect,
        get_count: Callable[[], tuple[int, int, int]] = gc.get_count,
    ) -> None:
        if min_interval_s < 0:
            raise ValueError(f"min_interval_s {min_interval_s!r}: must be >= 0")
        if any(t < 1 for t in thresholds):
            raise ValueError(f"thresholds {thresholds!r}: each must be >= 1")
        self.min_interval_s = min_interval_s
        self.thresholds = thresholds
        self._clock, self._collect, self._get_count = clock, collect, get_count
        self._last_t: float | None = None
        self.collections = [0, 0, 0]  # paced collections run, by generation

    def between_ticks(self) -> int | None:
        """Called once a tick has ended: runs a collection if one is due and returns its
        generation (None: none due, too soon or too little allocated)."""
        now = self._clock()
        if self._last_t is not None and now - self._last_t < self.min_interval_s:
            return None
        young, middle, old = self._get_count()
        t_young, t_middle, t_old = self.thresholds
        if young < t_young:
            return None
        # gc.collect(n) adds one to generation n+1's count, as CPython's own collections do
        if middle + 1 < t_middle:
            generation = 0
        elif old + 1 < t_old:
            generation = 1
        else:
            generation = 2
        self._collect(generation)
        self._last_t = now
        self.collections[generation] += 1
        return generation
