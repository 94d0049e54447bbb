"""The percentile the latency benchmarks report (bench_api, bench_dry_run,
bench_metrics_page), in one place so their p50/p99 mean the same thing."""

from __future__ import annotations

import math


def nearest_rank(values: list[float], q: float) -> float:
    """The nearest-rank ``q`` quantile (the smallest value with at least ``q`` of the
    values at or below it); NaN for no values, never 0."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(q * len(ordered)) - 1)]
