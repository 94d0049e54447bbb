"""One model on several GPU variants (issue 37): what a mix of types saves over one type.

Llama-3-8B served by a full H100, a MIG 2g.20gb slice and an L4 (profiles in
autoscaler/sim/variants.py, sources in docs/simulator.md), per scenario:

- one variant only (each type), sized by the greedy rule over that variant alone;
- the greedy rule over all three (cheapest placeable up, most expensive down), ranked
  per unit of capacity and gap-aware (the cost of closing the gap alone);
- the optimised mix (scipy milp, re-balanced every 10 minutes, greedy reacting upward);
- the offline optimum (the same program with hindsight per 10-minute window, replicas
  ready at each window's start).

Capacities per replica and size bucket come from Mélange-style profiling on the
scenario's own requests (99% of idle-feasible requests under the TTFT SLO). The
attainment denominator is the same for every row: requests some variant serves within
the SLO alone on an idle replica. "best single" is the cheapest one-type row whose
attainment is within 0.5 points of the best one-type attainment.

    .venv/bin/python benchmarks/bench_gpu_variants.py [--scenarios LIST] [--minutes N]

Prints a table and writes benchmarks/results/gpu_variants.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.sim.report import publish
from autoscaler.sim.traces import Trace, load_trace, long_context_chat
from autoscaler.sim.variants import (
    BUCKETS,
    GreedyPolicy,
    MixPolicy,
    Observation,
    OfflineOptimum,
    VariantPolicy,
    VariantSetup,
    capacity_table,
    run_variants,
    servable_mask,
    single,
    standard_setups,
)

ROOT = Path(__file__).resolve().parents[1]
TRACES = ROOT / "data" / "traces"
SCENARIOS: dict[str, tuple[str, float]] = {  # label -> (trace, TTFT SLO s)
    "conv": ("AzureLLMInferenceTrace_conv.csv.gz", 0.5),
    "code": ("AzureLLMInferenceTrace_code.csv.gz", 0.5),
    "long-context": ("long-context chat", 2.0),
}
TOLERANCE_PT = 0.5  # attainment points within which a cheaper single type counts as best


def load(label: str, minutes: float | None) -> Trace:
    src, _slo = SCENARIOS[label]
    trace = long_context_chat(seed=0) if label == "long-context" else load_trace(TRACES / src)
    if minutes is not None:
        trace = trace.window(0.0, minutes * 60.0)
    return trace


def policies(
    trace: Trace, setups: Mapping[str, VariantSetup], caps: Mapping[str, Mapping[int, float]]
) -> list[VariantPolicy]:
    out: list[VariantPolicy] = [single(v, setups, caps) for v in setups]
    out.append(GreedyPolicy("greedy (3 variants)", setups, caps))
    out.append(GreedyPolicy("greedy gap-aware (3 variants)", setups, caps, gap_aware=True))
    out.append(MixPolicy(setups, caps))
    out.append(OfflineOptimum(trace, setups, caps))
    return out


def _initial(policy: VariantPolicy, trace: Trace, setups: Mapping[str, Any]) -> dict[str, int]:
    """Each policy starts from its own answer to the first minute's load."""
    first = trace.window(0.0, 60.0)
    b = np.minimum(
        np.searchsorted(np.array(BUCKETS), first.prompt_tokens + first.output_tokens),
        len(BUCKETS) - 1,
    )
    rates = {int(k): float((b == k).sum()) / 60.0 for k in np.unique(b)}
    obs = Observation(
        0.0, rates, dict.fromkeys(setups, 0), dict.fromkeys(setups, 0), dict.fromkeys(setups)
    )
    return policy.desired(obs)


