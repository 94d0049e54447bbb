"""Memory and CPU per target of the forecast planner (`forecast.Planner`), before and
after a change, side by side in one run (issue 16).

Run: nice -n 10 .venv/bin/python benchmarks/bench_planner_memory.py [--baseline REV]
(writes benchmarks/results/planner_memory.json)

The code at ``--baseline`` (a git revision, extracted with ``git archive``) and the
working tree are measured alternately in fresh subprocesses, ``--rounds`` times each;
the median of each is reported. Two feeds, each into ``--planners`` planners:

- ``steady``: the fleet of bench_scale / bench_tick / bench_rss (8 ready pods, running
  42 per replica, the policy's running target 42 as the capacity fallback, signals with
  noise), ``--ticks`` ticks one second apart: the capacity books fill their 600-sample
  windows, as in the 1,000-target RSS run.
- ``full``: the same fleet always queued, latency near or over the SLO: every signal's
  sustained and violating books fill (the most a target holds, ~4,000 samples).
- ``golden``: the seeded recording of the golden tests (tests/forecast/golden.py,
  config ``auto-default``: irregular ticks, gaps, bursts, violations, cold starts).

Per feed: bytes per planner still allocated after the feed (tracemalloc, the planners
built and fed while tracing, divided by their number), the capacity estimator's part
of them (a sys.getsizeof walk over its books), and CPU microseconds per planner per tick
of ``update`` and of ``forecast`` (``time.process_time``; a second, untraced pass).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from revisions import extract, short_rev, tree_rev

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "planner_memory.json"
FEEDS = ("steady", "full", "golden")


Tick = tuple[float, dict[str, float], int | None, tuple[float, ...]]


def _steady(n: int, full: bool = False) -> Iterator[Tick]:
    """bench_tick's steady fleet: what 8 pods report, summed, one tick a second.
    ``full``: always a queue and latency near or over the SLO, so every signal's
    sustained and violating books fill (the most samples a target can hold)."""
    rng = random.Random(16)
    pods = 8
    for i in range(n):
        rate = 3.0 * (1.0 + 0.05 * rng.gauss(0.0, 1.0))
        ttft = 0.3 + (0.3 if full else 0.05) * rng.random()
        signals = {
            "waiting": 2.0 + rng.random() if full else max(0.0, rng.gauss(0.5, 0.5)),
            "running": 42.0 * pods * (1.0 + 0.02 * rng.gauss(0.0, 1.0)),
            "kv_cache_usage": 0.6 + 0.02 * rng.random(),
            "kv_cache_usage_max": 0.7 + 0.02 * rng.random(),
            "ttft_p95_s": ttft,
            "arrival_rate_per_s": rate,
            "prompt_tokens_per_s": rate * 700.0,
            "generation_tokens_per_s": rate * 180.0,
        }
        yield 1000.0 + i, signals, pods, ()


def _golden(n: int) -> Iterator[Tick]:
    sys.path.append(str(ROOT))  # last: `autoscaler` must stay the code under test
    from tests.forecast.golden import ticks

    for tick in ticks(n=n):
        yield tick.t, tick.signals, tick.ready, tick.cold_starts


def _deep_size(obj: Any, seen: set[int]) -> int:
    if id(obj) in seen or isinstance(obj, str | int | type(None) | bool):
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict) or type(obj).__name__ == "mappingproxy":
        size += sum(_deep_size(k, seen) + _deep_size(v, seen) for k, v in obj.items())
    elif isinstance(obj, tuple | list):
        size += sum(_deep_size(v, seen) for v in obj)
    else:  # a slotted object (the capacity books since rss2): what its slots hold
        for name in getattr(type(obj), "__slots__", ()):
            size += _deep_size(getattr(obj, name, None), seen)
    return size


def _books_bytes(capacity: Any) -> int:
    """The capacity estimator's books (both orders where kept), as sys.getsizeof sees them."""
    seen: set[int] = set()
    names = ("sustained", "violating", "sorted_sustained", "sorted_violating")
    return sum(_deep_size(getattr(capacity, n, {}), seen) for n in names)


