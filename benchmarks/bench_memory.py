"""Memory (and the windows' CPU) of what the controller keeps per pod and per target.

Usage:
    nice -n 10 .venv/bin/python benchmarks/bench_memory.py [--pods 400] [--targets 1000]

Four parts, one run; nothing sleeps: scrape times come from a fake clock, so "10 minutes
of 1 s scrapes" takes seconds (a full 60 s window is 60 scrapes, full histories are 600
observations and 500 decisions).

1. Per-pod scrape windows (`autoscaler.metrics.signals`): bytes per pod with full
   windows (tracemalloc), and CPU microseconds per pod per tick of `observe` and of
   `aggregate` (8 pods per target).
   Each pod's page is the vLLM V1 fixture (4 counters, TTFT and ITL histograms of 23 and
   20 buckets) with counters and buckets advancing on every scrape; like the parser's
   output, every snapshot has its own tuples.
2. Per-target histories (`control.history`): one target run through the real
   `ControlLoop` with the forecast planner on (policy of bench_scale.py, signals from 8
   such pods) for 700 ticks of a fake clock; its observations and decisions are then
   appended to fresh histories per target and measured (tracemalloc; each target gets
   its own copies of the decisions' messages, metrics and numbers, as the loop makes).
3. The planner's state per target after those 700 ticks (not owned here; for the total).
4. RSS of a fresh interpreter that imports the controller (`autoscaler.app`) and holds
   N targets x 8 pods of full windows, N full histories and N
   planners: VmRSS before and after building them.

Prints a table; writes benchmarks/results/memory.json.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import copyreg
import gc
import json
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from autoscaler.control import history as history_now  # noqa: E402
from autoscaler.control.clock import FakeClock  # noqa: E402
from autoscaler.control.ports import SignalReading, TargetView  # noqa: E402
from autoscaler.control.state import HISTORY_LEN, OBSERVATIONS_LEN  # noqa: E402
from autoscaler.domain import Decision, Observation  # noqa: E402
from autoscaler.logging import configure_logging  # noqa: E402
from autoscaler.metrics import signals as now  # noqa: E402
from autoscaler.metrics.engines import EngineSnapshot, read_snapshot  # noqa: E402
from autoscaler.metrics.exposition import HistogramData  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "memory.json"
PAGE = (ROOT / "tests" / "fixtures" / "metrics" / "vllm_v1_0.10.txt").read_text()
BASE = read_snapshot(PAGE, "vllm")
WINDOW_S = 60.0
POD_PER_TARGET = 8
POLICY = {  # bench_scale.py's
    "maxReplicaCount": 16,
    "metrics": [{"signal": "running", "target": 42}],
    "prediction": {"enabled": True},
}
# One implementation each (another revision's side by side: benchmarks/revisions.py, as
# bench_rss.py --baseline REV does for the whole process).
IMPLEMENTATIONS: dict[str, ModuleType] = {"now": now}
HISTORIES: dict[str, ModuleType] = {"now": history_now}
Recorded = list[tuple[Observation, Decision]]
# deepcopy of a planner (its read-only mappings): copy the mapping, wrap it again
copyreg.pickle(MappingProxyType, lambda m: (MappingProxyType, (dict(m),)))


def page(pod: int, k: int) -> EngineSnapshot:
    """Pod ``pod``'s snapshot at its ``k``-th scrape: fresh objects, as the parser makes."""
    step = 1 + pod % 7
    counters = {key: v + 3.0 * k * step for key, v in BASE.counters.items()}
    hists = {
        key: HistogramData(
            tuple(list(h.bounds)),
            tuple(c + k * step * (i + 1) for i, c in enumerate(h.counts)),
            (h.count or 0.0) + k * step * len(h.counts),
            (h.sum or 0.0) + k * step,
        )
        for key, h in BASE.histograms.items()
    }
    gauges = {**BASE.gauges, "running": 40.0 + (k + pod) % 5}
    return EngineSnapshot("vllm", gauges, counters, hists)


