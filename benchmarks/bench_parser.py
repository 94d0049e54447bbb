"""Parser throughput: a live pod's page -> canonical signals vs prometheus_client, side by side.

Run: .venv/bin/python benchmarks/bench_parser.py [--rounds 15] [--profile] [--baseline REV]
(writes benchmarks/results/parser.json)
``--baseline REV`` measures in fresh processes alternately (one round each): that git
revision's code (extracted with ``git archive``) and this tree; every row's speedup is
against prometheus_client timed in the same process and round.

The page is the vLLM V1 0.10 fixture (496 lines, 46 kB). As on a live pod, every value
changes on every scrape: 16 variants are cycled, where counters, buckets and sums grow
and gauges take new values (timestamps of `_created` series stay). Every row reads the
next variant, prometheus_client included, so all rows parse the same pages.

The rows are measured in interleaved rounds (each round times every row for ~0.05 s), so
a burst of load on this shared VM hits all rows alike; each row's speedup is the median
over rounds of (prometheus_client's CPU time in that round / the row's in that round),
with the lowest and highest round also reported.
- "read_snapshot" is what `PodScrapeSource` runs per page: parse (only the adapter's
  wanted families) + the vLLM adapter -> `EngineSnapshot` (the headline, issue 16 goal
  >= 50x);
- "layouts off" is the same with the layout path disabled (every page walked), i.e. what
  a pod whose page layout changes on every scrape costs, and the parser before layouts;
- "cold" clears every cache before each parse (a pod's first scrape);
- "unchanged page" re-reads one variant (what the previous benchmark measured).
``--profile`` prints a cProfile of the headline row.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import itertools
import json
import os
import pstats
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from revisions import extract

from autoscaler.metrics import exposition
from autoscaler.metrics.engines import read_snapshot
from autoscaler.metrics.exposition import layout

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt"
BASELINE = "prometheus_client text_string_to_metric_families"
HEADLINE = "read_snapshot (parse + vLLM adapter), values changing"
VARIANTS = 16
_SAMPLE = re.compile(r"(?m)^([^#\s][^ \n]*) (\S+)$")


def variants(text: str, n: int = VARIANTS, seed: int = 7) -> list[str]:
    """``n`` pages of ``text`` whose values all change, as a live vLLM pod's do."""
    rng = random.Random(seed)

    def revalue(m: re.Match[str], k: int) -> str:
        head, value = m.group(1), float(m.group(2))
        name = head.partition("{")[0]
        if name.endswith("_created"):
            return m.group(0)
        if name.endswith(("_bucket", "_count", "_sum", "_total")):
            return f"{head} {value + 10.0 * k + (rng.random() if name.endswith('_sum') else 0)!r}"
        if "perc" in name:
            return f"{head} {rng.random()!r}"
        return f"{head} {float(rng.randint(0, 64))!r}"

    return [_SAMPLE.sub(functools.partial(revalue, k=k), text) for k in range(1, n + 1)]


def per_call_s(fn: Callable[[], object], window_s: float = 0.05) -> float:
    """Mean CPU seconds of this process per call of ``fn`` over about ``window_s``.

    CPU time, not wall-clock: on a shared VM the process is descheduled at random, which
    wall-clock time would charge to whichever row was running.
    """
    n, start = 0, time.process_time()
    while (elapsed := time.process_time() - start) < window_s:
        fn()
        n += 1
    return elapsed / n


def rows(pages: list[str]) -> dict[str, Callable[[], object]]:
    nxt = itertools.cycle(pages).__next__
    first = pages[0]

    def cold() -> object:
        exposition.clear_caches()
        return read_snapshot(nxt(), "vllm")

    def walk() -> object:
        saved = layout.LAYOUT_MAX_PAGE_BYTES
        layout.LAYOUT_MAX_PAGE_BYTES = 0
        try:
            return read_snapshot(nxt(), "vllm")
        finally:
            layout.LAYOUT_MAX_PAGE_BYTES = saved

    return {
        BASELINE: lambda: list(text_string_to_metric_families(nxt())),
        "parse_page strict (all lines)": lambda: exposition.parse_page(nxt(), None),
        "read_snapshot, cold caches (first scrape)": cold,
        "read_snapshot, layouts off (walk), changing": walk,
        HEADLINE: lambda: read_snapshot(nxt(), "vllm"),
        "read_snapshot, unchanged page": lambda: read_snapshot(first, "vllm"),
    }


