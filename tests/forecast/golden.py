"""Golden outputs of the planner and of the control loop, recorded from the code before
the per-tick CPU work of issue 16, so speed changes can prove they changed no number.

A seeded, deterministic sequence of ticks (irregular times, a repeated tick, a gap longer
than the models' ``max_gap_s``, missing signals, bursts, cold starts, latency around the
SLO) is fed to planners of every forecaster kind; every output (forecast signals, model,
horizon, capacities, numbers, needed replicas, warm pool size) is serialised exactly
(``repr`` of floats) and hashed per chunk of ticks, so a mismatch says where it started.

Re-record (only when planner or decision *behaviour* changes on purpose, e.g. issue 18):
``.venv/bin/python -m tests.forecast.golden`` and say so in the commit message.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoscaler.forecast.planner import Planner, PlannerConfig

FIXTURES = Path(__file__).parents[1] / "fixtures" / "golden"
PLANNER_FIXTURE = FIXTURES / "planner.json"
TICKS = 2400
CHUNK = 200

# name -> PlannerConfig keyword arguments
PLANNER_CONFIGS: dict[str, dict[str, Any]] = {
    "auto-default": {"capacity_fallback": {"running": 42.0}},
    "auto-short-season": {
        "season_period_s": 600.0,
        "season_bins": 12,
        "min_pods_to_learn": 2,
        "capacity_fallback": {"running": 42.0, "prompt_tokens_per_s": 8000.0},
    },
    "ewma": {"forecaster": "ewma"},
    "holt-fixed-horizon": {"forecaster": "holt", "horizon_s": 60.0, "load_base": "smoothed"},
    "seasonal": {"forecaster": "seasonal", "season_period_s": 600.0, "season_bins": 12},
}


@dataclass(frozen=True)
class Tick:
    t: float
    signals: dict[str, float]
    ready: int | None
    cold_starts: tuple[float, ...]


def ticks(seed: int = 16, n: int = TICKS) -> Iterator[Tick]:
    """Deterministic demand: a periodic base, bursts, noise, missing readings, gaps."""
    rng = random.Random(seed)
    t = 1000.0
    replicas = 3
    burst_until = -1.0
    for i in range(n):
        if i == n // 2:
            t += 1000.0  # longer than every model's max_gap_s (900 s): state restarts
        elif i > 0 and rng.random() < 0.01:
            pass  # a repeated tick (same t): models ignore it
        else:
            t += rng.choice((1.0, 1.0, 1.0, 0.5, 2.0, 3.0))
        if rng.random() < 0.005:
            burst_until = t + rng.uniform(20.0, 90.0)
        base = 4.0 * (1.0 + 0.6 * math.sin(2 * math.pi * t / 600.0))
        if t < burst_until:
            base *= 3.0
        if 300 <= i < 360:
            base = 0.0  # idle: ratios fall back to the learned intensity
        rate = max(0.0, base * (1.0 + rng.gauss(0.0, 0.1)))
        if rng.random() < 0.01:
            rate *= 8.0  # a lone spike: the burst filter clips it
        running = rate * 8.0 * (1.0 + rng.gauss(0.0, 0.05))
        waiting = max(0.0, running - replicas * 42.0) + (rng.random() < 0.2) * rng.random()
        kv = min(1.0, running / (replicas * 60.0))
        ttft = 0.08 + 0.02 * rng.random() + (0.6 if waiting > 1.0 else 0.0) * rng.random()
        signals = {
            "arrival_rate_per_s": rate,
            "prompt_tokens_per_s": rate * 700.0 * (1.0 + rng.gauss(0.0, 0.05)),
            "generation_tokens_per_s": rate * 180.0,
            "running": running,
            "waiting": waiting,
            "kv_cache_usage": kv,
            "kv_cache_usage_max": min(1.0, kv * 1.2),
            "ttft_p95_s": ttft,
        }
        for name in list(signals):
            if rng.random() < 0.03:
                del signals[name]  # missing, never zero
        if rng.random() < 0.01:
            signals = {}
        if rng.random() < 0.02:
            replicas = max(1, min(12, replicas + rng.choice((-1, 1, 2))))
        ready = None if rng.random() < 0.02 else replicas
        cold = tuple(rng.uniform(30.0, 200.0) for _ in range(rng.random() < 0.01))
        yield Tick(t, signals, ready, cold)


def _exact(value: Any) -> Any:
    """JSON-ready with floats as their exact repr (no rounding anywhere)."""
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, dict):
        return {str(k): _exact(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [_exact(v) for v in value]
    return value


def planner_outputs(config: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every output of one planner, tick by tick."""
    planner = Planner(PlannerConfig(**config))
    for i, tick in enumerate(ticks()):
        for duration_s in tick.cold_starts:
            planner.observe_pod_ready(tick.t, duration_s)
        planner.update(tick.t, tick.signals, tick.ready)
        out: dict[str, Any] = {"i": i}
        fc = planner.forecast(tick.t)
        out["horizon_s"] = fc.horizon_s
        out["model"] = fc.model
        out["signals"] = dict(fc.signals)
        out["capacity"] = dict(fc.capacity_per_replica)
        if i % 3 == 0:
            out["pool"] = planner.warm_pool_size(tick.t, 300.0, tick.ready or 1)
            out["needed"] = planner.needed_replicas(
                tick.t, 60.0, {"running": 42.0, "arrival_rate_per_s": 2.0}
            )
            out["intensity"] = planner.intensity_of("running")
        out["numbers"] = dict(planner.numbers())
        yield _exact(out)


def digests(outputs: Iterator[dict[str, Any]]) -> dict[str, Any]:
    """sha256 per chunk of ticks, and the last tick's outputs in clear."""
    chunks: list[str] = []
    h = hashlib.sha256()
    last: dict[str, Any] = {}
    for out in outputs:
        h.update(json.dumps(out, sort_keys=True).encode())
        last = out
        if (out["i"] + 1) % CHUNK == 0:
            chunks.append(h.hexdigest())
            h = hashlib.sha256()
    return {"chunks": chunks, "last": last}


def record_planner() -> dict[str, Any]:
    return {name: digests(planner_outputs(cfg)) for name, cfg in PLANNER_CONFIGS.items()}


def main() -> None:
    from tests.control.test_loop_golden import LOOP_FIXTURE, record_loop

    FIXTURES.mkdir(parents=True, exist_ok=True)
    PLANNER_FIXTURE.write_text(json.dumps(record_planner(), indent=1, sort_keys=True) + "\n")
    LOOP_FIXTURE.write_text(json.dumps(record_loop(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {PLANNER_FIXTURE} and {LOOP_FIXTURE}")


if __name__ == "__main__":
    main()
