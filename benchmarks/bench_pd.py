"""Prefill/decode disaggregation vs aggregated serving (issue 37): GPU-hours and TTFT/ITL
SLO attainment on the policy benchmark's scenarios.

- aggregated: the default policy (``ours``) on the single-Deployment simulator, entering
  the trace where it settles (`sim/compare.py`), as in bench_policies.py;
- disaggregated: a prefill and a decode pool of the same replica profile, cold starts and
  price, sized by `size_roles` with ``ours``' HPA behaviour (`sim/disagg.py`); targets from
  the step model (`role_targets`); then with ``ours``' prompt-token target for prefill,
  polled every 15 s instead of every second, with a free KV transfer and with a 4x
  slower link (sensitivity); and with the decode pool on MIG 2g.20gb slices (a third of
  an H100 each, FP8 weights; `sim/variants.py`) where the slice's 8k context covers the
  scenario (not on the 128k long-context hour);
- fixed fleets, no autoscaler: the smallest aggregated fleet and the smallest prefill +
  decode split meeting the same TTFT and ITL goals (the architecture alone).

Scenarios and TTFT SLOs as docs/benchmarks.md (bench_policies.py ``scenarios``); ITL SLO
per token: 50 ms for chat (inference-perf interactive-chat ITL p99), 100 ms for code
(inference-perf code-generation), calibration.md section 5. Attainment: TTFT over
admitted requests; ITL over generated tokens after the first.

    .venv/bin/python benchmarks/bench_pd.py [--only LABELS] [--jobs N] [--minutes N]

Cost is GPU-dollars ($4 per H100-hour, slices billed a third): the same ratio as
GPU-hours wherever both pools run whole H100s.

Prints a table and writes benchmarks/results/pd.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.policy.roles import RoleTargets
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import (
    CompareConfig,
    _sizing_target,
    run_comparison,
    smallest_satisfying,
)
from autoscaler.sim.disagg import (
    NO_TRANSFER,
    DisaggConfig,
    KvTransfer,
    itl_attainment,
    role_targets,
    settled_roles,
    simulate_disagg,
)
from autoscaler.sim.policies import StaticPeak
from autoscaler.sim.report import publish
from autoscaler.sim.simulator import simulate
from autoscaler.sim.traces import Trace
from autoscaler.sim.variants import MIG_2G20GB

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_policies import SEED, scenario_config, scenarios

ROOT = Path(__file__).resolve().parents[1]
LABELS = ("conv x4", "code", "long-context chat")
SLO_ITL_S = {"conv x4": 0.05, "code": 0.1, "long-context chat": 0.05}
OURS_PROMPT_TARGET = 8000.0  # ours' prompt tokens/s per replica (policy/schema.py default)
# (row name, prefill prompt tokens/s target or None: step model, transfer, poll s,
#  decode pool on MIG 2g.20gb slices)
DISAGG_ROWS: tuple[tuple[str, float | None, KvTransfer, float, bool], ...] = (
    ("disagg", None, KvTransfer(), 1.0, False),
    ("disagg, prefill target 8000 tok/s", OURS_PROMPT_TARGET, KvTransfer(), 1.0, False),
    ("disagg, 15 s poll", None, KvTransfer(), 15.0, False),
    ("disagg, free transfer", None, NO_TRANSFER, 1.0, False),
    ("disagg, 4x slower link", None, KvTransfer(bandwidth_bytes_per_s=25e9 / 4), 1.0, False),
    ("disagg, decode on MIG 2g.20gb", None, KvTransfer(), 1.0, True),
)


def mig_decode_pool(cfg: CompareConfig) -> ClusterConfig:
    """The decode pool on MIG 2g.20gb slices: three per H100, the H100's price per GPU,
    the scenario's cold starts."""
    return replace(cfg.cluster, profile=MIG_2G20GB, sharing="mig", replicas_per_gpu=3)


ITL_GOAL = 0.99  # fixed fleets: share of tokens within the ITL SLO
MAX_FLEET = 64


def _smallest(ok: Callable[[int], bool], lo: int = 1, hi: int = MAX_FLEET) -> int | None:
    """Smallest n in [lo, hi] with ok(n) (ok monotone in n); None if not even hi."""
    return smallest_satisfying(ok, lo, hi) if ok(hi) else None


