"""Oracle bound: what no autoscaler can beat on each benchmark scenario.

For every scenario of ``bench_policies.py`` (same traces, profile, SLO and seed) this
computes the clairvoyant oracle's GPU-hours vs misses frontier (`autoscaler.sim.oracle`:
replica count chosen per 60 s window with knowledge of the future, no cold start) and
sets it against the issue-7 targets and the measured policies read from
``benchmarks/results/policies.json`` (run ``bench_policies.py`` first for those columns):

* the fewest GPU-hours any policy needs for the attainment of ``ours`` (and of
  ``ours-capacity``) and for 99%;
* the fewest misses any policy can have within ``keda-seed``'s GPU-hours, i.e. whether
  "5x fewer misses than keda-seed at no more GPU-hours" is reachable at all;
* the fewest GPU-hours for 99% as a fraction of static-peak's (the "40%" target).

Prints a table and writes ``benchmarks/results/oracle.json``.

    .venv/bin/python benchmarks/bench_oracle.py [--quick] [--only "code,conv x4"] [--jobs N]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import PROFILE, SEED, SLO_TTFT_S, scenarios, setup

from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.oracle import (
    WindowTable,
    cold_start_frontier,
    frontier,
    min_gpu_hours,
    min_misses,
    reactive_frontier,
    window_misses,
)
from autoscaler.sim.replica import get_profile
from autoscaler.sim.report import publish

ROOT = Path(__file__).resolve().parents[1]
WINDOW_S = 60.0
WARMUP_S = 60.0


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _table_json(table: WindowTable) -> dict[str, Any]:
    return {
        "window_s": table.window_s,
        "gpus_per_replica": table.gpus_per_replica,
        "requests": table.requests.tolist(),
        "misses": table.misses.tolist(),
    }


def _table_from_json(d: dict[str, Any]) -> WindowTable:
    return WindowTable(
        window_s=float(d["window_s"]),
        gpus_per_replica=float(d["gpus_per_replica"]),
        requests=np.array(d["requests"], dtype=np.int64),
        misses=np.array(d["misses"], dtype=np.int64),
    )


def _bound_row(label: str, e: dict[str, Any]) -> str:
    """One row of the bounds table: ours against the three references."""
    o = e.get("ours")
    k = e.get("keda_seed")

    def ratio(gh: float | None, over: float | None) -> str:
        return "-" if gh is None else f"{gh:.2f} ({over}x)"

    cells = [f"{e['cold_start_s']:.0f}"]
    if o:
        cells += [
            f"{o['gpu_hours']:.2f} @ {o.get('misses', '-')}",
            ratio(o["oracle_gpu_hours_at_same_misses"], o["over_oracle"]),
            ratio(o["cold_start_gpu_hours_at_same_misses"], o["over_cold_start"]),
            ratio(o["reactive_gpu_hours_at_same_misses"], o["over_reactive"]),
        ]
    else:
        cells += ["-"] * 4
    if k:
        cells.append(f"{k['oracle_ratio']}x, {k['cold_start_ratio']}x, {k['reactive_ratio']}x")
    else:
        cells.append("-")
    return f"| {label} | " + " | ".join(cells) + " |"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--only", default="", help="comma-separated scenario labels to run")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--quick", action="store_true", help="the --quick scenarios of bench_policies")
    ap.add_argument(
        "--policies",
        type=Path,
        default=ROOT / "benchmarks" / "results" / "policies.json",
        help="bench_policies.py results to compare with",
    )
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "oracle.json")
    ap.add_argument(
        "--reuse-tables",
        action="store_true",
        help="reuse the per-window miss tables stored in --out (same simulator) instead of "
        "replaying every window; only the comparisons with --policies are recomputed",
    )
    args = ap.parse_args()
    measured: dict[str, Any] = {}
    if args.policies.exists():
        measured = json.loads(args.policies.read_text())["scenarios"]
    cluster = ClusterConfig(profile=get_profile(PROFILE))
    only = {s.strip() for s in args.only.split(",") if s.strip()}
    doc: dict[str, Any] = {
        "command": "python benchmarks/bench_oracle.py" + (" --quick" if args.quick else ""),
        "window_s": WINDOW_S,
        "warmup_s": WARMUP_S,
        "profile": PROFILE,
        "slo_ttft_s": SLO_TTFT_S,
        "seed": SEED,
        "policies_from": str(args.policies.relative_to(ROOT)) if measured else None,
        "scenarios": {},
    }
    rows = [
        "| scenario | static-peak GPU-h | oracle GPU-h @ sizing target (/ static) | ours GPU-h @ "
        "att. (oracle GPU-h there, ratio) | keda-seed GPU-h, misses | oracle misses @ keda "
        "GPU-h (keda / oracle) | ours: keda misses / ours, GPU-h <= keda | checks |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    previous: dict[str, Any] = {}
    if args.out.exists():
        previous = json.loads(args.out.read_text()).get("scenarios", {})
    if only:  # a partial rerun keeps the other scenarios
        doc["scenarios"] = {k: v for k, v in previous.items() if "row" in v}
    bound_rows = [
        "| scenario | cold start s | ours GPU-h @ misses | no-cold-start oracle GPU-h (ours / it) "
        "| cold-start oracle GPU-h (ours / it) | reactive reference GPU-h (ours / it) "
        "| keda-seed misses / fewest within its GPU-h: oracle, cold-start oracle, reactive |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for label, trace, _description in scenarios(quick=args.quick):
            if only and label not in only:
                continue
            m = measured.get(label, {})
            static_n = int(m.get("static_peak_replicas", 0)) or 8
            profile, slo = setup(label)
            cluster = ClusterConfig(profile=get_profile(profile))
            target = float(m.get("static_sizing", {}).get("target", 0.99))
            t0 = time.perf_counter()
            stored = previous.get(label, {}).get("window_table")
            if args.reuse_tables and stored is not None:
                table = _table_from_json(stored)
            else:
                table = window_misses(
                    trace,
                    cluster,
                    max_replicas=static_n + 6,
                    window_s=WINDOW_S,
                    warmup_s=WARMUP_S,
                    slo_ttft_s=slo,
                    seed=SEED,
                    map_fn=lambda f, it: pool.map(f, it, chunksize=4),
                )
            pts = frontier(table)
            cold_s = float(cluster.cold_start.warm_median_s)
            cold_pts = cold_start_frontier(table, cold_s)
            reactive_pts = reactive_frontier(table, cold_s)
            n_req = table.total_requests
            entry: dict[str, Any] = {
                "requests": n_req,
                "windows": len(table.requests),
                "wall_s": round(time.perf_counter() - t0, 1),
                "cheapest": {"gpu_hours": _r(pts[0].gpu_hours), "misses": pts[0].misses},
                "fewest_misses": {"gpu_hours": _r(pts[-1].gpu_hours), "misses": pts[-1].misses},
                "gpu_hours_at_attainment": {
                    str(a): _r(min_gpu_hours(pts, (1 - a) * n_req))
                    for a in (0.95, 0.98, 0.99, 0.995)
                },
                "sizing_target": target,
                "gpu_hours_at_sizing_target": _r(min_gpu_hours(pts, (1 - target) * n_req)),
                "frontier": [
                    [_r(p.gpu_hours, 4), p.misses] for p in pts[:: max(1, len(pts) // 200)]
                ],
                "cold_start_s": cold_s,
                "cold_start_frontier": [[_r(p.gpu_hours, 4), p.misses] for p in cold_pts],
                "reactive_frontier": [[_r(p.gpu_hours, 4), p.misses] for p in reactive_pts],
                "window_table": _table_json(table),
            }
            pol = m.get("policies", {})
            sp, keda = pol.get("static-peak"), pol.get("keda-seed")
            gt = entry["gpu_hours_at_sizing_target"]
            cells = ["-"] * 7
            if sp:
                entry["static_peak_gpu_hours"] = sp["gpu_hours"]
                entry["oracle_target_over_static"] = _r(gt / sp["gpu_hours"]) if gt else None
                cells[0] = f"{sp['gpu_hours']:.2f}"
                cells[1] = (
                    f"{gt:.2f} @ {target:.4f} ({entry['oracle_target_over_static']})"
                    if gt
                    else "unreachable"
                )
            if keda:
                best = min_misses(pts, keda["gpu_hours"])
                entry["keda_seed"] = {
                    "gpu_hours": keda["gpu_hours"],
                    "misses": keda["slo_misses"],
                    "oracle_misses_within_its_gpu_hours": _r(best, 1),
                    "oracle_ratio": _r(keda["slo_misses"] / best, 2) if best else None,
                }
                for key, fp in (("cold_start", cold_pts), ("reactive", reactive_pts)):
                    b2 = min_misses(fp, keda["gpu_hours"])
                    entry["keda_seed"][f"{key}_misses_within_its_gpu_hours"] = _r(b2, 1)
                    entry["keda_seed"][f"{key}_ratio"] = (
                        _r(keda["slo_misses"] / b2, 2) if b2 else None
                    )
                cells[3] = f"{keda['gpu_hours']:.2f}, {keda['slo_misses']}"
                ratio = entry["keda_seed"]["oracle_ratio"]
                cells[4] = f"{best:.0f} ({ratio}x)" if best is not None else "-"
            checks: list[str] = []
            for mine in ("ours", "ours-capacity", "ours-lean", "ours-cost"):
                ours = pol.get(mine)
                if not ours:
                    continue
                at = min_gpu_hours(pts, ours["slo_misses"])
                e: dict[str, Any] = {
                    "gpu_hours": ours["gpu_hours"],
                    "misses": ours["slo_misses"],
                    "attainment": ours["slo_attainment"],
                    "oracle_gpu_hours_at_same_misses": _r(at),
                    "over_oracle": _r(ours["gpu_hours"] / at) if at else None,
                    "within_1_25x_oracle": at is not None and ours["gpu_hours"] <= 1.25 * at,
                }
                for key, fp in (("cold_start", cold_pts), ("reactive", reactive_pts)):
                    at2 = min_gpu_hours(fp, ours["slo_misses"])
                    e[f"{key}_gpu_hours_at_same_misses"] = _r(at2)
                    e[f"over_{key}"] = _r(ours["gpu_hours"] / at2) if at2 else None
                if keda:
                    oracle_ratio = entry["keda_seed"]["oracle_ratio"]
                    mr = keda["slo_misses"] / max(1, ours["slo_misses"])
                    e["keda_misses_over_ours"] = round(mr, 2)
                    e["gpu_hours_le_keda"] = ours["gpu_hours"] <= keda["gpu_hours"]
                    e["keda_target_applies"] = bool(oracle_ratio) and oracle_ratio >= 3.0
                    e["keda_target_met"] = mr >= 2.5 and e["gpu_hours_le_keda"]
                entry[mine] = e
                if mine != "ours":
                    continue
                cells[2] = (
                    f"{ours['gpu_hours']:.2f} @ {ours['slo_attainment']:.4f} "
                    f"({_r(at, 2)}, {e['over_oracle']}x)"
                )
                if keda:
                    cells[5] = f"{e['keda_misses_over_ours']}x, {e['gpu_hours_le_keda']}"
                    keda_check = (
                        ("2.5x vs keda met" if e["keda_target_met"] else "2.5x vs keda NOT met")
                        if e["keda_target_applies"]
                        else "2.5x vs keda n/a (oracle < 3x)"
                    )
                    checks.append(keda_check)
                checks.append("<= 1.25x oracle" if e["within_1_25x_oracle"] else "> 1.25x oracle")
            cells[6] = "; ".join(checks) or "-"
            entry["row"] = f"| {label} | " + " | ".join(cells) + " |"
            entry["bound_row"] = _bound_row(label, entry)
            doc["scenarios"][label] = entry
            print(
                f"{label}: {json.dumps({k: v for k, v in entry.items() if k != 'frontier'})}",
                file=sys.stderr,
            )
    order = [label for label, _, _ in scenarios(quick=args.quick)]
    done = sorted(doc["scenarios"], key=lambda k: order.index(k) if k in order else len(order))
    doc["scenarios"] = {k: doc["scenarios"][k] for k in done}
    doc["markdown"] = "\n".join(rows + [doc["scenarios"][k]["row"] for k in done])
    doc["bounds_markdown"] = "\n".join(
        bound_rows
        + [doc["scenarios"][k]["bound_row"] for k in done if "bound_row" in doc["scenarios"][k]]
    )
    print(doc["bounds_markdown"])
    publish(args.out, doc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
