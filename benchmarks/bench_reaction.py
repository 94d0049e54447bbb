"""Reaction latency: an emulated pod's queue jumps -> the scale patch lands at the API.

Run: .venv/bin/python benchmarks/bench_reaction.py [--bursts 20] [--slow-bursts 8] [--seed 1]
Writes benchmarks/results/reaction.json (docs/reaction-latency.md explains the numbers).

Each chain group (`GROUPS`) runs in its own process, concurrently (``--sequential``: one
process, one chain after the other; ``--chains k1,k2``: only those). A group's world:
emulated vLLM pods behind the local Kubernetes API (its deployment controller turns pods
into emulators), a real Prometheus scraping them (file discovery) when a chain needs it,
and the real control loop patching the Deployment's scale subresource through
kubernetes-asyncio. The chains differ only in the metrics source, tick and scrape interval:

- ``ours/pod-scrape``: the loop scrapes the pods' /metrics itself (tick 1 s and 0.5 s);
- ``ours/prometheus``: the loop runs PromQL against Prometheus (tick 1 s; scrape 1 s, 15 s);
- ``keda-like``: scrape 15 s + the loop polling every 15 s with KEDA's one query
  (``pollingInterval: 15`` as in the seeds' ScaledObjects).

Each burst: reset to one Ready replica with an empty queue (for Prometheus chains, until
Prometheus itself shows the empty queue), wait a random part of the scrape interval,
start a fresh control loop (fresh decision state), jump the pod's queue at a random phase
of a tick interval three ticks in (seeded, stratified), and time from the jump
(`QueueJump.t_monotonic`, once the requests are in the engine) to the moment the local
API applies the scale write (a subclass hook; same process, same monotonic clock). The
queue is held (long outputs, KV-bound) so it is still there when the slowest chain looks,
and the reset aborts it as a pod restart would: the emulator's speed factor shortens
nothing that is measured, and every latency is in real seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.support.prometheus: the real-server helper
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))  # the reaction package beside this file

from reaction.chains import GROUPS, ChainRun, chains, policy, run_chain  # noqa: E402
from reaction.stats import report, summarize, table  # noqa: E402
from reaction.world import REF, WAITING_TARGET, BenchError, World  # noqa: E402

from autoscaler.logging import configure_logging  # noqa: E402
from autoscaler.policy.schema import load_policy  # noqa: E402
from autoscaler.target import ScaleTargetRef, TargetSpec  # noqa: E402

# Re-exported for tests/bench/test_bench_reaction_smoke.py, which drives one burst per chain.
__all__ = [
    "REF",
    "WAITING_TARGET",
    "ScaleTargetRef",
    "TargetSpec",
    "World",
    "chains",
    "load_policy",
    "policy",
    "run_chain",
    "summarize",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def run_group(keys: list[str], args: argparse.Namespace) -> list[ChainRun]:
    """Run the chains named by ``keys`` in order, in one world, in this process."""
    import tempfile

    configure_logging("json", "warning")
    by_key = {c.key: c for c in chains(args.bursts, args.slow_bursts)}
    selected = [by_key[k] for k in keys]
    deadline = time.monotonic() + args.max_minutes * 60
    runs: list[ChainRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-reaction-") as tmp:
        world = World(Path(tmp))
        try:
            await world.start({c.scrape_interval_s for c in selected if c.scrape_interval_s})
            for chain in selected:
                log(f"{chain.name}: {chain.bursts} bursts")
                rng = random.Random(f"{args.seed}:{chain.key}")
                chain_run = await run_chain(world, chain, rng, deadline, log)
                if not chain_run.bursts:
                    raise BenchError(f"{chain.name}: no burst fitted in --max-minutes")
                runs.append(chain_run)
        finally:
            await world.close()
    return runs


def run_groups(groups: list[str], args: argparse.Namespace) -> list[ChainRun]:
    """One child process per group, concurrently; each writes its raw runs to a file."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-reaction-parts-") as tmp:
        procs = []
        for i, group in enumerate(groups):
            part = Path(tmp) / f"part{i}.json"
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                f"--bursts={args.bursts}",
                f"--slow-bursts={args.slow_bursts}",
                f"--seed={args.seed}",
                f"--max-minutes={args.max_minutes}",
                f"--chains={group}",
                f"--part-out={part}",
            ]
            procs.append((subprocess.Popen(cmd, cwd=ROOT), part, group))
        failed = []
        for proc, _, group in procs:
            try:
                code = proc.wait(timeout=args.max_minutes * 60 + 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                failed.append(f"{group} (exit {code})")
        if failed:
            raise BenchError(f"chain groups failed: {', '.join(failed)}")
        runs: list[ChainRun] = []
        for _, part, _ in procs:
            runs.extend(ChainRun.from_json(r) for r in json.loads(part.read_text()))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--bursts", type=int, default=20, help="bursts per sub-second chain")
    parser.add_argument("--slow-bursts", type=int, default=8, help="bursts per 15 s chain")
    parser.add_argument("--seed", type=int, default=1, help="seeds the phases")
    parser.add_argument("--max-minutes", type=float, default=10.0, help="bound per process")
    parser.add_argument("--chains", default="", help="comma-separated keys: one process")
    parser.add_argument(
        "--sequential", action="store_true", help="all chains in one process, one by one"
    )
    parser.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "reaction.json"
    )
    args = parser.parse_args()
    if args.bursts < 1 or args.slow_bursts < 1:
        parser.error("--bursts and --slow-bursts: must be >= 1")
    known = [c.key for c in chains(1, 1)]
    keys = [k for k in args.chains.split(",") if k] if args.chains else []
    for k in keys:
        if k not in known:
            parser.error(f"--chains: value {k!r} is not one of {', '.join(known)}")
    started = time.monotonic()
    if args.part_out is not None:  # a child of run_groups
        runs = asyncio.run(run_group(keys, args))
        args.part_out.write_text(json.dumps([r.to_json() for r in runs]))
        return
    if keys or args.sequential:
        runs = asyncio.run(run_group(keys or known, args))
    else:
        runs = run_groups(list(GROUPS), args)
    result = report(runs, args, time.monotonic() - started)
    print(table(result["chains"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