# ------------------------------------------------------------------------------- windows
def fill(impl: ModuleType, pods: int, seconds: int) -> list[Any]:
    histories: list[Any] = [None] * pods
    for k in range(seconds):
        for p in range(pods):
            histories[p] = impl.observe(histories[p], page(p, k), float(k), WINDOW_S)
    return histories


def traced_bytes(build: Callable[[], object]) -> tuple[int, object]:
    """Bytes still allocated by ``build()``'s result (tracemalloc), and the result."""
    gc.collect()
    tracemalloc.start()
    start = tracemalloc.get_traced_memory()[0]
    kept = build()
    gc.collect()
    used = tracemalloc.get_traced_memory()[0] - start
    tracemalloc.stop()
    return used, kept


def window_memory(pods: int, seconds: int) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for name, impl in IMPLEMENTATIONS.items():
        used, kept = traced_bytes(lambda impl=impl: fill(impl, pods, seconds))
        h = kept[0]  # type: ignore[index]
        points = len(h.rows)
        out[name] = {"bytes_per_pod": used / pods, "points_per_pod": points}
        del kept
    return out


def window_cpu(pods: int, warm_s: int, measured_s: int) -> dict[str, dict[str, float]]:
    """CPU us per pod per tick of observe and aggregate, both implementations per tick."""
    hist: dict[str, list[Any]] = {name: [None] * pods for name in IMPLEMENTATIONS}
    cpu = {name: {"observe": 0.0, "aggregate": 0.0} for name in IMPLEMENTATIONS}
    results: dict[str, dict[str, float]] = {}
    order = list(IMPLEMENTATIONS)
    for k in range(warm_s + measured_s):
        snaps = [page(p, k) for p in range(pods)]
        t = float(k)
        order.reverse()
        for name in order:
            impl, hs = IMPLEMENTATIONS[name], hist[name]
            t0 = time.process_time()
            for p in range(pods):
                hs[p] = impl.observe(hs[p], snaps[p], t, WINDOW_S)
            t1 = time.process_time()
            for first in range(0, pods, POD_PER_TARGET):
                results[name] = impl.aggregate(hs[first : first + POD_PER_TARGET])
            t2 = time.process_time()
            if k >= warm_s:
                cpu[name]["observe"] += t1 - t0
                cpu[name]["aggregate"] += t2 - t1
    ticks = measured_s
    out = {
        name: {
            "observe_us_per_pod_tick": 1e6 * c["observe"] / (pods * ticks),
            "aggregate_us_per_pod_tick": 1e6 * c["aggregate"] / (pods * ticks),
        }
        for name, c in cpu.items()
    }
    for name in IMPLEMENTATIONS:  # the same signals (the last target's, last tick)
        out[name]["signals"] = results[name]  # type: ignore[assignment]
    return out


# ----------------------------------------------------------------------------- histories
class _Cluster:
    async def observe(self, spec: Any) -> TargetView:
        return TargetView(8, 8, "1")

    async def scale(self, spec: Any, replicas: int, resource_version: str) -> None:
        raise AssertionError("steady fleet: no scale writes expected")

    async def set_warm_pool(self, spec: Any, replicas: int, peak: bool) -> None:
        pass

    async def record(self, spec: Any, decision: Any, applied: bool) -> None:
        pass


class _Signals:
    """Eight pods' windows (the current implementation), aggregated per tick."""

    def __init__(self) -> None:
        self.histories: list[Any] = [None] * POD_PER_TARGET
        self.k = 0

    async def read(self, spec: Any, view: TargetView, t: float) -> SignalReading:
        for p in range(POD_PER_TARGET):
            self.histories[p] = now.observe(self.histories[p], page(p, self.k), t, WINDOW_S)
        self.k += 1
        signals, _ = now.split_valid(now.aggregate(self.histories))
        return SignalReading(signals=signals, pods_read=POD_PER_TARGET)


