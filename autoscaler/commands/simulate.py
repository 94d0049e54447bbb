"""`llm-autoscaler simulate`: replay a trace against policies and compare cost and SLO."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.errors import ConfigError

SYNTHETIC_LONG_CONTEXT = "synthetic:long-context-chat"
# `--profile auto` candidates, in order of preference (the same engine, growing context)
AUTO_PROFILES = ("8b-h100", "8b-h100-128k")
AUTO_QUANTILE = 0.999


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "simulate",
        help="replay a request trace against autoscaling policies (cost vs SLO)",
        description="Trace-driven simulation of vLLM replicas on a GPU cluster; compares "
        "policies on the same trace, cluster and seed.",
    )
    p.add_argument(
        "--trace",
        required=True,
        help="Azure CSV (.csv/.csv.gz) or JSONL trace, or 'synthetic:long-context-chat' "
        "(a seeded long-context chat hour, see docs/simulator.md)",
    )
    p.add_argument(
        "--policy",
        default="all",
        help="'all' or comma-separated policy names; 'oracle' adds the clairvoyant bound",
    )
    p.add_argument(
        "--static-sweep",
        default=None,
        metavar="A..B",
        help="also run fixed fleets of A..B replicas (rows static-A .. static-B)",
    )
    p.add_argument(
        "--profile",
        default="8b-h100",
        help="hardware profile of a replica, or 'auto': the first of "
        f"{', '.join(AUTO_PROFILES)} whose context covers the trace's 99.9th-percentile "
        "request (prompt + output)",
    )
    p.add_argument("--slo-ttft-s", type=float, default=0.5, help="TTFT SLO per request")
    p.add_argument(
        "--cold-start",
        default="default",
        help="preset (default, s3-streamer, download, 70b) or seconds: warm-node median",
    )
    p.add_argument(
        "--price-per-gpu-hour", type=float, default=4.0, help="USD per GPU-hour (default: 4.0)"
    )
    p.add_argument("--warm-pool", type=int, default=0, help="pause pods kept warm")
    p.add_argument("--rate-scale", type=float, default=1.0, help="thin/duplicate requests")
    p.add_argument("--speed-up", type=float, default=1.0, help="compress time")
    p.add_argument(
        "--diurnal-day-s",
        type=float,
        default=None,
        help="tile the trace over a day of this length under a day/night envelope",
    )
    p.add_argument("--static-replicas", type=int, default=None, help="skip static sizing")
    p.add_argument("--json", type=Path, default=None, help="write results JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG plot here")
    p.add_argument("--seed", type=int, default=0, help="cluster and sampling seed (default: 0)")
    p.add_argument("--quiet", action="store_true", help="no progress on stderr")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    from autoscaler.sim.cluster import ClusterConfig, parse_cold_start
    from autoscaler.sim.compare import (
        CompareConfig,
        oracle_report,
        parse_static_sweep,
        run_comparison,
    )
    from autoscaler.sim.policies import POLICY_NAMES
    from autoscaler.sim.replica import get_profile
    from autoscaler.sim.report import plot, print_table, pyplot, write_json
    from autoscaler.sim.traces import (
        diurnal_day,
        load_trace,
        long_context_chat,
        scale_rate,
        speed_up,
    )

    if args.plot is not None:
        pyplot()  # a missing `sim` extra fails now, not after the simulation ran
    if not args.slo_ttft_s > 0:
        raise ConfigError(f"--slo-ttft-s: value {args.slo_ttft_s} must be > 0")
    if args.warm_pool < 0:
        raise ConfigError(f"--warm-pool: value {args.warm_pool} must be >= 0")
    asked = args.policy.split(",")
    with_oracle = "oracle" in asked
    names = [n for n in asked if n not in ("all", "oracle")]
    if "all" in asked:
        names = list(POLICY_NAMES) + [n for n in names if n not in POLICY_NAMES]
    for name in names:
        if name not in POLICY_NAMES:
            raise ConfigError(
                f"--policy: value {name!r} must be 'all', 'oracle' or one of "
                f"{', '.join(POLICY_NAMES)}"
            )
    if args.static_sweep is not None:
        names += [f"static-{n}" for n in parse_static_sweep(args.static_sweep)]
    if args.trace == SYNTHETIC_LONG_CONTEXT:
        trace = long_context_chat(seed=args.seed)
    else:
        trace = load_trace(args.trace)
    if args.speed_up != 1.0:
        trace = speed_up(trace, args.speed_up)
    if args.rate_scale != 1.0:
        trace = scale_rate(trace, args.rate_scale, seed=args.seed)
    if args.diurnal_day_s is not None:
        trace = diurnal_day(trace, day_s=args.diurnal_day_s, seed=args.seed)
    if args.profile == "auto":
        profile, why = auto_profile(trace.prompt_tokens + trace.output_tokens)
        if not args.quiet:
            print(why, file=sys.stderr)
    else:
        profile, why = get_profile(args.profile), None
    cluster = ClusterConfig(
        profile=profile,
        cold_start=parse_cold_start(args.cold_start),
        price_per_gpu_hour=args.price_per_gpu_hour,
        warm_pool_size=args.warm_pool,
    )
    cfg = CompareConfig(
        cluster=cluster,
        slo_ttft_s=args.slo_ttft_s,
        seed=args.seed,
        static_replicas=args.static_replicas,
    )
    last = [0.0]

    def progress(name: str, frac: float) -> None:
        now = time.monotonic()
        if args.quiet or now - last[0] < 1.0:
            return
        last[0] = now
        print(f"  {name}: {frac:5.0%} of trace", file=sys.stderr, flush=True)

    if not args.quiet:
        print(
            f"simulating {len(trace)} requests over {trace.duration_s / 60:.1f} min "
            f"on {cluster.profile.name}: {', '.join(names)}",
            file=sys.stderr,
        )
    t0 = time.perf_counter()
    results, sizing = run_comparison(trace, names, cfg, progress)
    summaries = [r.summary() for r in results]
    oracle = oracle_report(trace, cfg, sizing, summaries) if with_oracle else None
    if oracle is not None:
        summaries.append(oracle["row"])
    wall = time.perf_counter() - t0
    static_n = sizing.replicas
    title = (
        f"{trace.name}: {len(trace)} requests, {cluster.profile.name}, "
        f"TTFT SLO {args.slo_ttft_s:g} s, static-peak = {static_n} replicas"
    )
    print_table(summaries, title + (f"\n{sizing.note}" if sizing.note else ""))
    admitted = admission_line(trace, cluster.profile, args.slo_ttft_s)
    print(admitted["line"])
    if why is not None:
        print(why)
    if args.json is not None:
        write_json(
            args.json,
            {
                "trace": trace.name,
                "requests": len(trace),
                "duration_s": trace.duration_s,
                "profile": cluster.profile.name,
                "profile_auto": why,
                "admission": {k: v for k, v in admitted.items() if k != "line"},
                "slo_ttft_s": args.slo_ttft_s,
                "cold_start": args.cold_start,
                "price_per_gpu_hour": args.price_per_gpu_hour,
                "seed": args.seed,
                "static_peak_replicas": static_n,
                "static_sizing": sizing.as_json(),
                "oracle": None if oracle is None else oracle["detail"],
                "wall_s": round(wall, 3),
                "policies": {s["policy"]: s for s in summaries},
            },
        )
    if args.plot is not None:
        plot(results, trace, args.plot, args.slo_ttft_s)
    return 0


def auto_profile(total_tokens: Any) -> tuple[Any, str]:
    """The first `AUTO_PROFILES` entry whose context (and KV cache) holds the trace's
    99.9th-percentile request, and one line saying why."""
    import numpy as np

    from autoscaler.sim.replica import get_profile

    need = int(np.ceil(np.quantile(total_tokens, AUTO_QUANTILE))) if len(total_tokens) else 0
    for name in AUTO_PROFILES:
        profile = get_profile(name)
        room = min(profile.max_model_len, profile.kv_capacity_tokens)
        if need <= room:
            refused = float(np.mean(total_tokens > room)) if len(total_tokens) else 0.0
            return profile, (
                f"--profile auto: {name} (context {profile.max_model_len} tokens covers the "
                f"trace's p99.9 request of {need} tokens; {refused:.2%} refused)"
            )
    largest = max(get_profile(n).max_model_len for n in AUTO_PROFILES)
    raise ConfigError(
        f"--profile: value 'auto' found no profile whose context covers the trace's p99.9 "
        f"request of {need} tokens (largest: {largest}); name a profile explicitly"
    )


def admission_line(trace: Any, profile: Any, slo_ttft_s: float) -> dict[str, Any]:
    """The trace's refused share (over ``max_model_len`` or the KV cache: vLLM's 400,
    counted apart from misses) and its infeasible share (admitted, yet over the SLO even
    alone on an idle replica: no fleet size serves them in time), as one line."""
    import numpy as np

    from autoscaler.sim.simulator import admission

    rejected, infeasible = admission(trace, profile, slo_ttft_s)
    n = len(trace)
    n_rej = int(np.count_nonzero(rejected))
    n_inf = int(np.count_nonzero(infeasible))
    admitted = max(1, n - n_rej)
    line = (
        f"refused: {n_rej} of {n} requests ({n_rej / max(1, n):.1%}) exceed "
        f"{profile.name}'s max_model_len {profile.max_model_len} (vLLM 400; not in "
        f"GPU-hours or misses); infeasible at any size: {n_inf} of admitted "
        f"({n_inf / admitted:.1%}) miss TTFT {slo_ttft_s:g} s alone on an idle replica"
    )
    if n_rej and n_rej / max(1, n) >= 0.01:
        line = "WARNING " + line + "; try --profile auto"
    return {
        "line": line,
        "requests": n,
        "refused": n_rej,
        "refused_share": round(n_rej / max(1, n), 5),
        "infeasible": n_inf,
        "infeasible_share_of_admitted": round(n_inf / admitted, 5),
    }
