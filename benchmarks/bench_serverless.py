"""Serverless: GPU-hours saved against first-request TTFT, many low-traffic models.

The scenario (`autoscaler.sim.serverless.many_models`): ``--models`` models, each the
Azure conv trace stretched over ``--span-h`` hours, thinned to a share drawn
log-uniformly from ``--keep`` and shifted in time (seeded per ``--seeds``). Each row runs
every model on its own fleet (8B on one H100, `8b-h100`):

- ``min-1``: one warm replica per model at all times (the baseline users keep today);
- ``scale-to-zero``: zero after ``--idle-s`` idle; a request at zero is held by the
  activator and waits for a cold start on a warm node (cached image, ~57 s median);
- ``scale-to-zero, new node``: the same, when the cold start also provisions a node and
  pulls the image (the GPU went back to the cloud with the node);
- ``sleepers``: on idle, the replica is put to sleep (vLLM sleep level 1) and woken for the
  next request (0.5 s median, 3 s p90); a sleeper still holds its GPU (billed 1.0);
- ``sleepers, 4 per GPU``: the same with four sleeping models sharing a GPU (billed 0.25
  each; assumes the GPU has room for the one that wakes);
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

from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import publish
from autoscaler.sim.serverless import ModelResult, ServerlessRow, many_models, simulate_model
from autoscaler.sim.traces import load_trace

ROOT = Path(__file__).resolve().parents[1]
TRACE = ROOT / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv.gz"
PROFILE = "8b-h100"


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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="3 models over 1 h, one seed")
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
    lo, hi = (float(x) for x in args.keep.split(","))
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
    span_s = args.span_h * 3600.0
    profile = get_profile(PROFILE)
    base = load_trace(TRACE)
    table = rows(args.idle_s, args.sleep_ttl_s)
    per_row: dict[str, list[ModelResult]] = {r.name: [] for r in table}
    for seed in seeds:
        models = many_models(base, args.models, span_s=span_s, keep=(lo, hi), seed=seed)
        for row in table:
            for m, trace in enumerate(models):
                per_row[row.name].append(
                    simulate_model(trace, row, profile, seed=seed * 1000 + m, horizon_s=span_s)
                )
    summary = [summarize(row, per_row[row.name]) for row in table]
    base_h = summary[0]["gpu_hours"]
    for s in summary:
        s["gpu_hours_saved_pct"] = round(100.0 * (base_h - s["gpu_hours"]) / base_h, 1)
    lines = [
        "| row | GPU-h | saved vs min-1 | first-request TTFT p50 / p99 s | all TTFT p50 / p99 s "
        "| held | dropped | cold starts | wakes |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for s in summary:
        lines.append(
            f"| {s['row']} | {s['gpu_hours']:.1f} | {s['gpu_hours_saved_pct']:.1f} % | "
            f"{_fmt(s['first_ttft_p50_s'])} / {_fmt(s['first_ttft_p99_s'])} | "
            f"{_fmt(s['ttft_p50_s'])} / {_fmt(s['ttft_p99_s'])} | {s['held']} | "
            f"{s['dropped']} | {s['cold_starts']} | {s['wakes']} |"
        )
    command = "python benchmarks/bench_serverless.py" + (" --quick" if args.quick else "")
    doc: dict[str, Any] = {
        "command": command,
        "profile": PROFILE,
        "trace": TRACE.name,
        "models": args.models,
        "span_h": args.span_h,
        "keep": [lo, hi],
        "seeds": seeds,
        "idle_s": args.idle_s,
        "sleep_ttl_s": args.sleep_ttl_s,
        "rows": summary,
        "markdown": "\n".join(lines),
    }
    publish(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
