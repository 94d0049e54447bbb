"""Scrape worker processes (`metrics/scrape_workers.py`), not a CLI subcommand:
``python -m autoscaler.commands.scrape_worker CONFIG_JSON LOOP HEARTBEAT_S --fork IN:OUT
...``, started by the controller's `ScrapeWorkers`, is a launcher: it imports the scrape
path once, freezes it out of the collector's sight, forks one worker per ``IN:OUT`` pair
of pipe ends (the worker's stdin and stdout, inherited from the controller) and then
becomes the workers' reaper (`scrape_reaper.py`, exec'd: the launcher's own heap goes).
The workers share the import heap copy-on-write: at K=2, 500 targets x 8 pods each, the
pair plus the reaper hold ~12 MB less than two interpreters started each on its own
(docs/scale.md, "Session 8"). Without ``--fork`` the process is one worker on its own
stdin and stdout.

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
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Final

from autoscaler.commands import glibc
from autoscaler.commands.gc_pacing import BACKSTOP_THRESHOLDS, GcPacer
from autoscaler.metrics.scrape_workers import serve_worker

TRIM_PERIOD_S: Final = 60.0  # as the controller's (commands/run.py)
REAPER: Final = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scrape_reaper.py")


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


def launch(argv: list[str], pairs: list[tuple[int, int]]) -> int:
    """Fork one worker per (stdin, stdout) pair, report ``pid INDEX PID`` lines on stdout,
    then exec the reaper; never returns unless the exec fails."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the controller stops us
    glibc.limit_malloc_arenas()  # before the fork: the workers inherit it
    gc.collect()
    gc.freeze()  # the shared heap: no collection in a worker writes to its pages
    fds = {fd for pair in pairs for fd in pair}
    pids: list[int] = []
    for index, (in_fd, out_fd) in enumerate(pairs):
        pid = os.fork()
        if pid == 0:  # the worker: its pipes as stdin and stdout, nobody else's ends
            code = 70
            try:
                os.dup2(in_fd, 0)
                os.dup2(out_fd, 1)
                for fd in fds:
                    os.close(fd)
                code = main(argv)
            except BaseException:
                traceback.print_exc()
            finally:
                os._exit(code)
        pids.append(pid)
        os.write(1, f"pid {index} {pid}\n".encode())
    for fd in fds:
        os.close(fd)  # EOF for a worker comes from the controller alone
    os.execv(sys.executable, [sys.executable, "-I", "-S", REAPER, *map(str, pids)])
    return 70  # not reached: execv raises when it fails


def _pairs(specs: list[str]) -> list[tuple[int, int]]:
    pairs = []
    for spec in specs:
        in_fd, sep, out_fd = spec.partition(":")
        if not (sep and in_fd.isdigit() and out_fd.isdigit()):
            raise SystemExit(f"--fork {spec!r}: must be IN:OUT file descriptors")
        pairs.append((int(in_fd), int(out_fd)))
    return pairs


def main(argv: list[str]) -> int:
    if "--fork" in argv:
        at = argv.index("--fork")
        return launch(argv[:at], _pairs(argv[at + 1 :]))
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