async def _record_target(ticks: int) -> tuple[Recorded, object]:
    """A target's published (observation, decision) pairs over ``ticks`` 1 s ticks, and
    its planner afterwards."""
    from autoscaler.control.adapters import PlannerAdapter
    from autoscaler.control.loop import ControlLoop
    from autoscaler.control.state import ControllerState
    from autoscaler.domain import TargetRef
    from autoscaler.policy.schema import load_policy
    from autoscaler.store.base import StoredTarget
    from autoscaler.target import TargetSpec

    state = ControllerState()
    published: list[tuple[Any, Any]] = []
    publish = state.publish

    async def recording(ref: Any, obs: Any, decision: Any) -> None:
        published.append((obs, decision))
        await publish(ref, obs, decision)

    state.publish = recording  # type: ignore[method-assign]
    clock = FakeClock(1000.0)
    loop = ControlLoop(state, _Cluster(), _Signals(), planner_factory=PlannerAdapter, clock=clock)
    spec = TargetSpec(ref=TargetRef("fleet", "t0"), policy=load_policy(POLICY))
    loop.set_targets([StoredTarget(spec, "1")])
    for _ in range(ticks):
        await loop.tick()
        await clock.advance(1.0)
    planner = loop._planners[spec.ref]
    return published, planner


def _new_float(x: float) -> float:
    return x + 0.0 if x == x else x  # a new object, as a computed number is


def clone(d: Decision) -> Decision:
    """``d`` with its own message, metrics and numbers (the loop builds them per tick)."""
    numbers = {k: _new_float(v) for k, v in d.numbers.items()}
    return replace(
        d,
        message=(d.message + ".")[:-1],
        metrics=tuple(replace(m, target=_new_float(m.target)) for m in d.metrics),
        numbers=MappingProxyType(numbers) if isinstance(d.numbers, MappingProxyType) else numbers,
    )


def build_histories(
    recorded: Recorded, impl: ModuleType = history_now, part: str = "both"
) -> tuple[Any, Any]:
    """A target's full histories from the recorded ticks (``part``: both, or one of them)."""
    ring = impl.ObservationRing(OBSERVATIONS_LEN) if part != "decisions" else None
    decisions = impl.DecisionHistory(HISTORY_LEN) if part != "observations" else None
    for obs, decision in recorded:
        if ring is not None:
            ring.append(obs)  # numbers are copied into the ring's columns
        if decisions is not None:
            decisions.append(clone(decision))
    return ring, decisions


