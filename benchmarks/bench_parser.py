"""Parser ablation: CPU per page and layout memory, side by side in one run, translated
into the per-process envelope (500 targets x 8 pods at 1 s = 4,000 pages/s, <= 1 core).

Run: .venv/bin/python benchmarks/bench_parser.py [--rounds 7] [--targets 500] [--pods 8]
[--baseline REV] (writes benchmarks/results/parser.json)
``--baseline REV`` also runs the "layouts" and "line parser (no layouts)" rows with that git
revision's package (`revisions.extract`, in a worker process, right after this tree's).

Pages: the vLLM V1 0.10 fixture, whole (46 kB, what a pod that ignores ``?name[]=``
sends) and filtered to the adapter's samples (10 kB, what vLLM answers the scrape's
query: `filtering.restrict_page`). As on a live pod every value changes on every scrape
(16 variants: counters, buckets and sums grow, gauges take new values). Each row is
``read_snapshot`` or its equivalent: page -> the vLLM adapter's `EngineSnapshot`.
- "prometheus_client": `text_string_to_metric_families` + the same adapter (the library);
- "line parser (no layouts)": the lenient line parser alone, every page read line by line;
- "strict parser": every line checked (the offline command's mode);
- "layouts": what a scrape runs (a page whose skeleton was seen before is read by its
  layout).
Single-pod rows are timed in interleaved rounds (CPU time, median over rounds). The
envelope rows read ``--targets`` x ``--pods`` pages per tick, each target with its own
model name (so its own skeleton: the worst case for layouts; pods of one target share
one), and report CPU per page in steady state, the share of one core at 4,000 pages/s,
and the bytes the layouts hold (`cache_bytes`, and tracemalloc's count of the same).
"""

from __future__ import annotations

import argparse
import functools
import gc
import itertools
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families
from revisions import extract, git

from autoscaler.metrics import exposition
from autoscaler.metrics.engines import ADAPTERS, VLLM_REQUEST_SAMPLES, EngineSnapshot, read_snapshot
from autoscaler.metrics.exposition import Family, Page, Sample, layout
from autoscaler.metrics.filtering import restrict_page

ROOT = Path(__file__).parents[1]
PAGE = ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
VARIANTS = 16
ENVELOPE_PAGES_PER_S = 4000
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


def by_prometheus_client(text: str) -> EngineSnapshot:
    """prometheus_client's parser, its families handed to the same vLLM adapter."""
    families = {
        m.name: Family(
            m.name,
            m.type,
            tuple(Sample(s.name, s.labels, s.value) for s in m.samples),  # no timestamps
            0,
            m.documentation,
        )
        for m in text_string_to_metric_families(text)
    }
    page = Page(families)
    return ADAPTERS["vllm"].read(page, page, False)


def without_layouts(text: str) -> EngineSnapshot:
    saved = layout.LAYOUT_MAX_PAGE_BYTES
    layout.LAYOUT_MAX_PAGE_BYTES = 0  # every page is read by the line parser
    try:
        return read_snapshot(text, "vllm")
    finally:
        layout.LAYOUT_MAX_PAGE_BYTES = saved


ROWS: dict[str, Callable[[str], object]] = {
    "prometheus_client": by_prometheus_client,
    "strict parser": lambda text: read_snapshot(text, "vllm", strict=True),
    "line parser (no layouts)": without_layouts,
    "layouts": lambda text: read_snapshot(text, "vllm"),
}


def per_call_s(fn: Callable[[str], object], pages: list[str], window_s: float = 0.1) -> float:
    nxt = itertools.cycle(pages).__next__
    n, start = 0, time.process_time()
    while (elapsed := time.process_time() - start) < window_s:
        fn(nxt())
        n += 1
    return elapsed / n


BASELINE_ROWS = ("line parser (no layouts)", "layouts")  # rows any revision can run


def single_pod(text: str, rounds: int, rows: tuple[str, ...] = tuple(ROWS)) -> dict[str, float]:
    pages = variants(text)
    times: dict[str, list[float]] = {name: [] for name in rows}
    exposition.clear_caches()
    for _ in range(rounds):
        for name in rows:
            fn = ROWS[name]
            for page in pages[:3]:
                fn(page)  # a layout needs its skeleton's second page
            times[name].append(per_call_s(fn, pages))
    return {name: round(statistics.median(t) * 1e6, 1) for name, t in times.items()}


