"""Policy benchmark: six policies on the shared Azure traces and on a diurnal day.

Same simulator, cluster, seed and SLO for every policy. Prints a table per scenario and
writes ``benchmarks/results/policies.json``; also times the six-policy run on the 1-hour
conv trace (the <10 s goal) with and without the static-peak sizing search.

    .venv/bin/python benchmarks/bench_policies.py [--quick] [--out FILE]
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import CompareConfig, run_policies, size_static
from autoscaler.sim.policies import POLICY_NAMES
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import markdown_table, print_table, write_json
from autoscaler.sim.traces import Trace, diurnal_day, load_trace, scale_rate

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / ".." / "shared" / "traces"
PROFILE = "8b-h100"
SLO_TTFT_S = 0.5
SEED = 0


def scenarios(quick: bool) -> list[tuple[str, Trace, str]]:
    conv = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv.gz")
    code = load_trace(TRACES / "AzureLLMInferenceTrace_code.csv.gz")
    day_s = 6 * 3600.0 if quick else 86_400.0
    return [
        ("conv x4", scale_rate(conv, 4.0, seed=SEED), "conv trace, rate x4 (seeded duplication)"),
        ("code", code, "code trace as recorded"),
        (
            "diurnal day",
            diurnal_day(conv, day_s=day_s, trough=0.1, peak_scale=2.0, seed=SEED),
            f"conv tiled over {day_s / 3600:g} h, cosine day/night, peak x2, trough 0.1",
        ),
    ]


def timing(conv: Trace, cfg: CompareConfig) -> dict[str, Any]:
    t0 = time.perf_counter()
    static_n = size_static(conv, cfg)
    sizing_s = time.perf_counter() - t0
    fixed = CompareConfig(
        cluster=cfg.cluster, slo_ttft_s=cfg.slo_ttft_s, seed=cfg.seed, static_replicas=static_n
    )
    t1 = time.perf_counter()
    results, _ = run_policies(conv, POLICY_NAMES, fixed)
    run_s = time.perf_counter() - t1
    return {
        "trace": conv.name,
        "requests": len(conv),
        "six_policies_s": round(run_s, 2),
        "static_sizing_s": round(sizing_s, 2),
        "total_s": round(run_s + sizing_s, 2),
        "per_policy_s": {r.policy: round(r.wall_s, 3) for r in results},
        "goal_s": 10.0,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="6-hour diurnal day instead of 24 h")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "policies.json")
    args = ap.parse_args()
    cluster = ClusterConfig(profile=get_profile(PROFILE))
    cfg = CompareConfig(cluster=cluster, slo_ttft_s=SLO_TTFT_S, seed=SEED)
    doc: dict[str, Any] = {
        "command": "python benchmarks/bench_policies.py" + (" --quick" if args.quick else ""),
        "machine": f"{platform.machine()} {platform.python_implementation()} "
        f"{platform.python_version()}, single process",
        "profile": PROFILE,
        "slo_ttft_s": SLO_TTFT_S,
        "seed": SEED,
        "price_per_gpu_hour": cluster.price_per_gpu_hour,
        "cold_start": "default (warm node ~57 s median; new node adds provisioning + pull)",
        "scenarios": {},
    }
    conv = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv.gz")
    doc["timing"] = timing(conv, cfg)
    print(f"timing: {doc['timing']}", file=sys.stderr)
    for label, trace, description in scenarios(args.quick):
        t0 = time.perf_counter()

        def progress(name: str, frac: float, label: str = label) -> None:
            if frac >= 1.0:
                print(f"  {label}: {name} done", file=sys.stderr, flush=True)

        results, static_n = run_policies(trace, POLICY_NAMES, cfg, progress)
        summaries = [r.summary() for r in results]
        wall = time.perf_counter() - t0
        title = (
            f"{label}: {len(trace)} requests over {trace.duration_s / 3600:.2f} h, "
            f"{PROFILE}, TTFT SLO {SLO_TTFT_S} s, static-peak = {static_n}"
        )
        print_table(summaries, title)
        doc["scenarios"][label] = {
            "description": description,
            "trace": trace.name,
            "requests": len(trace),
            "duration_s": round(trace.duration_s, 1),
            "static_peak_replicas": static_n,
            "wall_s": round(wall, 2),
            "policies": {s["policy"]: s for s in summaries},
            "markdown": markdown_table(summaries),
        }
    write_json(args.out, doc)
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
