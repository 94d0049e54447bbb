"""The control loop's decisions, warm-pool sizes, scale writes and /metrics series are
bit-for-bit those recorded before the per-tick CPU work of issue 16 (planner, decide,
controller metrics, loop): speed changes may not change what the controller decides or
exports. Recorded with ``.venv/bin/python -m tests.forecast.golden``.

Re-recorded once on purpose (2026-12-03): the capacity books now keep their samples as
float32 (`autoscaler/forecast/capacity.py`). Compared tick by tick with the recording
before: the same 31 scale writes and warm-pool sizes, every decision's replicas, reasons
and messages the same; only the learned capacity numbers (and the metric targets made
from them) moved, by at most 3.1e-8 relative.

Re-recorded on purpose (issue 36): decisions made with prediction on carry the learned
load regime as ``regime.*`` numbers (`forecast/regime.py`). Compared with the recording
before, with those numbers left out: every chunk and last decision equal, the same scale
writes, warm-pool sizes and /metrics series (no golden target turns steady long enough
to change a decision).

Re-recorded on purpose (issue 36, the fleet regime): decisions carry ``regime.fleet`` and
the measured burst length and cold start. Of the 31 scale writes one is gone: the
``bench`` target's 6 -> 10 (its level flat, its bursts shorter than the cold start, it
holds its learned fleet of 6); every other write is the same, in the same order."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.api.metrics import ControllerMetrics
from autoscaler.control.adapters import PlannerAdapter
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, TargetRef
from autoscaler.errors import ConflictError, MetricSourceError
from autoscaler.policy.schema import validate_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.forecast.golden import FIXTURES, Tick, _exact, ticks

LOOP_FIXTURE = FIXTURES / "loop.json"
LOOP_TICKS = 700
CHUNK = 100

POLICIES: dict[str, dict[str, Any]] = {
    "bench": {
        "maxReplicaCount": 16,
        "metrics": [{"signal": "running", "target": 42}],
        "prediction": {"enabled": True},
    },
    "panic-pool-fallback": {
        "maxReplicaCount": 12,
        "prediction": {"enabled": True, "minPodsToLearn": 2},
        "panic": {"windowSeconds": 6, "threshold": 2.0, "stableWindowSeconds": 30},
        "warmPool": {"enabled": True, "maxReplicas": 3, "leadTimeSeconds": 120},
        "fallback": {"failureThreshold": 3, "replicas": 4},
    },
    "idle-holt-learned": {
        "minReplicaCount": 0,
        "maxReplicaCount": 10,
        "cooldownPeriod": 30,
        "metrics": [
            {"signal": "waiting", "target": 4, "activationTarget": 0.5},
            {"signal": "running", "target": 30},
        ],
        "prediction": {
            "forecaster": "holt",
            "horizonSeconds": 60,
            "learnedCapacitySignal": "running",
        },
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 30,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}],
            }
        },
    },
    "no-prediction": {
        "maxReplicaCount": 8,
        "metrics": [
            {"signal": "kv_cache_usage", "type": "Value", "target": 0.8},
            {"signal": "waiting", "target": 4},
        ],
    },
}


@dataclass
class _Target:
    replicas: int = 2
    ready: int = 2
    starting: list[int] = field(default_factory=list)  # tick each starting pod is ready
    samples: list[float] = field(default_factory=list)
    version: int = 1


class GoldenCluster:
    """Pods become ready 5 ticks after a scale-up; a conflict now and then."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.targets: dict[TargetRef, _Target] = {}
        self.tick = 0
        self.writes: list[tuple[str, int]] = []
        self.pool: list[tuple[str, int, bool]] = []

    def _of(self, spec: TargetSpec) -> _Target:
        return self.targets.setdefault(spec.ref, _Target())

    def advance(self) -> None:
        self.tick += 1
        for tg in self.targets.values():
            done = [k for k in tg.starting if k <= self.tick]
            tg.starting = [k for k in tg.starting if k > self.tick]
            for _ in done:
                tg.samples.append(self.rng.uniform(40.0, 160.0))
            tg.ready = min(tg.replicas, tg.ready + len(done))

    async def observe(self, spec: TargetSpec) -> TargetView:
        tg = self._of(spec)
        return TargetView(
            tg.replicas,
            tg.ready,
            str(tg.version),
            pending_replicas=tg.replicas - tg.ready,
            capacity_max_replicas=10 if self.tick % 97 < 40 else None,
            cold_start_samples_s=tuple(tg.samples[-20:]),
            cold_start_total=len(tg.samples),
        )

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        tg = self._of(spec)
        if self.rng.random() < 0.05:
            tg.version += 1
            raise ConflictError("the object has been modified")
        self.writes.append((spec.ref.name, replicas))
        if replicas > tg.replicas:
            tg.starting += [self.tick + 5] * (replicas - tg.replicas)
        else:
            tg.ready = min(tg.ready, replicas)
            tg.starting = tg.starting[: max(0, replicas - tg.ready)]
        tg.replicas = replicas
        tg.version += 1

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        self.pool.append((spec.ref.name, replicas, peak))

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        return None