def _model(i: int) -> str:
    return "org-" + "".join(chr(97 + (i // 26**k) % 26) for k in range(3)) + "/model"


def envelope(text: str, targets: int, pods: int, ticks: int = 4) -> dict[str, dict[str, float]]:
    base = variants(text, 8)
    fleet = [[page.replace(MODEL, _model(i)) for page in base] for i in range(targets)]
    out: dict[str, dict[str, float]] = {}
    for name in BASELINE_ROWS:
        fn = ROWS[name]
        exposition.clear_caches()
        gc.collect()
        per_page: list[float] = []
        for k in range(ticks + 2):
            start = time.process_time()
            for pages in fleet:
                for j in range(pods):
                    fn(pages[(k + j) % 8])
            per_page.append((time.process_time() - start) / (targets * pods))
        held = exposition.cache_bytes()
        exposition.clear_caches()
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for k in range(2):
            for pages in fleet:
                for j in range(pods):
                    fn(pages[(k + j) % 8])
        traced = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        steady = statistics.median(per_page[2:])
        out[name] = {
            "us_per_page": round(steady * 1e6, 1),
            "first_tick_us_per_page": round(per_page[0] * 1e6, 1),
            "core_share_at_4000_pages_s": round(steady * ENVELOPE_PAGES_PER_S, 3),
            "layout_bytes": held,
            "traced_bytes": traced,
            "bytes_per_pod": round(traced / (targets * pods)),
        }
    return out


def measure(rounds: int, targets: int, pods: int, rows: tuple[str, ...]) -> dict[str, Any]:
    whole = PAGE.read_text()
    filtered = restrict_page(whole, VLLM_REQUEST_SAMPLES)
    return {
        "us_per_page": {
            "whole page": single_pod(whole, rounds, rows),
            "filtered page": single_pod(filtered, rounds, rows),
        },
        "envelope": envelope(filtered, targets, pods),
    }


def report(label: str, result: dict[str, Any], targets: int, pods: int) -> None:
    single = result["us_per_page"]
    print(f"{label}\n{'row':28} {'whole us/page':>14} {'filtered us/page':>17} {'cores':>6}")
    for name in single["whole page"]:
        w, f = single["whole page"][name], single["filtered page"][name]
        print(f"{name:28} {w:14.1f} {f:17.1f} {f * ENVELOPE_PAGES_PER_S / 1e6:6.2f}")
    print(f"envelope: {targets} targets (one model each) x {pods} pods, filtered, steady state")
    for name, row in result["envelope"].items():
        print(
            f"{name:28} {row['us_per_page']:7.1f} us/page  {row['core_share_at_4000_pages_s']:.2f}"
            f" core at 4,000 pages/s  layouts {row['layout_bytes'] / 1e6:.1f} MB"
            f" (traced {row['traced_bytes'] / 1e6:.1f} MB, {row['bytes_per_pod']} B/pod)"
        )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--targets", type=int, default=500)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--baseline", default=None, help="also run this git revision's code")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.rounds, args.targets, args.pods, BASELINE_ROWS)))
        return
    result = measure(args.rounds, args.targets, args.pods, tuple(ROWS))
    report("this tree (cores: at 4,000 filtered pages/s)", result, args.targets, args.pods)
    payload: dict[str, Any] = {
        "command": " ".join(["benchmarks/bench_parser.py", *sys.argv[1:]]),
        "revision": git("rev-parse", "--short", "HEAD"),
        "page": PAGE.name,
        "variants": VARIANTS,
        "rounds": args.rounds,
        "envelope_size": {"targets": args.targets, "pods": args.pods},
        **result,
    }
    if args.baseline:
        rev = git("rev-parse", "--short", args.baseline)
        with tempfile.TemporaryDirectory() as tmp:
            code = extract(rev, Path(tmp))
            env = dict(os.environ, PYTHONPATH=str(code))
            argv = [sys.executable, __file__, "--worker", "--rounds", str(args.rounds)]
            argv += ["--targets", str(args.targets), "--pods", str(args.pods)]
            done = subprocess.run(argv, check=True, capture_output=True, text=True, env=env)
        baseline = json.loads(done.stdout.strip().splitlines()[-1])
        report(f"baseline {rev}", baseline, args.targets, args.pods)
        payload["baseline"] = {"revision": rev, **baseline}
    out = ROOT / "benchmarks" / "results" / "parser.json"
    out.write_text(json.dumps(payload, indent=2) + "\n")


if __name__ == "__main__":
    main()