def measure_rounds(rounds: int) -> dict[str, list[float]]:
    """CPU seconds per call of every row, ``rounds`` interleaved rounds."""
    text = PAGE.read_text()
    table = rows(variants(text))
    times: dict[str, list[float]] = {name: [] for name in table}
    for _ in range(rounds):
        for name, fn in table.items():
            for _ in range(3):
                fn()  # the warm rows start warm after the cold row (layouts need 2 pages)
            times[name].append(per_call_s(fn))
    return times


def _worker_rounds(code: Path | None) -> dict[str, list[float]]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    out = subprocess.run(
        [sys.executable, __file__, "--worker"], check=True, capture_output=True, text=True, env=env
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    expected = str((code or ROOT) / "autoscaler")
    if result["code"] != expected:
        raise RuntimeError(f"worker imported {result['code']}, expected {expected}")
    times: dict[str, list[float]] = result["times"]
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument(
        "--baseline",
        default=None,
        help="also measure this git revision's read_snapshot (in its own processes, "
        "alternating with this tree's, one round each), vs prometheus_client in the same "
        "process",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        import autoscaler

        code = str(Path(autoscaler.__file__).parent)
        print(json.dumps({"code": code, "times": measure_rounds(1)}), flush=True)
        return
    text = PAGE.read_text()
    baseline_times: dict[str, list[float]] = {}
    if args.baseline:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", args.baseline],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
        times: dict[str, list[float]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            code = extract(rev, Path(tmp))
            for _ in range(args.rounds):
                for into, where in ((baseline_times, code), (times, None)):
                    for name, series in _worker_rounds(where).items():
                        into.setdefault(name, []).extend(series)
    else:
        times = measure_rounds(args.rounds)
    lines = text.count("\n")
    print(f"page: {PAGE.name} ({lines} lines, {len(text)} bytes), {VARIANTS} variants,")
    print(f"{args.rounds} rounds; speedup = median of per-round ratios (min-max)")
    print(f"{'row':62} {'us/page':>8} {'speedup':>8} {'min':>6} {'max':>6}")
    results = []
    measured = [("", times)]
    if baseline_times:
        measured.insert(0, (f"baseline {rev}: ", baseline_times))
    for prefix, table in measured:
        for name, series in table.items():
            if prefix and name not in (BASELINE, HEADLINE):
                continue
            ratios = [b / t for b, t in zip(table[BASELINE], series, strict=True)]
            median_us = statistics.median(series) * 1e6
            speedup = statistics.median(ratios)
            label = prefix + name
            print(
                f"{label:62} {median_us:8.1f} {speedup:7.1f}x {min(ratios):5.1f}x "
                f"{max(ratios):5.1f}x"
            )
            results.append(
                {
                    "row": label,
                    "us_per_page_median": round(median_us, 1),
                    "speedup_median": round(speedup, 2),
                    "speedup_min": round(min(ratios), 2),
                    "speedup_max": round(max(ratios), 2),
                }
            )
    out = ROOT / "benchmarks" / "results" / "parser.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "command": " ".join(["benchmarks/bench_parser.py", *sys.argv[1:]]),
        "page": PAGE.name,
        "lines": lines,
        "variants": VARIANTS,
        "rounds": args.rounds,
        "headline": HEADLINE,
        "results": results,
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    if args.profile:
        fn = rows(variants(text))[HEADLINE]
        profiler = cProfile.Profile()
        profiler.runcall(lambda: [fn() for _ in range(3000)])
        pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


if __name__ == "__main__":
    main()
