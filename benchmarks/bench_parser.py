"""Parser throughput: our wanted-families parse vs prometheus_client, side by side.

Run: .venv/bin/python benchmarks/bench_parser.py [--rounds 9]
(writes benchmarks/results/parser.json)

The page is the vLLM V1 0.10 fixture (496 lines, 46 kB); "vLLM families" are the 10
families the vLLM adapter may read (`engines.VLLM_FAMILIES`). The rows are measured in
interleaved rounds (each round times every row for ~0.1 s), so a burst of load on this
shared VM hits all rows alike; each row's speedup is the median over rounds of
(prometheus_client's time in that round / the row's time in that round), with the
lowest and highest round also reported. "warm" keeps the parser's caches between parses,
as repeated scrapes of a pod do; "cold" clears them before every parse (a first scrape).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.metrics import exposition
from autoscaler.metrics.engines import VLLM_FAMILIES, read_snapshot

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt"
BASELINE = "prometheus_client text_string_to_metric_families"


def per_call_s(fn: Callable[[], object], window_s: float = 0.1) -> float:
    """Mean seconds per call of ``fn`` over about ``window_s``."""
    n, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < window_s:
        fn()
        n += 1
    return elapsed / n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    text = PAGE.read_text()

    def cold() -> object:
        exposition.clear_caches()
        return exposition.parse_page(text, VLLM_FAMILIES)

    rows: dict[str, Callable[[], object]] = {
        BASELINE: lambda: list(text_string_to_metric_families(text)),
        "parse_page strict (all lines)": lambda: exposition.parse_page(text, None),
        "parse_page vLLM families, cold caches": cold,
        "parse_page vLLM families, warm caches": lambda: exposition.parse_page(text, VLLM_FAMILIES),
        "read_snapshot (parse + vLLM adapter), warm": lambda: read_snapshot(text, "vllm"),
    }
    times: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(args.rounds):
        for name, fn in rows.items():
            fn()  # the warm rows start warm after a cold row
            times[name].append(per_call_s(fn))
    lines = text.count("\n")
    print(f"page: {PAGE.name} ({lines} lines, {len(text)} bytes), {args.rounds} rounds")
    print(f"{'parser':46} {'us/page':>8} {'speedup':>8} {'min':>6} {'max':>6}")
    results = []
    for name, series in times.items():
        ratios = [b / t for b, t in zip(times[BASELINE], series, strict=True)]
        median_us = statistics.median(series) * 1e6
        speedup = statistics.median(ratios)
        print(f"{name:46} {median_us:8.1f} {speedup:7.1f}x {min(ratios):5.1f}x {max(ratios):5.1f}x")
        results.append(
            {
                "parser": name,
                "us_per_page_median": median_us,
                "speedup_median": speedup,
                "speedup_min": min(ratios),
                "speedup_max": max(ratios),
            }
        )
    out = ROOT / "benchmarks" / "results" / "parser.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {"page": PAGE.name, "lines": lines, "rounds": args.rounds, "results": results},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
