"""Latency statistics, the printed table and the results file's layout."""

from __future__ import annotations

import argparse
import math
import platform
import sys
from dataclasses import asdict
from typing import Any

from reaction.chains import GROUPS, Burst, ChainRun, chains, policy
from reaction.world import EMULATOR_SPEED, JUMP_OUTPUT_TOKENS, JUMP_PROMPT_TOKENS, JUMP_REQUESTS


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(bursts: list[Burst]) -> dict[str, float | int]:
    lat = [b.latency_s for b in bursts]
    return {
        "n": len(lat),
        "p50_s": quantile(lat, 0.5),
        "p99_s": quantile(lat, 0.99),
        "max_s": max(lat),
        "min_s": min(lat),
        "mean_s": sum(lat) / len(lat),
        "tick_work_p50_s": quantile([b.tick_work_s for b in bursts], 0.5),
        "tick_work_max_s": max(b.tick_work_s for b in bursts),
        "ticks": sum(b.ticks for b in bursts),
        "skipped_ticks": sum(b.ticks - b.reconciles for b in bursts),
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'chain':44} {'n':>3} {'p50 s':>7} {'p99 s':>7} {'max s':>7} {'p99/ours':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['chain']:44} {r['n']:3d} {r['p50_s']:7.3f} {r['p99_s']:7.3f} "
            f"{r['max_s']:7.3f} "
            + (f"{r['p99_ratio']:8.1f}x" if r["p99_ratio"] is not None else f"{'-':>9}")
        )
    return "\n".join(lines)


def report(runs: list[ChainRun], args: argparse.Namespace, elapsed_s: float) -> dict[str, Any]:
    order = [c.key for c in chains(1, 1)]
    runs = sorted(runs, key=lambda r: order.index(r.chain.key))
    base = next((r for r in runs if r.chain.source == "pod-scrape"), None)
    base_sum = summarize(base.bursts) if base else None
    rows: list[dict[str, Any]] = []
    for r in runs:
        s = summarize(r.bursts)
        rows.append(
            {
                "chain": r.chain.name,
                **s,
                "p50_ratio": s["p50_s"] / base_sum["p50_s"] if base_sum else None,
                "p99_ratio": s["p99_s"] / base_sum["p99_s"] if base_sum else None,
                "truncated": r.truncated,
                "elapsed_s": r.elapsed_s,
                "config": asdict(r.chain),
                "bursts": [asdict(b) for b in r.bursts],
            }
        )
    return {
        "command": "python benchmarks/bench_reaction.py " + " ".join(sys.argv[1:]),
        "seed": args.seed,
        "elapsed_s": elapsed_s,
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "setup": {
            "emulator_speed": EMULATOR_SPEED,
            "jump": {
                "requests": JUMP_REQUESTS,
                "prompt_tokens": JUMP_PROMPT_TOKENS,
                "output_tokens": JUMP_OUTPUT_TOKENS,
            },
            "policy": policy(1.0) | {"pollingInterval": "= tick"},
            "ratio_base": base.chain.name if base else None,
            "concurrent_groups": None if args.sequential else list(GROUPS),
        },
        "chains": rows,
    }


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0
