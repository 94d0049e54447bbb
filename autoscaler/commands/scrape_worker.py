"""A scrape worker process (`metrics/scrape_workers.py`), not a CLI subcommand:
``python -m autoscaler.commands.scrape_worker CONFIG_JSON LOOP HEARTBEAT_S``, started by
the controller's `ScrapeWorkers`.

Its cyclic GC is paced as the controller's is (`gc_pacing.GcPacer`), here between bursts
of reads instead of between ticks: with 500 targets x 8 pods in flight a 50,000 young
threshold was reached about once per tick, each collection walking the in-flight pages
(~30-37 ms per tick, ~10% of the worker's CPU). The start-up's objects are frozen out of
the collector's sight; the automatic collector stays on only past the backstop.
"""

from __future__ import annotations

import gc
import sys

from autoscaler.commands.gc_pacing import BACKSTOP_THRESHOLDS, GcPacer
from autoscaler.metrics.scrape_workers import serve_worker


def main(argv: list[str]) -> int:
    gc.collect()
    gc.freeze()
    gc.set_threshold(*BACKSTOP_THRESHOLDS)
    return serve_worker(argv, on_idle=GcPacer().between_ticks)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