def _worker(args: argparse.Namespace) -> dict[str, Any]:
    import autoscaler
    from autoscaler.forecast.planner import Planner, PlannerConfig

    config = PlannerConfig(capacity_fallback={"running": 42.0})
    out: dict[str, Any] = {"code": str(Path(autoscaler.__file__).parent)}
    for feed in FEEDS:
        if feed == "golden":
            ticks = list(_golden(args.ticks))
        else:
            ticks = list(_steady(args.ticks, full=feed == "full"))
        warm = Planner(config)  # one-off caches (evolvers, numpy's) outside the count
        for t, signals, ready, _ in ticks[:50]:
            warm.observe_pod_ready(t, 60.0)
            warm.update(t, signals, ready)
            warm.forecast(t)
        del warm
        gc.collect()
        tracemalloc.start()
        start = tracemalloc.get_traced_memory()[0]
        planners = [Planner(config) for _ in range(args.planners)]
        for t, signals, ready, cold in ticks:
            for p in planners:
                for duration_s in cold:
                    p.observe_pod_ready(t, duration_s)
                p.update(t, signals, ready)
                p.forecast(t)
        gc.collect()
        held = (tracemalloc.get_traced_memory()[0] - start) / args.planners
        tracemalloc.stop()
        books = _books_bytes(planners[0].capacity)
        samples = sum(
            len(b)
            for books_of in (planners[0].capacity.sustained, planners[0].capacity.violating)
            for b in books_of.values()
        )
        del planners
        gc.collect()
        # CPU: fresh planners, untraced; the last quarter of the ticks is timed (books full).
        planners = [Planner(config) for _ in range(args.planners)]
        timed_from = len(ticks) - len(ticks) // 4
        update_s = forecast_s = 0.0
        for i, (t, signals, ready, cold) in enumerate(ticks):
            timing = i >= timed_from
            for p in planners:
                for duration_s in cold:
                    p.observe_pod_ready(t, duration_s)
                t0 = time.process_time()
                p.update(t, signals, ready)
                t1 = time.process_time()
                p.forecast(t)
                t2 = time.process_time()
                if timing:
                    update_s += t1 - t0
                    forecast_s += t2 - t1
        per = 1e6 / ((len(ticks) - timed_from) * args.planners)
        out[feed] = {
            "planner_bytes": held,
            "capacity_books_bytes": books,
            "capacity_samples": samples,
            "update_us": update_s * per,
            "forecast_us": forecast_s * per,
        }
        del planners
        gc.collect()
    return out


def _run_worker(code: Path | None, args: argparse.Namespace) -> dict[str, Any]:
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, __file__, "--worker", "--ticks", str(args.ticks)]
    cmd += ["--planners", str(args.planners)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    expected = str(code / "autoscaler") if code is not None else str(ROOT / "autoscaler")
    if result["code"] != expected:
        raise RuntimeError(f"worker imported {result['code']}, expected {expected}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default="main")
    parser.add_argument("--ticks", type=int, default=1500)
    parser.add_argument("--planners", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(_worker(args)))
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
    keys = (
        ("planner_bytes", "planner KB per target (tracemalloc)", 1e-3),
        ("capacity_books_bytes", "capacity books KB per target (getsizeof)", 1e-3),
        ("capacity_samples", "capacity samples per target", 1.0),
        ("update_us", "planner.update CPU us per tick", 1.0),
        ("forecast_us", "planner.forecast CPU us per tick", 1.0),
    )
    rows = []
    for feed in FEEDS:
        for key, label, scale in keys:
            b = statistics.median(r[feed][key] for r in before) * scale
            a = statistics.median(r[feed][key] for r in after) * scale
            rows.append({"feed": feed, "what": label, "key": key, "before": b, "after": a})
    markdown = "| feed | what | before | after | after / before |\n|---|---|---|---|---|\n"
    markdown += "".join(
        f"| {r['feed']} | {r['what']} | {r['before']:.1f} | {r['after']:.1f} | "
        f"{r['after'] / r['before'] if r['before'] else float('nan'):.2f} |\n"
        for r in rows
    )
    document = {
        "benchmark": "bench_planner_memory",
        "command": " ".join(["benchmarks/bench_planner_memory.py", *sys.argv[1:]]),
        "baseline": rev,
        "current": head,
        "ticks": args.ticks,
        "planners": args.planners,
        "rounds": args.rounds,
        "rows": rows,
        "raw": {"before": before, "after": after},
        "markdown": markdown,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(f"baseline {rev} vs {head}; per target, median of {args.rounds} rounds")
    print(markdown)
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    main()
