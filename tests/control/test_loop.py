"""The control loop over in-memory ports and a fake clock: no sockets, no sleeping."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.errors import ConflictError, MetricSourceError
from autoscaler.policy.schema import validate_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec

REF = TargetRef("demo", "llama")


@dataclass
class FakeCluster:
    replicas: int = 2
    version: int = 1
    owner_conflict: str | None = None
    conflicts: int = 0
    external_change_on_conflict: int | None = None
    writes: list[int] = field(default_factory=list)
    records: list[tuple[str, bool]] = field(default_factory=list)
    pool: list[tuple[int, bool]] = field(default_factory=list)

    async def observe(self, spec: TargetSpec) -> TargetView:
        return TargetView(
            self.replicas, self.replicas, str(self.version), owner_conflict=self.owner_conflict
        )

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        if self.conflicts > 0:
            self.conflicts -= 1
            if self.external_change_on_conflict is not None:
                self.replicas = self.external_change_on_conflict
            self.version += 1
            raise ConflictError("the object has been modified")
        if resource_version != str(self.version):
            raise ConflictError("stale resourceVersion")
        self.writes.append(replicas)
        self.replicas = replicas
        self.version += 1

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        self.pool.append((replicas, peak))

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        self.records.append((str(decision.reason), applied))


@dataclass
class FakeSignals:
    values: Mapping[str, float] = field(default_factory=dict)
    fail: bool = False
    reads: int = 0

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        self.reads += 1
        if self.fail:
            raise MetricSourceError("pod llama-0: connection refused")
        return SignalReading(signals=dict(self.values), pods_read=view.ready_replicas)


class NotLeader:
    is_leader = False

    def can_write(self, ref: TargetRef) -> bool:
        return False


def make(
    policy: dict[str, Any] | None = None, mode: str = "direct", **kw: Any
) -> tuple[ControlLoop, FakeCluster, FakeSignals, ControllerState, FakeClock]:
    doc = policy or {"maxReplicaCount": 20, "metrics": [{"signal": "waiting", "target": 4}]}
    spec = TargetSpec(ref=REF, policy=validate_policy(doc), mode=mode)  # type: ignore[arg-type]
    state = ControllerState()
    cluster, signals, clock = FakeCluster(), FakeSignals(), FakeClock()
    loop = ControlLoop(state, cluster, signals, clock=clock, **kw)
    loop.set_targets([StoredTarget(spec, "1")])
    return loop, cluster, signals, state, clock


async def test_scales_up_in_direct_mode_and_records_the_event() -> None:
    loop, cluster, signals, state, _ = make()
    signals.values = {"waiting": 16}
    [d] = await loop.tick()
    assert d.desired_replicas == 4 and cluster.writes == [4]
    assert cluster.records == [("scale-up", True)]
    status = state.status(REF)
    assert status is not None and status.last_decision == d and status.applied_replicas == 4


async def test_holds_replicas_when_scrape_fails() -> None:
    loop, cluster, signals, state, _ = make()
    signals.fail = True
    [d] = await loop.tick()
    assert d.reason == Reason.HOLD_MISSING_DATA and d.desired_replicas == 2
    assert cluster.writes == []


async def test_advisory_mode_decides_but_never_writes() -> None:
    loop, cluster, signals, _, _ = make(mode="advisory")
    signals.values = {"waiting": 16}
    [d] = await loop.tick()
    assert d.desired_replicas == 4 and cluster.writes == []
    assert cluster.records == [("scale-up", False)]


async def test_process_wide_dry_run_never_writes() -> None:
    loop, cluster, signals, _, _ = make(dry_run=True)
    signals.values = {"waiting": 16}
    [d] = await loop.tick()
    assert d.desired_replicas == 4 and cluster.writes == []


async def test_follower_never_writes_replicas_status_or_events() -> None:
    loop, cluster, signals, state, _ = make(leader=NotLeader())
    signals.values = {"waiting": 16}
    [d] = await loop.tick()
    assert cluster.writes == []
    assert cluster.records == []  # no status write, no Event: the holder records
    status = state.status(REF)
    assert status is not None and status.last_decision == d  # but it decides and publishes


async def test_refuses_to_fight_an_hpa_owning_the_target() -> None:
    loop, cluster, signals, state, _ = make()
    cluster.owner_conflict = "HorizontalPodAutoscaler demo/llama targets Deployment llama"
    signals.values = {"waiting": 16}
    await loop.tick()
    status = state.status(REF)
    assert cluster.writes == []
    assert (
        status is not None
        and status.condition is not None
        and "OwnershipConflict" in status.condition
    )


async def test_conflict_re_decides_instead_of_applying_stale_decision() -> None:
    loop, cluster, signals, _, _ = make()
    signals.values = {"waiting": 16}  # asks for 4 from 2
    cluster.conflicts = 1
    cluster.external_change_on_conflict = 8  # someone else scaled to 8 meanwhile
    [d] = await loop.tick()
    # Re-decided against 8 replicas: 16 waiting / 4 = 4 < 8, but scale-down is stabilised.
    assert 4 not in cluster.writes
    assert d.current_replicas == 8


async def test_conflict_then_success_applies_the_re_decided_count() -> None:
    loop, cluster, signals, _, _ = make()
    signals.values = {"waiting": 16}
    cluster.conflicts = 1
    [d] = await loop.tick()
    assert cluster.writes == [4] and d.desired_replicas == 4


async def test_polling_interval_is_respected_per_target() -> None:
    loop, _, signals, _, clock = make(
        {"pollingInterval": 5, "metrics": [{"signal": "waiting", "target": 4}]}
    )
    for _ in range(10):
        await loop.tick()
        await clock.advance(1.0)
    assert signals.reads == 2


async def test_run_ticks_on_the_clock_and_publishes(monkeypatch: pytest.MonkeyPatch) -> None:
    loop, _, signals, state, clock = make()
    signals.values = {"waiting": 4}
    task = asyncio.create_task(loop.run())
    try:
        await clock.advance(0)
        await clock.advance(3.0)
        assert state.ticks == 4
        status = state.status(REF)
        assert status is not None and len(status.history) == 4
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_policy_edit_takes_effect_on_next_tick() -> None:
    loop, cluster, signals, _, _ = make()
    signals.values = {"waiting": 16}
    new = TargetSpec(
        ref=REF,
        policy=validate_policy(
            {"maxReplicaCount": 3, "metrics": [{"signal": "waiting", "target": 4}]}
        ),
    )
    loop.set_targets([StoredTarget(new, "2")])
    [d] = await loop.tick()
    assert d.desired_replicas == 3 and cluster.writes == [3]


async def test_removed_target_is_forgotten() -> None:
    loop, _, _, state, _ = make()
    loop.set_targets([])
    assert await loop.tick() == [] and state.targets == {}


async def test_publish_wakes_waiters_within_the_tick() -> None:
    loop, _, signals, state, _ = make()
    signals.values = {"waiting": 4}
    waiter = asyncio.create_task(state.wait_for_change(timeout_s=5))
    await asyncio.sleep(0)
    await loop.tick()
    assert await waiter is True


async def test_early_wakeup_does_not_skip_a_target_polled_every_tick() -> None:
    loop, _, signals, _, clock = make()
    for _ in range(10):
        await loop.tick()
        await clock.advance(0.999)  # each tick wakes a millisecond early
    assert signals.reads == 10


async def test_restart_mid_scale_down_window_does_not_scale_down() -> None:
    # HPA recordInitialRecommendation (kubernetes#68826): a restarted controller records the
    # current count as a recommendation, so it cannot scale down inside its first window.
    loop, cluster, signals, _, clock = make()
    cluster.replicas = 8
    signals.values = {"waiting": 32}
    await loop.tick()
    await clock.advance(100.0)
    signals.values = {"waiting": 4}  # asks for 1; the 300 s window keeps 8
    [d] = await loop.tick()
    assert d.desired_replicas == 8 and d.reason == Reason.STABILIZED
    # Restart at t=200: a new loop with no memory, same cluster, same clock.
    await clock.advance(100.0)
    spec = TargetSpec(
        ref=REF, policy=validate_policy({"metrics": [{"signal": "waiting", "target": 4}]})
    )
    restarted = ControlLoop(ControllerState(), cluster, signals, clock=clock)
    restarted.set_targets([StoredTarget(spec, "1")])
    held = []
    for t in (200.0, 350.0, 499.0):  # inside the window that starts at the restart
        await clock.advance(t - clock.now())
        [d] = await restarted.tick()
        held.append(d.desired_replicas)
    assert held == [8, 8, 8] and cluster.writes == []
    await clock.advance(501.0 - clock.now())
    [d] = await restarted.tick()
    assert d.desired_replicas == 1 and cluster.writes == [1]


async def test_steady_decisions_are_logged_at_info_only_on_change_plus_a_summary() -> None:
    import structlog

    loop, cluster, signals, _, clock = make(summary_every_s=10.0)
    signals.values = {"waiting": 8}  # 8 / 4 per replica = 2 = current: steady
    with structlog.testing.capture_logs() as logs:
        for _ in range(5):
            await loop.tick()
            await clock.advance(1.0)
        signals.values = {"waiting": 16}  # a scale-up: logged
        await loop.tick()
        await clock.advance(6.0)
        await loop.tick()  # 12 s since the loop started: one summary
    infos = [e for e in logs if e["log_level"] == "info"]
    decisions = [e for e in infos if e["event"] == "decision"]
    # The first, the scale-up, and the first steady tick at the new size.
    assert [(e["current"], e["desired"]) for e in decisions] == [(2, 2), (2, 4), (4, 4)]
    [summary] = [e for e in infos if e["event"] == "decisions summary"]
    assert (summary["decisions"], summary["logged_changes"]) == (7, 3)
