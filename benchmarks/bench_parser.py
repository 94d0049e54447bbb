"""Parser throughput: our wanted-families parse vs prometheus_client, side by side.

Run: .venv/bin/python benchmarks/bench_parser.py   (writes benchmarks/results/parser.json)
"warm" keeps the parser's caches (label sets, line heads, group sizes) between parses,
as repeated scrapes of a pod do; "cold" clears them before every parse (a pod's first
scrape). Every row runs in the same process, one after the other, so the ratios are
side by side.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from autoscaler.metrics import exposition
from autoscaler.metrics.engines import VLLM_FAMILIES, read_snapshot

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt"


def per_call_s(fn: Callable[[], object], min_time_s: float = 1.0) -> float:
    """Best of 5 rounds, each running ``fn`` for about ``min_time_s / 5``."""
    best = float("inf")
    for _ in range(5):
        n, start = 0, time.perf_counter()
        while time.perf_counter() - start < min_time_s / 5:
            fn()
            n += 1
        best = min(best, (time.perf_counter() - start) / n)
    return best


def main() -> None:
    text = PAGE.read_text()

    def cold() -> object:
        exposition._LABEL_CACHE.clear()
        exposition._HEADS.clear()
        exposition._GROUP_BYTES.clear()
        return exposition.parse_page(text, VLLM_FAMILIES)

    rows = {
        "prometheus_client text_string_to_metric_families": per_call_s(
            lambda: list(text_string_to_metric_families(text))
        ),
        "parse_page strict (all lines)": per_call_s(lambda: exposition.parse_page(text, None)),
        "parse_page vLLM families, cold label cache": per_call_s(cold),
        "parse_page vLLM families, warm label cache": per_call_s(
            lambda: exposition.parse_page(text, VLLM_FAMILIES)
        ),
        "read_snapshot (parse + vLLM adapter), warm": per_call_s(lambda: read_snapshot(text)),
    }
    base = rows["prometheus_client text_string_to_metric_families"]
    lines = text.count("\n")
    print(f"page: {PAGE.name} ({lines} lines, {len(text)} bytes)")
    print(f"{'parser':55} {'us/page':>10} {'pages/s':>10} {'speedup':>8}")
    results = []
    for name, sec in rows.items():
        print(f"{name:55} {sec * 1e6:10.1f} {1 / sec:10.0f} {base / sec:7.1f}x")
        results.append({"parser": name, "us_per_page": sec * 1e6, "speedup": base / sec})
    out = ROOT / "benchmarks" / "results" / "parser.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"page": PAGE.name, "lines": lines, "results": results}, indent=2))


if __name__ == "__main__":
    main()