def fixed_fleets(
    trace: Trace, cfg: CompareConfig, slo_itl: float, targets: RoleTargets
) -> dict[str, Any]:
    """The architecture without the autoscaler: the smallest fixed aggregated fleet and
    the smallest fixed prefill + decode split that meet the same goals (TTFT: static-peak's
    sizing target, the goal x feasible ceiling when the goal is above it; ITL:
    `ITL_GOAL`), every pod Ready from t = 0."""
    _adm, _ceiling, ttft_goal = _sizing_target(trace, cfg)

    def agg(n: int) -> tuple[float, float, float]:
        r = simulate(trace, StaticPeak(n), cfg.cluster, slo_ttft_s=cfg.slo_ttft_s, seed=cfg.seed)
        att = r.summary()["slo_attainment"] or 0.0
        return r.gpu_hours, att, itl_attainment(r.itl_samples, slo_itl) or 0.0

    memo_a: dict[int, tuple[float, float, float]] = {}
    memo_d: dict[tuple[int, int], tuple[float, float, float]] = {}

    def agg_m(n: int) -> tuple[float, float, float]:
        if n not in memo_a:
            memo_a[n] = agg(n)
        return memo_a[n]

    def dis(p: int, d: int) -> tuple[float, float, float]:
        if (p, d) not in memo_d:
            fixed = replace(targets, min_prefill=p, max_prefill=p, min_decode=d, max_decode=d)
            dcfg = DisaggConfig(cluster=cfg.cluster, targets=fixed)
            r = simulate_disagg(
                trace,
                dcfg,
                slo_ttft_s=cfg.slo_ttft_s,
                slo_itl_s=slo_itl,
                initial=(p, d),
                seed=cfg.seed,
            )
            s = r.summary()
            memo_d[(p, d)] = (r.gpu_hours, s["ttft_attainment"] or 0.0, s["itl_attainment"] or 0.0)
        return memo_d[(p, d)]

    n = _smallest(lambda k: agg_m(k)[1] >= ttft_goal and agg_m(k)[2] >= ITL_GOAL)
    d_big = MAX_FLEET // 4
    p = _smallest(lambda k: dis(k, d_big)[1] >= ttft_goal)
    d = None
    if p is not None:
        d = _smallest(lambda k: dis(p, k)[1] >= ttft_goal and dis(p, k)[2] >= ITL_GOAL, hi=d_big)
    out: dict[str, Any] = {"ttft_goal": round(ttft_goal, 5), "itl_goal": ITL_GOAL}
    if n is not None:
        h, a, i = agg_m(n)
        out["aggregated"] = {"replicas": n, "gpu_hours": round(h, 4), "ttft": a, "itl": i}
    if p is not None and d is not None:
        h, a, i = dis(p, d)
        out["disagg"] = {
            "prefill": p,
            "decode": d,
            "gpu_hours": round(h, 4),
            "ttft": a,
            "itl": i,
        }
    if "aggregated" in out and "disagg" in out:
        out["ratio"] = round(out["disagg"]["gpu_hours"] / out["aggregated"]["gpu_hours"], 3)
    return out