def history_memory(recorded: Recorded, planner: object, targets: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, impl in HISTORIES.items():
        out[name] = {}
        for part in ("observations", "decisions"):
            used, kept = traced_bytes(
                lambda impl=impl, part=part: [
                    build_histories(recorded, impl, part) for _ in range(targets)
                ]
            )
            del kept
            out[name][f"{part}_bytes_per_target"] = used / targets
    used, kept = traced_bytes(lambda: [copy.deepcopy(planner) for _ in range(targets)])
    del kept
    out["planner_bytes_per_target"] = used / targets
    return out


# ----------------------------------------------------------------------------------- RSS
def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def rss_child(impl_name: str, targets: int) -> None:
    """In a fresh interpreter: RSS before and after N targets of full windows and histories."""
    import autoscaler.app  # noqa: F401  (the controller's imports: its baseline RSS)

    configure_logging("json", "warning")
    recorded, planner = asyncio.run(_record_target(700))
    gc.collect()
    base = rss_mb()
    impl = IMPLEMENTATIONS[impl_name]
    kept: list[object] = []
    for t in range(targets):
        pods: list[Any] = [None] * POD_PER_TARGET
        for k in range(int(WINDOW_S) + 10):
            for p in range(POD_PER_TARGET):
                pods[p] = impl.observe(pods[p], page(t * POD_PER_TARGET + p, k), float(k), WINDOW_S)
        kept.append((pods, build_histories(recorded, HISTORIES[impl_name]), copy.deepcopy(planner)))
    gc.collect()
    print(json.dumps({"rss_base_mb": base, "rss_full_mb": rss_mb()}))


def rss(targets: int) -> dict[str, dict[str, float]]:
    out = {}
    for name in IMPLEMENTATIONS:
        child = subprocess.run(
            [sys.executable, __file__, "--rss-child", name, str(targets)],
            capture_output=True,
            text=True,
            check=True,
        )
        out[name] = json.loads(child.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------------------------- main
def table(rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(str(c) for c in rows[0]) + " |"]
    lines.append("|" + "---|" * len(rows[0]))
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--rss-child":
        rss_child(sys.argv[2], int(sys.argv[3]))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pods", type=int, default=400, help="pods for parts 1 (x8 per target)")
    parser.add_argument("--targets", type=int, default=1000, help="targets for part 4 (RSS)")
    parser.add_argument("--history-targets", type=int, default=50, help="targets for part 2")
    parser.add_argument("--no-rss", action="store_true", help="skip part 4")
    args = parser.parse_args()
    configure_logging("json", "warning")
    command = "benchmarks/bench_memory.py " + " ".join(sys.argv[1:])

    mem = window_memory(args.pods, 180)
    cpu = window_cpu(args.pods, 70, 120)
    recorded, planner = asyncio.run(_record_target(700))
    hist = history_memory(recorded, planner, args.history_targets)
    rss_rows = {} if args.no_rss else rss(args.targets)

    rows: list[list[object]] = [
        [
            "windows",
            "KiB/pod (full 60 s, 1 s scrapes)",
            "points kept",
            "observe us/pod/tick",
            "aggregate us/pod/tick",
            "MB at 8,000 pods",
        ]
    ]
    for name in IMPLEMENTATIONS:
        m, c = mem[name], cpu[name]
        rows.append(
            [
                name,
                f"{m['bytes_per_pod'] / 1024:.1f}",
                m["points_per_pod"],
                f"{c['observe_us_per_pod_tick']:.1f}",
                f"{c['aggregate_us_per_pod_tick']:.1f}",
                f"{m['bytes_per_pod'] * 8000 / 1e6:.0f}",
            ]
        )
    print(table(rows))
    print()
    per_target = [["per target (full)", "KB", "MB at 1,000 targets"]]
    for part in ("observations", "decisions"):
        n = hist["now"][f"{part}_bytes_per_target"]
        per_target.append([part, f"{n / 1000:.1f}", f"{n * 1000 / 1e6:.1f}"])
    p = hist["planner_bytes_per_target"]
    per_target.append(["planner state (not owned here)", f"{p / 1000:.1f}", f"{p / 1e3:.1f}"])
    windows = {name: POD_PER_TARGET * mem[name]["bytes_per_pod"] for name in IMPLEMENTATIONS}
    per_target.append(
        [
            "windows, 8 pods",
            f"{windows['now'] / 1000:.1f}",
            f"{windows['now'] * 1000 / 1e6:.1f}",
        ]
    )
    total = {
        name: windows[name]
        + p
        + hist[name]["observations_bytes_per_target"]
        + hist[name]["decisions_bytes_per_target"]
        for name in IMPLEMENTATIONS
    }
    per_target.append(
        [
            "**total**",
            f"{total['now'] / 1000:.1f}",
            f"{total['now'] * 1000 / 1e6:.1f}",
        ]
    )
    print(table(per_target))
    if rss_rows:
        print()
        rss_table = [
            ["RSS, fresh process", "imports + 1 target (MB)", f"+ {args.targets} x 8 full (MB)"]
        ]
        for name, r in rss_rows.items():
            rss_table.append(
                [f"windows {name}", f"{r['rss_base_mb']:.1f}", f"{r['rss_full_mb']:.1f}"]
            )
        print(table(rss_table))
    result = {
        "benchmark": "memory",
        "command": command,
        "windows_memory": mem,
        "windows_cpu": cpu,
        "per_target": hist,
        "per_target_total_bytes": total,
        "rss": rss_rows,
        "rss_targets": args.targets,
    }
    RESULTS.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(f"\nwrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
