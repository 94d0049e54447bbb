"""`llm-autoscaler demo`: the embedded demo (see `autoscaler.demo.app`)."""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from autoscaler.demo.app import DemoOptions, run_demo
from autoscaler.errors import AutoscalerError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="run the embedded demo (no cluster, no GPU)")
    d = DemoOptions()
    p.add_argument("--http-port", type=int, default=d.http_port)
    p.add_argument("--grpc-port", type=int, default=d.grpc_port)
    p.add_argument("--duration", type=float, default=d.duration_s, help="seconds (real time)")
    p.add_argument("--speed", type=float, default=d.speed, help="emulated time per real second")
    p.add_argument("--headless", action="store_true", help="plain output, no live table")
    p.add_argument("--load", type=float, default=d.load_factor, help="trace rate multiplier")
    p.add_argument("--cold-start", type=float, default=d.cold_start_s, help="emulated seconds")
    p.add_argument("--trace", type=Path, default=None, help="Azure CSV trace (default: code)")
    p.add_argument("--summary", type=Path, default=d.summary_path)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.duration <= 0 or args.speed <= 0 or args.load <= 0:
        print("error: --duration, --speed and --load must be > 0", file=sys.stderr)
        return 2
    opts = DemoOptions(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        duration_s=args.duration,
        speed=args.speed,
        headless=args.headless,
        load_factor=args.load,
        cold_start_s=args.cold_start,
        trace=args.trace,
        summary_path=args.summary,
    )
    try:
        result = asyncio.run(run_demo(opts, sys.stdout))
    except AutoscalerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    s = result.summary
    print(
        f"summary: {s['decisions']} decisions, {s['scale_ups']} scale-ups, "
        f"{s['scale_downs']} scale-downs, max {s['max_replicas']} replicas; "
        f"load {s['load']}; written to {opts.summary_path}",
        flush=True,
    )
    return 0
