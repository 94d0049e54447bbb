"""The controller's CPU for the quantile answers of one Prometheus-mode tick, side by side:
four ``histogram_quantile`` answers (before the promq pass) vs the bucket answers the
quantiles are now computed from (JSON path: an answer unlike the last one; skeleton
path: the steady state).

Run: nice -n 10 .venv/bin/python benchmarks/bench_bucket_decode.py [--targets 1000] [--reps 15]
(writes benchmarks/results/bucket_decode.json)

Answers are built as Prometheus 2.42 prints them (compact JSON, labels sorted, series
le-major as its aggregation emits them, shortest round-trip values): per target one
series per quantile signal (TTFT p50/p95/p99, ITL p95) before; one series per target per
bound of vLLM V1's layouts (TTFT 22 bounds + +Inf, ITL 19 + +Inf) plus an empty answer
for the ITL fallback family after. Every tick's values differ (the timestamp too). What
is timed per tick (CPU, `time.process_time`, median of ``--reps``): decoding the answers
and producing each quantile signal's per-target values, i.e. what `PrometheusSource`
does between receiving the bodies and building the readings (HTTP not included: 4
requests before, 3 after).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.metrics.buckets import BucketLayout, QuantileSpec, parse_buckets, quantile_spec
from autoscaler.metrics.prometheus import (
    TARGET_LABEL,
    VLLM_QUERIES,
    _grouped_values,
    _quantile_values,
)

sys.path.insert(0, str(Path(__file__).parent))
from bench_prometheus_scale import ITL_LE, TTFT_LE, _fake_layout

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "bucket_decode.json"
SIGNALS = ("ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p95_s")
NAMESPACE = "llm-bench"


def _doc(result: list[dict[str, Any]]) -> bytes:
    doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(doc, separators=(",", ":")).encode()


def quantile_answer(names: list[str], rng: random.Random, t: float) -> bytes:
    return _doc(
        [
            {
                "metric": {TARGET_LABEL: n, "namespace": NAMESPACE},
                "value": [t, repr(rng.uniform(0.1, 0.5))],
            }
            for n in names
        ]
    )


def bucket_answer(
    names: list[str], layout: tuple[list[str], dict[str, float]], rng: random.Random, t: float
) -> bytes:
    les, cdf = layout
    rates = [rng.uniform(15.0, 25.0) for _ in names]
    return _doc(
        [
            {
                "metric": {"le": le, TARGET_LABEL: n, "namespace": NAMESPACE},
                "value": [t, repr(r * cdf[le])],
            }
            for le in les
            for n, r in zip(names, rates, strict=True)
        ]
    )


def _old(bodies: list[bytes], keys: dict[tuple[str, str], list[str]]) -> int:
    got = [_grouped_values(s, json.loads(b), keys) for s, b in zip(SIGNALS, bodies, strict=True)]
    return sum(len(g.values) for g in got)


def _new(
    bodies: list[bytes],
    keys: dict[tuple[str, str], list[str]],
    specs: list[QuantileSpec],
    cached: dict[str, BucketLayout | None] | None,
) -> int:
    """``cached`` None: the JSON path; else the layouts of the last answers (updated)."""
    families = list(dict.fromkeys(t for s in specs for _, t in s.branches))
    answers: dict[str, Any] = {}
    for fam, body in zip(families, bodies, strict=True):
        parsed = parse_buckets(body, cached.get(fam) if cached is not None else None)
        assert not isinstance(parsed, str), parsed
        answers[fam], layout = parsed
        if cached is not None:
            cached[fam] = layout
    got = [_quantile_values(s, answers, keys) for s in specs]
    return sum(len(g.values) for g in got)


def measure(n: int, reps: int) -> dict[str, Any]:
    specs = [quantile_spec(s, VLLM_QUERIES[s]) for s in SIGNALS]
    assert all(s is not None for s in specs)
    real = [s for s in specs if s is not None]
    layouts = [_fake_layout(TTFT_LE, 0.3), _fake_layout(ITL_LE, 0.04), ([], {})]
    names = [f"vllm-model-{i:04d}" for i in range(n)]
    keys = {(NAMESPACE, name): [f"{NAMESPACE}/{name}"] for name in names}
    rng = random.Random(n)
    ticks = []
    for k in range(reps + 1):
        t = 1_733_140_000.0 + k + rng.random()
        before = [quantile_answer(names, rng, t) for _ in SIGNALS]
        after = [bucket_answer(names, lay, rng, t) for lay in layouts]
        ticks.append((before, after))
    cached: dict[str, BucketLayout | None] = {}
    _new(ticks[0][1], keys, real, cached)  # the first answers: the layouts
    timings: dict[str, list[float]] = {"before": [], "after_json": [], "after_skeleton": []}
    for before, after in ticks[1:]:
        for label in timings:
            c = time.process_time()
            if label == "before":
                values = _old(before, keys)
            else:
                values = _new(after, keys, real, cached if label == "after_skeleton" else None)
            timings[label].append(1000 * (time.process_time() - c))
            assert values == 4 * n, (label, values)
    return {
        "targets": n,
        **{f"{k}_cpu_ms": round(statistics.median(v), 2) for k, v in timings.items()},
        "before_kb": round(sum(map(len, ticks[0][0])) / 1000, 1),
        "after_kb": round(sum(map(len, ticks[0][1])) / 1000, 1),
        "series_after": sum(len(lay[0]) for lay in layouts) * n,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[1000])
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    rows = [measure(n, args.reps) for n in args.targets]
    head = (
        "| targets | before: 4 histogram_quantile answers, CPU ms | after, JSON path "
        "| after, skeleton path (steady state) | answers kB before / after | bucket series |\n"
    )
    head += "|---|---|---|---|---|---|\n"
    table = head + "".join(
        f"| {r['targets']} | {r['before_cpu_ms']} | {r['after_json_cpu_ms']} | "
        f"{r['after_skeleton_cpu_ms']} | {r['before_kb']} / {r['after_kb']} "
        f"| {r['series_after']} |\n"
        for r in rows
    )
    print(table)
    command = " ".join(["benchmarks/bench_bucket_decode.py", *sys.argv[1:]])
    doc = {
        "benchmark": "bench_bucket_decode",
        "command": command,
        "machine": {"cpus": os.cpu_count()},
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "rows": rows,
        "markdown": table,
    }
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