def run_scenario(job: tuple[str, float | None, int, float | None]) -> dict[str, Any]:
    label, minutes, iterations, h100_price = job
    t0 = time.perf_counter()
    _src, slo = SCENARIOS[label]
    trace = load(label, minutes)
    setups = standard_setups(long_context=label == "long-context", h100_price=h100_price)
    caps = capacity_table(setups, trace, slo, iterations=iterations)
    counted = servable_mask(setups, trace, slo)
    rows = []
    for pol in policies(trace, setups, caps):
        res = run_variants(
            trace,
            setups,
            pol,
            caps,
            slo_ttft_s=slo,
            initial=_initial(pol, trace, setups),
            counted=counted,
        )
        rows.append(res.summary())
    singles = [r for r in rows if str(r["policy"]).startswith("only ")]
    top = max(float(r["ttft_slo_attainment"]) for r in singles)
    eligible = [r for r in singles if float(r["ttft_slo_attainment"]) >= top - TOLERANCE_PT / 100]
    best = min(eligible, key=lambda r: float(r["gpu_dollars"]))
    offline = next(r for r in rows if r["policy"] == "offline optimum")
    for r in rows:
        r["ratio_to_best_single"] = round(float(r["gpu_dollars"]) / float(best["gpu_dollars"]), 3)
        r["gap_to_offline"] = round(
            float(r["gpu_dollars"]) / float(offline["gpu_dollars"]) - 1.0, 3
        )
        r["attainment_vs_best_single_pt"] = round(
            100 * (float(r["ttft_slo_attainment"]) - float(best["ttft_slo_attainment"])), 2
        )
    return {
        "scenario": label,
        "trace": trace.name,
        "requests": len(trace),
        "slo_ttft_s": slo,
        "best_single": best["policy"],
        "capacity_req_per_s": {
            v: {str(BUCKETS[b]): round(c, 3) for b, c in sorted(cs.items())}
            for v, cs in caps.items()
        },
        "price_per_replica_hour": {
            v: round(s.price_per_replica_hour, 4) for v, s in setups.items()
        },
        "rows": rows,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario | policy | GPU-$ | TTFT-SLO att. | vs best single ($ / att. pt) "
        "| gap to offline | mean replicas |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for res in results:
        for r in res["rows"]:
            reps = ", ".join(f"{k} {v:g}" for k, v in r["mean_replicas"].items() if v)
            lines.append(
                f"| {res['scenario']} | {r['policy']} | {r['gpu_dollars']:.2f} "
                f"| {100 * r['ttft_slo_attainment']:.2f}% "
                f"| {r['ratio_to_best_single']:.2f}x / {r['attainment_vs_best_single_pt']:+.2f} "
                f"| {100 * r['gap_to_offline']:+.1f}% | {reps} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default=",".join(SCENARIOS))
    ap.add_argument("--minutes", type=float, default=None, help="first N minutes of each trace")
    ap.add_argument("--iterations", type=int, default=8, help="profiling bisection steps")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument(
        "--h100-price",
        type=float,
        default=None,
        help="USD per H100-hour (slices pay a third of it); default 4.0, calibration.md",
    )
    ap.add_argument(
        "--out",
        type=Path,
        default=None,
        help="default benchmarks/results/gpu_variants.json; with --h100-price P,"
        " gpu_variants_h100_at_P.json (the headline file keeps the $4 run)",
    )
    args = ap.parse_args(argv)
    if args.out is None:
        name = "gpu_variants.json"
        if args.h100_price is not None:
            name = f"gpu_variants_h100_at_{args.h100_price:g}.json"
        args.out = ROOT / "benchmarks" / "results" / name
    labels = [x.strip() for x in args.scenarios.split(",") if x.strip()]
    for x in labels:
        if x not in SCENARIOS:
            raise SystemExit(f"--scenarios: value {x!r} must be one of {', '.join(SCENARIOS)}")
    if args.minutes is not None and not args.minutes > 1:
        raise SystemExit(f"--minutes: value {args.minutes} must be > 1")
    if args.h100_price is not None and not args.h100_price > 0:
        raise SystemExit(f"--h100-price: value {args.h100_price} must be > 0")
    jobs = [(x, args.minutes, args.iterations, args.h100_price) for x in labels]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_scenario, jobs))
    else:
        results = [run_scenario(j) for j in jobs]
    cmd = "python benchmarks/bench_gpu_variants.py"
    if args.scenarios != ",".join(SCENARIOS):
        cmd += f" --scenarios {args.scenarios}"
    if args.minutes is not None:
        cmd += f" --minutes {args.minutes:g}"
    if args.iterations != 8:
        cmd += f" --iterations {args.iterations}"
    if args.h100_price is not None:
        cmd += f" --h100-price {args.h100_price:g}"
    publish(args.out, {"command": cmd, "results": results, "markdown": markdown(results)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
