"""CPU per target per tick of the control loop *outside scraping*: observe (an in-memory
cluster), planner update + forecast, decide, controller metrics, publish (history) and
the decision log, for a steady fleet like bench_scale's, on a fake clock.

Run: nice -n 10 .venv/bin/python benchmarks/bench_tick.py [--baseline REV]
(writes benchmarks/results/tick.json)

Before/after side by side in one run: the code at ``--baseline`` (a git revision of this
repository, extracted with ``git archive`` into a temporary directory) and the working
tree are measured alternately in fresh subprocesses, ``--rounds`` times each, and the
median of each is reported, so machine load hits both alike. CPU time
(``time.process_time``), never wall time: the machine is shared.

Each process: ``--targets`` targets (policy as bench_scale: running 42 per replica,
prediction on, 8 ready pods), ``--warmup-ticks`` untimed ticks (the capacity window and
the forecaster scoring fill up), then ``--ticks`` timed ticks. A second timed pass wraps
each part with a CPU timer for the breakdown (the wrappers cost ~1 us each: the total
row comes from the unwrapped pass).
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from revisions import extract, short_rev, tree_rev

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "tick.json"
# The code before issue 16's per-tick CPU work (planner, decide, metrics, loop).
DEFAULT_BASELINE = "014e8ae"
POLICY = {
    "maxReplicaCount": 16,
    "metrics": [{"signal": "running", "target": 42}],
    "prediction": {"enabled": True},
}
PARTS = ("observe", "planner.update", "planner.forecast", "decide", "metrics", "publish", "log")


def _signals(rng: random.Random, pods: int) -> dict[str, float]:
    """What 8 steady vLLM pods report (bench_scale's fixture page, with noise)."""
    rate = 3.0 * (1.0 + 0.05 * rng.gauss(0.0, 1.0))
    return {
        "waiting": max(0.0, rng.gauss(0.5, 0.5)),
        "running": 42.0 * pods * (1.0 + 0.02 * rng.gauss(0.0, 1.0)),
        "kv_cache_usage": 0.6 + 0.02 * rng.random(),
        "kv_cache_usage_max": 0.7 + 0.02 * rng.random(),
        "ttft_p50_s": 0.12 + 0.01 * rng.random(),
        "ttft_p95_s": 0.3 + 0.05 * rng.random(),
        "ttft_p99_s": 0.45 + 0.05 * rng.random(),
        "itl_p95_s": 0.03,
        "arrival_rate_per_s": rate,
        "prompt_tokens_per_s": rate * 700.0,
        "generation_tokens_per_s": rate * 180.0,
        "preemptions_per_s": 0.0,
    }


async def _worker(args: argparse.Namespace) -> dict[str, Any]:
    import autoscaler
    import autoscaler.control.loop as loop_module
    from autoscaler.api.metrics import ControllerMetrics
    from autoscaler.control.adapters import PlannerAdapter
    from autoscaler.control.clock import FakeClock
    from autoscaler.control.loop import ControlLoop
    from autoscaler.control.ports import SignalReading, TargetView
    from autoscaler.control.state import ControllerState
    from autoscaler.domain import Decision, TargetRef
    from autoscaler.logging import configure_logging
    from autoscaler.policy.schema import load_policy
    from autoscaler.store.base import StoredTarget
    from autoscaler.target import TargetSpec

    configure_logging("json", "INFO", stream=io.StringIO())  # production format, not shown
    pods = 8
    view = TargetView(pods, pods, "1")
    total = args.warmup_ticks + 2 * args.ticks
    rng = random.Random(16)
    readings = [SignalReading(signals=_signals(rng, pods), pods_read=pods) for _ in range(total)]
    tick_no = [0]

    class Cluster:
        async def observe(self, spec: TargetSpec) -> TargetView:
            return view

        async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
            raise AssertionError("a steady fleet writes nothing")

        async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
            return None

        async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
            return None

    class Signals:
        async def read(self, spec: TargetSpec, v: TargetView, now: float) -> SignalReading:
            return readings[tick_no[0]]

    clock = FakeClock(1000.0)
    metrics = ControllerMetrics()
    state = ControllerState()
    loop = ControlLoop(
        state, Cluster(), Signals(), planner_factory=PlannerAdapter, clock=clock, observer=metrics
    )
    policy = load_policy(POLICY)
    loop.set_targets(
        StoredTarget(TargetSpec(ref=TargetRef("fleet", f"m{i:04d}"), policy=policy), "1")
        for i in range(args.targets)
    )

    async def run(n: int) -> float:
        cpu = 0.0
        for _ in range(n):
            await clock.advance(1.0)
            t0 = time.process_time()
            decisions = await loop.tick()
            cpu += time.process_time() - t0
            assert len(decisions) == args.targets
            tick_no[0] += 1
        return cpu

    await run(args.warmup_ticks)
    total_cpu = await run(args.ticks)

    # Breakdown pass: wrap each part with a CPU timer.
    spent = dict.fromkeys(PARTS, 0.0)

    def timed(part: str, fn: Any) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.process_time()
            try:
                return fn(*a, **kw)
            finally:
                spent[part] += time.process_time() - t0

        return wrapper

    def timed_async(part: str, fn: Any) -> Any:
        async def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.process_time()
            try:
                return await fn(*a, **kw)
            finally:
                spent[part] += time.process_time() - t0

        return wrapper

    Cluster.observe = timed_async("observe", Cluster.observe)  # type: ignore[method-assign]
    PlannerAdapter.update = timed("planner.update", PlannerAdapter.update)  # type: ignore[method-assign]
    PlannerAdapter.forecast = timed("planner.forecast", PlannerAdapter.forecast)  # type: ignore[method-assign]
    loop_module.decide = timed("decide", loop_module.decide)  # type: ignore[attr-defined]
    ControllerMetrics.observe_decision = timed("metrics", ControllerMetrics.observe_decision)  # type: ignore[method-assign]
    ControllerState.publish = timed_async("publish", ControllerState.publish)  # type: ignore[method-assign]
    ControlLoop._log_decision = timed("log", ControlLoop._log_decision)  # type: ignore[method-assign]
    wrapped_cpu = await run(args.ticks)
    # A /metrics scrape (what an exporter built lazily would pay instead), per target.
    from prometheus_client import generate_latest

    t0 = time.process_time()
    for _ in range(5):
        generate_latest(metrics.registry)
    exposition = (time.process_time() - t0) / 5

    per = 1e6 / (args.ticks * args.targets)
    parts = {k: v * per for k, v in spent.items()}
    parts["loop (rest)"] = wrapped_cpu * per - sum(parts.values())
    return {
        "code": str(Path(autoscaler.__file__).parent),
        "total_us": total_cpu * per,
        "parts_us": parts,
        "exposition_us_per_target": exposition * 1e6 / args.targets,
    }


def _run_worker(code: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        "--targets",
        str(args.targets),
        "--warmup-ticks",
        str(args.warmup_ticks),
        "--ticks",
        str(args.ticks),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    expected = str(code / "autoscaler") if code is not None else str(ROOT / "autoscaler")
    if result["code"] != expected:
        raise RuntimeError(f"worker imported {result['code']}, expected {expected}")
    return result


def _median(rows: list[dict[str, Any]], key: str, part: str | None = None) -> float:
    values = [r[key][part] if part else r[key] for r in rows]
    return float(statistics.median(values))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, default=20)
    parser.add_argument("--warmup-ticks", type=int, default=700)
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", default=DEFAULT_BASELINE)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(asyncio.run(_worker(args))))
        return
    rev = short_rev(args.baseline)
    head = tree_rev()
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        code = extract(rev, Path(tmp))
        for _ in range(args.rounds):
            before.append(_run_worker(code, args))
            after.append(_run_worker(None, args))
    rows = []
    for name in ("total", *PARTS, "loop (rest)"):
        if name == "total":
            b, a = _median(before, "total_us"), _median(after, "total_us")
        else:
            b, a = _median(before, "parts_us", name), _median(after, "parts_us", name)
        rows.append({"part": name, "before_us": round(b, 1), "after_us": round(a, 1)})
    exp_b = _median(before, "exposition_us_per_target")
    exp_a = _median(after, "exposition_us_per_target")
    head_row = "| part | before (us) | after (us) | after / before |\n|---|---|---|---|\n"
    body = "".join(
        f"| {r['part']} | {r['before_us']} | {r['after_us']} | "
        f"{r['after_us'] / r['before_us'] if r['before_us'] > 0 else math.nan:.2f} |\n"
        for r in rows
    )
    markdown = head_row + body
    document = {
        "benchmark": "bench_tick",
        "command": " ".join(["benchmarks/bench_tick.py", *sys.argv[1:]]),
        "baseline": rev,
        "current": head,
        "unit": "CPU microseconds per target per tick (median of rounds)",
        "targets": args.targets,
        "warmup_ticks": args.warmup_ticks,
        "ticks": args.ticks,
        "rounds": args.rounds,
        "rows": rows,
        "exposition_us_per_target_per_scrape": {
            "before": round(exp_b, 1),
            "after": round(exp_a, 1),
        },
        "raw": {"before": before, "after": after},
        "markdown": markdown,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(f"baseline {rev} vs {head}; CPU us per target per tick, median of {args.rounds}")
    print(markdown)
    print(f"/metrics exposition per target per scrape: {exp_b:.1f} us -> {exp_a:.1f} us")
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