def run_scenario(job: tuple[str, float | None]) -> dict[str, Any]:
    label, minutes = job
    trace = next(t for name, t, _d in scenarios(quick=True, seed=SEED) if name == label)
    if minutes is not None:
        trace = trace.window(0.0, minutes * 60.0)
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
            "gpu_dollars": round(agg.gpu_hours * cfg.cluster.price_per_gpu_hour, 3),
            "ttft_attainment": s["slo_attainment"],
            "itl_attainment": itl_attainment(agg.itl_samples, slo_itl),
            "replicas": f"max {agg.max_replicas}",
            "dropped": agg.dropped,
            "wall_s": round(time.perf_counter() - started, 1),
        }
    ]
    model_targets = role_targets(
        cfg.cluster.profile, trace, slo_ttft_s=cfg.slo_ttft_s, slo_itl_s=slo_itl
    )
    for name, prompt_target, transfer, poll_s, on_mig in DISAGG_ROWS:
        decode_pool = mig_decode_pool(cfg) if on_mig else None
        if decode_pool is not None and (
            decode_pool.profile.max_model_len < cfg.cluster.profile.max_model_len
            and bool((trace.prompt_tokens + trace.output_tokens > MIG_2G20GB.max_model_len).any())
        ):
            continue  # the slice cannot hold this scenario's contexts
        started = time.perf_counter()
        targets = model_targets
        if decode_pool is not None:
            targets = role_targets(
                cfg.cluster.profile,
                trace,
                slo_ttft_s=cfg.slo_ttft_s,
                slo_itl_s=slo_itl,
                decode_profile=decode_pool.profile,
            )
        if prompt_target is not None:
            targets = replace(targets, prompt_tokens_per_s_per_prefill=prompt_target)
        dcfg = DisaggConfig(
            cluster=cfg.cluster,
            targets=targets,
            transfer=transfer,
            poll_interval_s=poll_s,
            decode_cluster=decode_pool,
        )
        slo = cfg.slo_ttft_s
        init = settled_roles(trace, dcfg, slo_ttft_s=slo, slo_itl_s=slo_itl, seed=cfg.seed)
        res = simulate_disagg(
            trace, dcfg, slo_ttft_s=slo, slo_itl_s=slo_itl, initial=init, seed=cfg.seed
        )
        d = res.summary()
        rows.append(
            {
                "deployment": name,
                "gpu_hours": d["gpu_hours"],
                "gpu_dollars": d["gpu_dollars"],
                "rejected": d["rejected"],
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
    base = rows[0]["gpu_dollars"]
    for r in rows:
        r["ratio_to_aggregated"] = round(r["gpu_dollars"] / base, 3) if base else None
    started = time.perf_counter()
    fleets = fixed_fleets(trace, cfg, slo_itl, model_targets)
    fleets["wall_s"] = round(time.perf_counter() - started, 1)
    return {
        "fixed_fleets": fleets,
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
        "| scenario (TTFT / ITL SLO) | deployment | GPU-h | GPU-$ | $ disagg / aggregated "
        "| TTFT attainment | ITL attainment | replicas |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for res in results:
        head = f"{res['scenario']} ({res['slo_ttft_s']:g} s / {1000 * res['slo_itl_s']:g} ms)"
        for r in res["rows"]:
            lines.append(
                f"| {head} | {r['deployment']} | {r['gpu_hours']:.2f} | {r['gpu_dollars']:.2f} "
                f"| {r['ratio_to_aggregated']:.3f} | {_pct(r['ttft_attainment'])} "
                f"| {_pct(r['itl_attainment'])} | {r['replicas']} |"
            )
    lines += [
        "",
        "| scenario | TTFT / ITL goal | fixed aggregated | fixed prefill + decode "
        "| disagg / aggregated |",
        "|---|---:|---|---|---:|",
    ]
    for res in results:
        f = res["fixed_fleets"]
        a, d = f.get("aggregated"), f.get("disagg")
        a_s = (
            "-"
            if a is None
            else (
                f"{a['replicas']} ({a['gpu_hours']:.2f} GPU-h; {_pct(a['ttft'])}, {_pct(a['itl'])})"
            )
        )
        d_s = (
            "-"
            if d is None
            else (
                f"{d['prefill']}P + {d['decode']}D ({d['gpu_hours']:.2f} GPU-h; "
                f"{_pct(d['ttft'])}, {_pct(d['itl'])})"
            )
        )
        lines.append(
            f"| {res['scenario']} | {_pct(f['ttft_goal'])} / {_pct(f['itl_goal'])} | {a_s} "
            f"| {d_s} | {f.get('ratio', '-')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--only", default=",".join(LABELS), help="comma-separated scenarios")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=None, help="first N minutes of each trace")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "pd.json")
    args = ap.parse_args(argv)
    labels = [x.strip() for x in args.only.split(",") if x.strip()]
    for x in labels:
        if x not in LABELS:
            raise SystemExit(f"--only: value {x!r} must be one of {', '.join(LABELS)}")
    if args.jobs < 1:
        raise SystemExit(f"--jobs: value {args.jobs} must be >= 1")
    if args.minutes is not None and not args.minutes > 1:
        raise SystemExit(f"--minutes: value {args.minutes} must be > 1")
    jobs = [(x, args.minutes) for x in labels]
    if args.jobs > 1:
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            results = list(pool.map(run_scenario, jobs))
    else:
        results = [run_scenario(j) for j in jobs]
    cmd = "python benchmarks/bench_pd.py"
    if args.only != ",".join(LABELS):
        cmd += f' --only "{args.only}"'
    if args.minutes is not None:
        cmd += f" --minutes {args.minutes:g}"
    publish(args.out, {"command": cmd, "results": results, "markdown": markdown(results)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
