"""``python -m autoscaler.emulator``: run emulated vLLM replicas, or replay a trace at them.

serve   N replicas on 127.0.0.1 (ports from --port upwards, 0 = ephemeral) until
        --duration elapses or Ctrl-C; prints their URLs.
replay  starts the replicas in-process, replays a window of a trace with the load
        generator, prints the summary as JSON (with the process CPU time) and exits.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.emulator.loadgen import LoadGenerator
from autoscaler.emulator.sleep import WAKE_S_8B
from autoscaler.errors import ConfigError
from autoscaler.sim.replica import PROFILES
from autoscaler.sim.traces import load_trace

# The repository's copy of the Azure conv trace (data/traces/, CC BY 4.0): found from the
# package's location so the default works from any working directory of a checkout.
DEFAULT_TRACE = (
    Path(__file__).resolve().parents[2] / "data" / "traces" / "AzureLLMInferenceTrace_conv.csv.gz"
)


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _start(args: argparse.Namespace, fleet: EmulatorFleet) -> None:
    config = replace(fleet.defaults, sleep_mode=args.enable_sleep_mode, wake_s=args.wake_s)
    for i in range(args.replicas):
        port = args.port + i if args.port else 0
        await fleet.start_replica(
            f"replica-{i}",
            port=port,
            cold_start_s=args.cold_start,
            profile=args.profile,
            config=config,
        )


async def _serve(args: argparse.Namespace) -> int:
    async with EmulatorFleet(speed=args.speed) as fleet:
        await _start(args, fleet)
        for rep in fleet.replicas.values():
            print(f"{rep.name} {rep.url}", flush=True)
        await asyncio.sleep(args.duration)
    return 0


async def _replay(args: argparse.Namespace) -> int:
    trace = load_trace(args.trace)
    start_s, _, end_s = args.window.partition(":")
    trace = trace.window(float(start_s), float(end_s))
    async with EmulatorFleet(speed=args.speed) as fleet:
        await _start(args, fleet)
        gen = LoadGenerator(
            fleet.ready_urls,
            speed=args.speed,
            balance=args.balance,
            max_requests=args.max_requests,
            max_duration_s=args.duration,
        )
        cpu0, t0 = _cpu_s(), time.monotonic()
        report = await gen.run(trace)
        wall = time.monotonic() - t0
        out = {
            "trace": trace.name,
            "replicas": args.replicas,
            "profile": args.profile,
            "speed": args.speed,
            **report.summary(),
            "cpu_s": round(_cpu_s() - cpu0, 2),
            "cpu_fraction_of_one_core": round((_cpu_s() - cpu0) / wall, 3),
        }
        print(json.dumps(out, indent=2))
    return 0 if report.failed == 0 else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m autoscaler.emulator",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("mode", choices=["serve", "replay"], help="serve replicas, or replay a trace")
    p.add_argument("--replicas", type=int, default=2, help="emulated replicas (default: 2)")
    p.add_argument("--port", type=int, default=0, help="first port (default 0: ephemeral)")
    p.add_argument(
        "--profile",
        default="8b-h100-128k",
        choices=sorted(PROFILES),
        help="replica model profile (default: 8b-h100-128k, Llama-3.1-8B's 128k context)",
    )
    p.add_argument(
        "--cold-start", type=float, default=0.0, help="emulated seconds before /health (default: 0)"
    )
    p.add_argument(
        "--enable-sleep-mode",
        action="store_true",
        help="vLLM's sleep mode with VLLM_SERVER_DEV_MODE=1: /sleep, /wake_up, /is_sleeping",
    )
    p.add_argument(
        "--wake-s",
        type=float,
        default=WAKE_S_8B,
        help=f"emulated seconds a /wake_up takes (default: {WAKE_S_8B}, 8B median)",
    )
    p.add_argument(
        "--speed", type=float, default=1.0, help="emulated time / real time (default: 1)"
    )
    p.add_argument(
        "--duration", type=float, default=600.0, help="real seconds, at most (default: 600)"
    )
    p.add_argument(
        "--trace",
        default=str(DEFAULT_TRACE),
        help="Azure CSV(.gz) or JSONL trace for replay "
        "(default: the repository's data/traces/AzureLLMInferenceTrace_conv.csv.gz)",
    )
    p.add_argument(
        "--window", default="1800:1860", help="trace seconds START:END (default: 1800:1860)"
    )
    p.add_argument(
        "--balance",
        default="least-outstanding",
        help="load balancing: least-outstanding or round-robin (default: least-outstanding)",
    )
    p.add_argument(
        "--max-requests", type=int, default=10_000, help="requests sent, at most (default: 10000)"
    )
    args = p.parse_args(argv)
    try:
        return asyncio.run(_serve(args) if args.mode == "serve" else _replay(args))
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
