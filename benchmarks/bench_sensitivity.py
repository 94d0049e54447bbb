"""Sensitivity of the policy comparison to the cold-start length and to the TTFT SLO.

For each (scenario, cold start, SLO): static-peak is re-sized for that SLO (smallest N
keeping 99% of TTFTs within it), then ``static-peak``, ``keda-seed`` and ``ours`` run on
the same trace, cluster and seed. Cold start = warm-node median (all phases of the
default model scaled, so a new node scales too): 60 s, 180 s, 600 s. SLOs: 0.25, 0.5,
1.0 s at the default cold start. Writes ``benchmarks/results/sensitivity.json``.

    .venv/bin/python benchmarks/bench_sensitivity.py [--jobs N]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoscaler.sim.cluster import ClusterConfig, ColdStartModel
from autoscaler.sim.compare import CompareConfig, run_policies, size_static
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import write_json
from autoscaler.sim.traces import Trace, load_trace, scale_rate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import PROFILE, SEED, TRACES, peaky_day

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("static-peak", "keda-seed", "ours")
COLD_STARTS_S = (60.0, 180.0, 600.0)
SLOS_S = (0.25, 0.5, 1.0)


def traces() -> list[tuple[str, Trace]]:
    conv = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv.gz")
    code = load_trace(TRACES / "AzureLLMInferenceTrace_code.csv.gz")
    day = peaky_day(conv, day_s=3 * 3600.0, trough=0.05, power=4.0, peak_scale=8.0, seed=SEED)
    return [("conv x4", scale_rate(conv, 4.0, seed=SEED)), ("code", code), ("business day", day)]


def _cell(args: tuple[str, Trace, float | None, float]) -> dict[str, Any]:
    label, trace, cold_s, slo_s = args
    base = ClusterConfig(profile=get_profile(PROFILE))
    cluster = (
        base if cold_s is None else replace(base, cold_start=ColdStartModel().scaled_to(cold_s))
    )
    cfg = CompareConfig(cluster=cluster, slo_ttft_s=slo_s, seed=SEED)
    static_n = size_static(trace, cfg)
    results, _ = run_policies(trace, POLICIES, replace(cfg, static_replicas=static_n))
    by = {r.policy: r.summary() for r in results}
    return {
        "scenario": label,
        "cold_start_s": cold_s,
        "slo_ttft_s": slo_s,
        "static_peak_replicas": static_n,
        "policies": {
            n: {k: by[n][k] for k in ("gpu_hours", "slo_attainment", "slo_misses", "max_replicas")}
            for n in POLICIES
        },
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    out = [
        "| scenario | cold start | SLO s | static N | static GPU-h / att. | keda-seed GPU-h / att. "
        "| ours GPU-h / att. | ours GPU-h vs static | keda misses / ours |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        p = r["policies"]
        s, k, o = p["static-peak"], p["keda-seed"], p["ours"]
        ratio = k["slo_misses"] / o["slo_misses"] if o["slo_misses"] else float("inf")
        cold = "default (~57 s)" if r["cold_start_s"] is None else f"{r['cold_start_s']:g} s"
        out.append(
            f"| {r['scenario']} | {cold} | {r['slo_ttft_s']:g} | {r['static_peak_replicas']} | "
            f"{s['gpu_hours']:.2f} / {s['slo_attainment']:.4f} | "
            f"{k['gpu_hours']:.2f} / {k['slo_attainment']:.4f} | "
            f"{o['gpu_hours']:.2f} / {o['slo_attainment']:.4f} | "
            f"{o['gpu_hours'] / s['gpu_hours']:.2f} | {ratio:.1f} |"
        )
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "sensitivity.json"
    )
    args = ap.parse_args()
    cells: list[tuple[str, Trace, float | None, float]] = []
    for label, trace in traces():
        cells += [(label, trace, c, 0.5) for c in COLD_STARTS_S]
        cells += [(label, trace, None, s) for s in SLOS_S]
    t0 = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        rows = list(pool.map(_cell, cells))
    table = markdown(rows)
    print(table)
    write_json(
        args.out,
        {
            "command": "python benchmarks/bench_sensitivity.py",
            "machine": f"{platform.machine()} {platform.python_implementation()} "
            f"{platform.python_version()}, {args.jobs} worker processes",
            "profile": PROFILE,
            "seed": SEED,
            "wall_s": round(time.perf_counter() - t0, 1),
            "rows": rows,
            "markdown": table,
        },
    )
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