class GoldenSignals:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.current: dict[TargetRef, Tick] = {}

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        if self.rng.random() < 0.01:
            raise MetricSourceError("pod x: connection refused")
        tick = self.current[spec.ref]
        scale = view.ready_replicas / 3 if view.ready_replicas else 1.0
        signals = {
            k: (v if k.startswith(("kv_", "ttft")) else v * scale) for k, v in tick.signals.items()
        }
        partial = self.rng.random() < 0.03
        rejected = {"not-finite": 1} if self.rng.random() < 0.02 else {}
        return SignalReading(
            signals=signals,
            pods_read=max(0, view.ready_replicas - 1) if partial else view.ready_replicas,
            rejected=rejected,
        )


def _samples(metrics: ControllerMetrics) -> list[list[str]]:
    text = generate_latest(metrics.registry).decode()
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_created"):
                continue
            out.append([s.name, json.dumps(sorted(s.labels.items())), repr(float(s.value))])
    return sorted(out)


async def _run() -> dict[str, Any]:
    rng = random.Random(1616)
    clock = FakeClock(1000.0)
    cluster = GoldenCluster(rng)
    signals = GoldenSignals(rng)
    metrics = ControllerMetrics()
    state = ControllerState()
    loop = ControlLoop(
        state,
        cluster,
        signals,
        planner_factory=PlannerAdapter,
        clock=clock,
        observer=metrics,
    )
    refs = {name: TargetRef("golden", name) for name in POLICIES}
    loop.set_targets(
        StoredTarget(TargetSpec(ref=ref, policy=validate_policy(POLICIES[name])), "1")
        for name, ref in refs.items()
    )
    streams = {ref: ticks(seed=k, n=LOOP_TICKS) for k, ref in enumerate(refs.values())}
    chunks: list[str] = []
    h = hashlib.sha256()
    exports: list[list[list[str]]] = []
    last_t = 1000.0
    for i in range(LOOP_TICKS):
        current = {ref: next(stream) for ref, stream in streams.items()}
        signals.current = current
        t = current[refs["bench"]].t
        await clock.advance(max(0.0, t - last_t))
        last_t = t
        cluster.advance()
        decisions = await loop.tick()
        h.update(json.dumps(_exact([d.to_dict() for d in decisions]), sort_keys=True).encode())
        if (i + 1) % CHUNK == 0:
            chunks.append(h.hexdigest())
            h = hashlib.sha256()
            exports.append(_samples(metrics))
    last = {
        str(ref): _exact(st.last_decision.to_dict())
        for ref, st in state.targets.items()
        if st.last_decision
    }
    return {
        "chunks": chunks,
        "last": last,
        "writes": [list(w) for w in cluster.writes],
        "pool": [list(p) for p in cluster.pool],
        "metrics": exports,
    }


def record_loop() -> dict[str, Any]:
    return asyncio.run(_run())


@pytest.fixture(scope="module")
def golden() -> dict[str, Any]:
    return dict(json.loads(Path(LOOP_FIXTURE).read_text()))


@pytest.fixture(scope="module")
def ours() -> dict[str, Any]:
    return record_loop()


def test_decisions_match_the_recorded_golden_sequence(
    golden: dict[str, Any], ours: dict[str, Any]
) -> None:
    for k, (a, b) in enumerate(zip(ours["chunks"], golden["chunks"], strict=True)):
        assert a == b, f"decisions differ from tick {k * CHUNK} on"
    assert ours["last"] == golden["last"]


def test_scale_writes_and_warm_pool_sizes_match_the_golden_sequence(
    golden: dict[str, Any], ours: dict[str, Any]
) -> None:
    assert ours["writes"] == golden["writes"]
    assert ours["pool"] == golden["pool"]
    assert len(golden["writes"]) > 10  # the sequence does scale


def test_exported_metric_series_match_the_golden_sequence(
    golden: dict[str, Any], ours: dict[str, Any]
) -> None:
    for k, (a, b) in enumerate(zip(ours["metrics"], golden["metrics"], strict=True)):
        assert a == b, f"/metrics differs after tick {(k + 1) * CHUNK}"
