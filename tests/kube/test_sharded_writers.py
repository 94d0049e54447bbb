"""Control loops over shard Leases: three replicas, 20 targets, each loop ticking every
round. Whatever happens to the replicas (all up, one stalled, one joining), no target is
written by two loops in the same tick, and once settled every target has exactly one
writer. Real Lease traffic over the local API; a fake clock for the loops and Leases."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from kubernetes_asyncio.client import ApiClient

from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, TargetRef
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.sharding import ShardManager
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.kube.test_sharding import CFG, TARGETS, Clock, make, settle

POLICY = load_policy({"maxReplicaCount": 20, "metrics": [{"signal": "waiting", "target": 4}]})
Writes = dict[int, dict[TargetRef, set[str]]]  # round -> target -> who wrote (status/scale)


@dataclass
class RecordingCluster:
    """Every target at 2 replicas; records who writes what in which round."""

    who: str
    writes: Writes
    round: list[int] = field(default_factory=lambda: [0])

    async def observe(self, spec: TargetSpec) -> TargetView:
        return TargetView(spec_replicas=2, ready_replicas=2, resource_version="1")

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        self.writes[self.round[0]][spec.ref].add(self.who)

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        self.writes[self.round[0]][spec.ref].add(self.who)

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        self.writes[self.round[0]][spec.ref].add(self.who)  # status: a write too


class Signals:
    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        return SignalReading(signals={"waiting": 16.0}, pods_read=2)  # wants 4: a scale-up


class LoopClock:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def now(self) -> float:
        return self.clock.t

    async def sleep(self, seconds: float) -> None:  # pragma: no cover - tick() only
        raise AssertionError("the test drives tick() itself")


@dataclass
class Replica:
    manager: ShardManager
    loop: ControlLoop
    cluster: RecordingCluster


def replica(
    kclient: ApiClient,
    who: str,
    clock: Clock,
    writes: Writes,
    rnd: list[int],
    held_only: bool = False,
) -> Replica:
    manager = make(kclient, who, clock)
    cluster = RecordingCluster(who, writes, rnd)
    loop = ControlLoop(
        ControllerState(),
        cluster,
        Signals(),
        leader=manager,
        clock=LoopClock(clock),
        decides=manager.can_write if held_only else None,
    )
    loop.set_targets(StoredTarget(TargetSpec(ref=r, policy=POLICY), "1") for r in TARGETS)
    return Replica(manager, loop, cluster)


async def play(
    kapi: LocalKubeAPI,
    clock: Clock,
    rnd: list[int],
    stepping: list[Replica],
    ticking: list[Replica],
    rounds: int,
) -> None:
    """Each round: one retry period passes, the stepping replicas renew/move Leases, then
    every ticking replica's loop runs one tick (a stalled replica ticks but cannot renew)."""
    for _ in range(rounds):
        rnd[0] += 1
        clock.t += CFG.retry_period_s
        for r in stepping:
            await r.manager.step()
            await settle(kapi, [x.manager for x in stepping])
        for r in ticking:
            await r.loop.tick()


def two_writers(writes: Writes) -> list[tuple[int, TargetRef, set[str]]]:
    return [(n, ref, who) for n, per in writes.items() for ref, who in per.items() if len(who) > 1]


def one_writer_each(writes: Writes, n: int) -> bool:
    return all(len(writes[n].get(ref, set())) == 1 for ref in TARGETS)


async def test_three_replicas_never_write_a_target_twice_in_one_tick_as_one_stalls_and_one_joins(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock, rnd = Clock(), [0]
    writes: Writes = defaultdict(lambda: defaultdict(set))
    a, b, c = rs = [replica(kclient, who, clock, writes, rnd) for who in ("a", "b", "c")]
    try:
        for r in rs:
            await r.manager.informer.wait_synced()
        await play(kapi, clock, rnd, rs, rs, 4)
        assert one_writer_each(writes, rnd[0]), "settled: every target has exactly one writer"
        assert {w for per in writes[rnd[0]].values() for w in per} == {"a", "b", "c"}

        # c stalls (cannot renew: partition, GC pause) but its loop goes on ticking.
        stalled_at = rnd[0]
        await play(kapi, clock, rnd, [a, b], rs, 9)
        moved = next(n for n in range(stalled_at + 1, rnd[0] + 1) if one_writer_each(writes, n))
        assert (moved - stalled_at) * CFG.retry_period_s <= (
            CFG.lease_duration_s + CFG.retry_period_s
        )
        assert all("c" not in writes[rnd[0]][ref] for ref in TARGETS)

        # d joins; c comes back (its Leases are gone, it rejoins as a member).
        d = replica(kclient, "d", clock, writes, rnd)
        rs.append(d)
        await d.manager.informer.wait_synced()
        await play(kapi, clock, rnd, rs, rs, 5)
        assert one_writer_each(writes, rnd[0])
        assert {w for per in writes[rnd[0]].values() for w in per} == {"a", "b", "c", "d"}
        assert two_writers(writes) == []
    finally:
        for r in rs:
            await r.manager.stop()


async def test_with_scope_held_each_replica_decides_only_the_targets_it_writes(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock, rnd = Clock(), [0]
    writes: Writes = defaultdict(lambda: defaultdict(set))
    rs = [replica(kclient, who, clock, writes, rnd, held_only=True) for who in ("a", "b", "c")]
    try:
        for r in rs:
            await r.manager.informer.wait_synced()
        await play(kapi, clock, rnd, rs, [], 3)
        decided: dict[str, set[TargetRef]] = {}
        for r in rs:
            await r.loop.tick()
            states = r.loop.state.targets
            decided[r.manager.identity] = {t for t in TARGETS if states[t].last_decision}
        for r in rs:
            mine = {ref for ref in TARGETS if r.manager.can_write(ref)}
            assert decided[r.manager.identity] == mine  # no scrape, no decision for others
        assert sorted(len(v) for v in decided.values()) != [0, 0, len(TARGETS)]
        assert set().union(*decided.values()) == set(TARGETS)
    finally:
        for r in rs:
            await r.manager.stop()
