"""Serverless: GPU-hours saved against first-request TTFT, many low-traffic models.

The scenario (`autoscaler.sim.serverless.many_models`): ``--models`` models, each the
Azure conv trace stretched over ``--span-h`` hours, thinned to a share drawn
log-uniformly from ``--keep`` and shifted in time (seeded per ``--seeds``). Each row runs
every model on its own fleet, for each of ``--sizes``: ``8b`` (Llama-3-8B on one H100,
cold start ~57 s median on a warm node, wake 0.5 s median / 3 s p90) and ``70b`` (70B TP4
on four H100s, cold start ~2 min, wake 3 / 6 s):

- ``min-1``: one warm replica per model at all times (the baseline users keep today);
- ``scale-to-zero``: zero after ``--idle-s`` idle; a request at zero is held by the
  activator and waits for a cold start on a warm node (cached image);
- ``scale-to-zero, new node``: the same, when the cold start also provisions a node and
  pulls the image (the GPU went back to the cloud with the node);
- ``sleepers``: on idle, the replica is put to sleep (vLLM sleep level 1) and woken for the
  next request; a sleeper still holds its GPUs (billed in full);
- ``sleepers, 4 per GPU``: the same with four sleeping models sharing their GPUs (billed
  a quarter each; assumes the GPUs have room for the one that wakes);
- ``sleep, then zero``: a sleeper is deleted after ``--sleep-ttl-s`` asleep.

"First request" = a request that finds its model idle for ``--idle-s`` at least (the
same requests in every row). Prints a table and writes
``benchmarks/results/serverless.json``.

    .venv/bin/python benchmarks/bench_serverless.py [--quick]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.sim.cluster import COLD_START_PRESETS, ColdStartModel
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import publish
from autoscaler.sim.serverless import (
    SLEEP_PRESETS,
    ModelResult,
    ServerlessRow,
    SleepModel,
    many_models,
    simulate_model,
)
from autoscaler.sim.traces import Trace, load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv.gz"
# size -> (profile, cold-start phases, wake time): calibration.md sections 3 and 6
SIZES: dict[str, tuple[str, ColdStartModel, SleepModel]] = {
    "8b": ("8b-h100", COLD_START_PRESETS["default"], SLEEP_PRESETS["8b"]),
    "70b": ("70b-h100-tp4", COLD_START_PRESETS["70b"], SLEEP_PRESETS["70b"]),
}


def rows(idle_s: float, sleep_ttl_s: float) -> list[ServerlessRow]:
    return [
        ServerlessRow("min-1", min_awake=1, idle_s=idle_s),
        ServerlessRow("scale-to-zero", idle_s=idle_s),
        ServerlessRow("scale-to-zero, new node", idle_s=idle_s, new_node=True),
        ServerlessRow("sleepers", idle_s=idle_s, sleep_budget=1),
        ServerlessRow("sleepers, 4 per GPU", idle_s=idle_s, sleep_budget=1, sleep_gpu_share=0.25),
        ServerlessRow("sleep, then zero", idle_s=idle_s, sleep_budget=1, sleep_ttl_s=sleep_ttl_s),
    ]


def _q(values: np.ndarray, q: float) -> float | None:
    """Quantile without interpolation (an inf, a dropped request, stays inf)."""
    if not len(values):
        return None
    v = float(np.quantile(values, q, method="inverted_cdf"))
    return round(v, 2) if np.isfinite(v) else float("inf")


def summarize(row: ServerlessRow, results: list[ModelResult]) -> dict[str, Any]:
    ttft = np.concatenate([r.ttft_s for r in results])
    first = np.concatenate([r.after_idle for r in results])
    held = np.concatenate([r.held for r in results])
    answered = ~np.isnan(ttft)  # nan: refused by vLLM (400), not a latency
    awake_h = sum(r.awake_gpu_s for r in results) / 3600.0
    asleep_h = sum(r.asleep_gpu_s for r in results) / 3600.0
    return {
        "row": row.name,
        "gpu_hours": round(awake_h + asleep_h, 2),
        "gpu_hours_awake": round(awake_h, 2),
        "gpu_hours_asleep": round(asleep_h, 2),
        "requests": int(answered.sum()),
        "first_requests": int((first & answered).sum()),
        "first_ttft_p50_s": _q(ttft[first & answered], 0.5),
        "first_ttft_p99_s": _q(ttft[first & answered], 0.99),
        "ttft_p50_s": _q(ttft[answered], 0.5),
        "ttft_p99_s": _q(ttft[answered], 0.99),
        "held": int(held.sum()),
        "dropped": int(np.isinf(ttft).sum()),
        "cold_starts": sum(r.cold_starts for r in results),
        "wakes": sum(r.wakes for r in results),
    }


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return "inf" if v == float("inf") else f"{v:g}"


def run_size(
    size: str, base: Trace, args: argparse.Namespace, keep: tuple[float, float], seeds: list[int]
) -> dict[str, Any]:
    profile_name, cold, sleep = SIZES[size]
    profile = get_profile(profile_name)
    span_s = args.span_h * 3600.0
    table = rows(args.idle_s, args.sleep_ttl_s)
    per_row: dict[str, list[ModelResult]] = {r.name: [] for r in table}
    for seed in seeds:
        models = many_models(base, args.models, span_s=span_s, keep=keep, seed=seed)
        for row in table:
            for m, trace in enumerate(models):
                per_row[row.name].append(
                    simulate_model(
                        trace,
                        row,
                        profile,
                        cold_start=cold,
                        sleep=sleep,
                        seed=seed * 1000 + m,
                        horizon_s=span_s,
                    )
                )
    summary = [summarize(row, per_row[row.name]) for row in table]
    base_h = summary[0]["gpu_hours"]
    for s in summary:
        s["gpu_hours_saved_pct"] = round(100.0 * (base_h - s["gpu_hours"]) / base_h, 1)
    return {
        "profile": profile_name,
        "cold_start_warm_median_s": round(cold.warm_median_s, 1),
        "wake_median_p90_s": [sleep.wake.median_s, sleep.wake.p90_s],
        "rows": summary,
    }


def table_lines(size: str, result: dict[str, Any]) -> list[str]:
    lines = [
        f"{size} ({result['profile']}): cold start ~{result['cold_start_warm_median_s']:g} s "
        f"median on a warm node, wake {result['wake_median_p90_s'][0]:g} s median / "
        f"{result['wake_median_p90_s'][1]:g} s p90",
        "",
        "| row | GPU-h | saved vs min-1 | first-request TTFT p50 / p99 s | all TTFT p50 / p99 s "
        "| held | dropped | cold starts | wakes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in result["rows"]:
        lines.append(
            f"| {s['row']} | {s['gpu_hours']:.1f} | {s['gpu_hours_saved_pct']:.1f} % | "
            f"{_fmt(s['first_ttft_p50_s'])} / {_fmt(s['first_ttft_p99_s'])} | "
            f"{_fmt(s['ttft_p50_s'])} / {_fmt(s['ttft_p99_s'])} | {s['held']} | "
            f"{s['dropped']} | {s['cold_starts']} | {s['wakes']} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 models over 1 h, one seed")
    ap.add_argument("--sizes", default="8b,70b", help=f"model sizes: {', '.join(SIZES)}")
    ap.add_argument("--models", type=int, default=20)
    ap.add_argument("--span-h", type=float, default=6.0, help="the scenario's hours")
    ap.add_argument("--keep", default="0.0003,0.01", help="share of the trace per model LO,HI")
    ap.add_argument("--seeds", default="0,1,2", help="scenario and cold-start seeds")
    ap.add_argument("--idle-s", type=float, default=300.0, help="idle period before scale-down")
    ap.add_argument("--sleep-ttl-s", type=float, default=1800.0, help="'sleep, then zero' TTL")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "serverless.json")
    args = ap.parse_args(argv)
    if args.quick:
        args.models, args.span_h, args.seeds = 3, 1.0, "0"
    sizes = [x.strip() for x in args.sizes.split(",") if x.strip()]
    unknown = [x for x in sizes if x not in SIZES]
    if unknown or not sizes:
        ap.error(f"--sizes: value {args.sizes!r} must name sizes among {', '.join(SIZES)}")
    lo, hi = (float(x) for x in args.keep.split(","))
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    base = load_trace(TRACE)
    results = {size: run_size(size, base, args, (lo, hi), seeds) for size in sizes}
    lines: list[str] = []
    for size, result in results.items():
        lines += [*([""] if lines else []), *table_lines(size, result)]
    command = "python benchmarks/bench_serverless.py" + (" --quick" if args.quick else "")
    doc: dict[str, Any] = {
        "command": command,
        "trace": TRACE.name,
        "models": args.models,
        "span_h": args.span_h,
        "keep": [lo, hi],
        "seeds": seeds,
        "idle_s": args.idle_s,
        "sleep_ttl_s": args.sleep_ttl_s,
        "sizes": results,
        "markdown": "\n".join(lines),
    }
    publish(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
