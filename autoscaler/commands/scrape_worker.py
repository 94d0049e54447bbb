"""A scrape worker process (`metrics/scrape_workers.py`), not a CLI subcommand:
``python -m autoscaler.commands.scrape_worker CONFIG_JSON LOOP HEARTBEAT_S``, started by
the controller's `ScrapeWorkers`.

Its cyclic GC is paced as the controller's is (`gc_pacing.GcPacer`), here between bursts
of reads instead of between ticks: with 500 targets x 8 pods in flight a 50,000 young
threshold was reached about once per tick, each collection walking the in-flight pages
(~30-37 ms per tick, ~10% of the worker's CPU). The start-up's objects are frozen out of
the collector's sight; the automatic collector stays on only past the backstop.

Like the controller (`commands/run.py`), it hands glibc's free heap pages back to the
system (``malloc_trim(0)``) once started and then at most every `TRIM_PERIOD_S`, when
idle between bursts (`IdleTrim`); the page client's receive buffers are freed on every
idle (`serve_pipes`), so a trim finds them free.
"""

from __future__ import annotations

import gc
import sys
import time
from collections.abc import Callable
from typing import Final

from autoscaler.commands import glibc
from autoscaler.commands.gc_pacing import BACKSTOP_THRESHOLDS, GcPacer
from autoscaler.metrics.scrape_workers import serve_worker

TRIM_PERIOD_S: Final = 60.0  # as the controller's (commands/run.py)


class IdleTrim:
    """``trim`` when called (once idle), at most every ``period_s`` by ``clock``; the
    first call trims. ``trim`` None: never (not glibc)."""

    def __init__(
        self,
        trim: Callable[[], object] | None,
        *,
        period_s: float = TRIM_PERIOD_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not period_s > 0:
            raise ValueError(f"period_s={period_s!r}: must be > 0")
        self._trim, self.period_s, self._clock = trim, period_s, clock
        self._last: float | None = None
        self.trims = 0

    def __call__(self) -> bool:
        if self._trim is None:
            return False
        now = self._clock()
        if self._last is not None and now - self._last < self.period_s:
            return False
        self._last = now
        self._trim()
        self.trims += 1
        return True


def main(argv: list[str]) -> int:
    glibc.limit_malloc_arenas()  # as the controller (`commands.run.run_loop`)
    gc.collect()
    gc.freeze()
    gc.set_threshold(*BACKSTOP_THRESHOLDS)
    pacer = GcPacer()
    trim = IdleTrim(glibc.malloc_trim())
    trim()  # the start-up's free pages

    def idle() -> None:
        pacer.between_ticks()
        trim()

    return serve_worker(argv, on_idle=idle)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
