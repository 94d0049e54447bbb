"""Prefill/decode disaggregation vs aggregated serving (issue 37): GPU-hours and TTFT/ITL
SLO attainment on the policy benchmark's scenarios.

- aggregated: the default policy (``ours``) on the single-Deployment simulator, entering
  the trace where it settles (`sim/compare.py`), as in bench_policies.py;
- disaggregated: a prefill and a decode pool of the same replica profile, cold starts and
  price, sized by `size_roles` with ``ours``' HPA behaviour (`sim/disagg.py`); targets from
  the step model (`role_targets`) at the default utilisations and at a leaner setting;
  once more with a free KV transfer and once with a 4x slower link (sensitivity).

Scenarios and TTFT SLOs as docs/benchmarks.md (bench_policies.py ``scenarios``); ITL SLO
per token: 50 ms for chat (inference-perf interactive-chat ITL p99), 100 ms for code
(inference-perf code-generation), calibration.md section 5. Attainment: TTFT over
admitted requests; ITL over generated tokens after the first.

    .venv/bin/python benchmarks/bench_pd.py [--only LABELS] [--jobs N]

Prints a table and writes benchmarks/results/pd.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.sim.compare import run_comparison
from autoscaler.sim.disagg import (
    NO_TRANSFER,
    DisaggConfig,
    KvTransfer,
    itl_attainment,
    role_targets,
    settled_roles,
    simulate_disagg,
)
from autoscaler.sim.report import publish

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import SEED, scenario_config, scenarios  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("conv x4", "code", "long-context chat")
SLO_ITL_S = {"conv x4": 0.05, "code": 0.1, "long-context chat": 0.05}
# (row name, prefill utilisation, decode utilisation, transfer)
DISAGG_ROWS: tuple[tuple[str, float, float, KvTransfer], ...] = (
    ("disagg", 0.5, 0.75, KvTransfer()),
    ("disagg lean", 0.7, 1.0, KvTransfer()),
    ("disagg, free transfer", 0.5, 0.75, NO_TRANSFER),
    ("disagg, 4x slower link", 0.5, 0.75, KvTransfer(bandwidth_bytes_per_s=25e9 / 4)),
)


def run_scenario(label: str) -> dict[str, Any]:
    trace = next(t for name, t, _d in scenarios(quick=True, seed=SEED) if name == label)
    cfg = scenario_config(label)
    slo_itl = SLO_ITL_S[label]
    started = time.perf_counter()
    results, _sizing = run_comparison(trace, ["ours"], replace(cfg, static_replicas=1))
    agg = results[0]
    s = agg.summary()
    rows: list[dict[str, Any]] = [
        {
            "deployment": "aggregated (ours)",
            "gpu_hours": round(agg.gpu_hours, 4),
            "ttft_attainment": s["slo_attainment"],
            "itl_attainment": itl_attainment(agg.itl_samples, slo_itl),
            "replicas": f"max {agg.max_replicas}",
            "dropped": agg.dropped,
            "wall_s": round(time.perf_counter() - started, 1),
        }
    ]
    for name, pu, du, transfer in DISAGG_ROWS:
        started = time.perf_counter()
        targets = role_targets(
            cfg.cluster.profile,
            trace,
            slo_ttft_s=cfg.slo_ttft_s,
            slo_itl_s=slo_itl,
            prefill_utilisation=pu,
            decode_utilisation=du,
        )
        dcfg = DisaggConfig(cluster=cfg.cluster, targets=targets, transfer=transfer)
        kw = {"slo_ttft_s": cfg.slo_ttft_s, "slo_itl_s": slo_itl, "seed": cfg.seed}
        init = settled_roles(trace, dcfg, **kw)  # type: ignore[arg-type]
        res = simulate_disagg(trace, dcfg, initial=init, **kw)  # type: ignore[arg-type]
        d = res.summary()
        rows.append(
            {
                "deployment": name,
                "gpu_hours": d["gpu_hours"],
                "gpu_hours_prefill": d["gpu_hours_prefill"],
                "gpu_hours_decode": d["gpu_hours_decode"],
                "ttft_attainment": d["ttft_attainment"],
                "itl_attainment": d["itl_attainment"],
                "replicas": (
                    f"max {d['max_prefill']}P + {d['max_decode']}D, mean "
                    f"{np.mean(res.timeline_prefill):.1f}P + {np.mean(res.timeline_decode):.1f}D"
                ),
                "dropped": d["dropped"],
                "targets": {
                    "prompt_tokens_per_s_per_prefill": round(
                        targets.prompt_tokens_per_s_per_prefill
                    ),
                    "running_per_decode": round(targets.running_per_decode, 1),
                },
                "kv_transfer_us_per_token": round(transfer.s_per_token * 1e6, 2),
                "wall_s": round(time.perf_counter() - started, 1),
            }
        )
    base = rows[0]["gpu_hours"]
    for r in rows:
        r["ratio_to_aggregated"] = round(r["gpu_hours"] / base, 3) if base else None
    return {
        "scenario": label,
        "requests": len(trace),
        "slo_ttft_s": cfg.slo_ttft_s,
        "slo_itl_s": slo_itl,
        "profile": cfg.cluster.profile.name,
        "rows": rows,
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}%"


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "| scenario (TTFT / ITL SLO) | deployment | GPU-h | disagg / aggregated "
        "| TTFT attainment | ITL attainment | replicas |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for res in results:
        head = f"{res['scenario']} ({res['slo_ttft_s']:g} s / {1000 * res['slo_itl_s']:g} ms)"
        for r in res["rows"]:
            lines.append(
                f"| {head} | {r['deployment']} | {r['gpu_hours']:.2f} "
                f"| {r['ratio_to_aggregated']:.3f} | {_pct(r['ttft_attainment'])} "
                f"| {_pct(r['itl_attainment'])} | {r['replicas']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--only", default=",".join(LABELS), help="comma-separated scenarios")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "pd.json")
    args = ap.parse_args(argv)
    labels = [x.strip() for x in args.only.split(",") if x.strip()]
    for x in labels:
        if x not in LABELS:
            raise SystemExit(f"--only: value {x!r} must be one of {', '.join(LABELS)}")
    if args.jobs < 1:
        raise SystemExit(f"--jobs: value {args.jobs} must be >= 1")
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_scenario, labels))
    else:
        results = [run_scenario(x) for x in labels]
    cmd = "python benchmarks/bench_pd.py"
    if args.only != ",".join(LABELS):
        cmd += f' --only "{args.only}"'
    publish(args.out, {"command": cmd, "results": results, "markdown": markdown(results)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
