"""Sleepers in the controller (control/sleepers.py) over in-memory pods, engines and a
fake wall clock: what is put to sleep, woken, cold-started and deleted, and that a failed
sleep or wake never costs capacity. No sockets, no real sleeping."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.control.adapters import status_conditions
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import Replica, SignalReading, TargetView
from autoscaler.control.sleepers import (
    DELETE_COST,
    MAX_WAKE_FAILURES,
    SLEEPER_COST,
    SleeperController,
    choose,
)
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, TargetRef
from autoscaler.errors import ActuationError, ConflictError
from autoscaler.metrics.source import PodEndpoint
from autoscaler.names import (
    ASLEEP_SINCE_ANNOTATION,
    AWAKE_LABEL,
    POD_DELETION_COST_ANNOTATION,
    SLEEPING_LABEL,
)
from autoscaler.policy.schema import Sleep, validate_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec

REF = TargetRef("llm", "llama")


class Wall:
    def __init__(self, t: float = 1_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


@dataclass
class Pod:
    name: str
    ready: bool = True
    asleep: bool = False  # the engine's own state
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)

    @property
    def cost(self) -> int:
        return int(self.annotations.get(POD_DELETION_COST_ANNOTATION, "0"))


@dataclass
class World:
    """A Deployment's pods (the ReplicaSet removes the lowest deletion cost first; new pods
    are Ready at once), their engines, and a cache that may lag the pod patches."""

    pods: dict[str, Pod] = field(default_factory=dict)
    version: int = 1
    writes: list[int] = field(default_factory=list)
    next_pod: int = 0
    events: list[tuple[str, str, bool]] = field(default_factory=list)
    fail_sleep: set[str] = field(default_factory=set)
    fail_wake: set[str] = field(default_factory=set)
    answers_is_sleeping: bool = True
    cache_lags: bool = False  # observe() shows the labels as they were before the last tick
    _seen: dict[str, dict[str, str]] = field(default_factory=dict)
    conflicts: int = 0
    calls: list[str] = field(default_factory=list)

    def add(self, n: int) -> None:
        for _ in range(n):
            name = f"llama-{self.next_pod}"
            self.next_pod += 1
            self.pods[name] = Pod(name)

    @property
    def replicas(self) -> int:
        return len(self.pods)

    def sleeping(self) -> list[str]:
        return sorted(n for n, p in self.pods.items() if p.labels.get(SLEEPING_LABEL) == "true")

    # -- ClusterPort ------------------------------------------------------------------------
    async def observe(self, spec: TargetSpec) -> TargetView:
        labels = {n: dict(p.labels) for n, p in self.pods.items()}
        if self.cache_lags:
            labels = {n: self._seen.get(n, labels[n]) for n in labels}
        self._seen = {n: dict(p.labels) for n, p in self.pods.items()}
        reps = tuple(
            Replica(
                n,
                p.ready,
                labels[n].get(SLEEPING_LABEL) == "true",
                f"http://{n}:8000",
                float(p.annotations[ASLEEP_SINCE_ANNOTATION])
                if ASLEEP_SINCE_ANNOTATION in p.annotations
                else None,
                f"http://{n}:8000/metrics",
            )
            for n, p in sorted(self.pods.items())
        )
        sleeping = sum(1 for r in reps if r.sleeping)
        awake_ready = [r for r in reps if r.ready and not r.sleeping]
        return TargetView(
            spec_replicas=self.replicas,
            ready_replicas=len(awake_ready),
            resource_version=str(self.version),
            pods=tuple(PodEndpoint(r.name, r.metrics_url or "") for r in awake_ready),
            sleeping_replicas=sleeping,
            replicas=reps,
        )

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        if self.conflicts:
            self.conflicts -= 1
            self.version += 1
            raise ConflictError("modified")
        if resource_version != str(self.version):
            raise ConflictError("stale")
        self.writes.append(replicas)
        self.version += 1
        if replicas > self.replicas:
            self.add(replicas - self.replicas)
        else:
            ranked = sorted(self.pods.values(), key=lambda p: (p.ready, p.cost))
            for p in ranked[: self.replicas - replicas]:
                del self.pods[p.name]

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        return None

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        return None

    # -- SleepIO ----------------------------------------------------------------------------
    def _pod(self, url: str) -> Pod:
        return self.pods[url.removeprefix("http://").split(":")[0]]

    async def sleep(self, engine_url: str) -> None:
        pod = self._pod(engine_url)
        self.calls.append(f"sleep {pod.name}")
        if pod.name in self.fail_sleep:
            raise ActuationError(f"POST {engine_url}/sleep: HTTP 500")
        pod.asleep = True

    async def wake(self, engine_url: str) -> None:
        pod = self._pod(engine_url)
        self.calls.append(f"wake {pod.name}")
        if pod.name in self.fail_wake:
            raise ActuationError(f"POST {engine_url}/wake_up: connection refused")
        pod.asleep = False

    async def is_sleeping(self, engine_url: str) -> bool | None:
        return self._pod(engine_url).asleep if self.answers_is_sleeping else None

    async def mark(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None:
        pod = self.pods[name]
        self.calls.append(f"mark {name}")
        for target, changes in ((pod.labels, labels), (pod.annotations, annotations)):
            for k, v in changes.items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v

    # -- EventPort --------------------------------------------------------------------------
    async def emit(self, spec: TargetSpec, reason: str, message: str, *, warning: bool) -> None:
        self.events.append((reason, message, warning))

    def reasons(self) -> list[str]:
        return [r for r, _, _ in self.events]


@dataclass
class Demand:
    waiting: float = 0.0

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        return SignalReading(signals={"waiting": self.waiting}, pods_read=len(view.pods))


def make(
    sleep: dict[str, Any] | None, replicas: int = 3, **policy: Any
) -> tuple[ControlLoop, World, Demand, SleeperController, Wall, ControllerState]:
    doc = {
        "minReplicaCount": 0,
        "maxReplicaCount": 8,
        "metrics": [{"signal": "waiting", "target": 4}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
        **({"sleep": sleep} if sleep is not None else {}),
        **policy,
    }
    spec = TargetSpec(ref=REF, policy=validate_policy(doc))
    world, demand, wall, state = World(), Demand(), Wall(), ControllerState()
    world.add(replicas)
    ctl = SleeperController(world, events=world, wall=wall, settle_s=0.0)
    loop = Loop(state, world, demand, clock=FakeClock(), sleepers=ctl)
    loop.set_targets([StoredTarget(spec, "1")])
    return loop, world, demand, ctl, wall, state


class Loop(ControlLoop):
    async def tick(self) -> list[Decision]:
        """One polling interval later (the fake clock moves; nothing sleeps)."""
        assert isinstance(self.clock, FakeClock)
        await self.clock.advance(1.0)
        return await super().tick()


def R(name: str, sleeping: bool = False, since: float | None = None, ready: bool = True) -> Replica:
    return Replica(name, ready, sleeping, f"http://{name}:8000", since)


# -- the pure choice ---------------------------------------------------------------------------
def test_choose_sleeps_within_the_budget_and_deletes_the_rest() -> None:
    pods = [R("a"), R("b"), R("c"), R("d")]
    acts = choose(pods, 4, 1, Sleep(max_sleeping=2), now_s=0.0)
    assert acts.sleep == ("d", "c") and acts.delete_awake == ("b",)
    assert (acts.wake, acts.start, acts.delete_sleepers) == ((), 0, ())


def test_choose_wakes_the_oldest_sleepers_first_and_cold_starts_only_the_rest() -> None:
    pods = [R("a"), R("s1", True, since=50.0), R("s2", True, since=10.0)]
    acts = choose(pods, 3, 4, Sleep(max_sleeping=2), now_s=60.0)
    assert acts.wake == ("s2", "s1") and acts.start == 1
    assert acts.sleep == acts.delete_awake == acts.delete_sleepers == ()


def test_choose_deletes_expired_sleepers_and_wakes_only_live_ones() -> None:
    pods = [R("a"), R("old", True, since=0.0), R("new", True, since=100.0)]
    acts = choose(pods, 3, 2, Sleep(max_sleeping=2, ttl_seconds=120.0), now_s=130.0)
    assert acts.delete_sleepers == ("old",) and acts.wake == ("new",) and acts.start == 0


def test_choose_never_removes_a_replica_still_starting() -> None:
    pods = [R("a"), R("b", ready=False)]
    acts = choose(pods, 2, 0, Sleep(max_sleeping=2), now_s=0.0)
    assert acts.sleep == ("a",) and acts.delete_awake == ()


@pytest.mark.parametrize("sleep", [Sleep(max_sleeping=1), None])
def test_sleepers_beyond_a_lowered_or_removed_budget_are_deleted(sleep: Sleep | None) -> None:
    pods = [R("a"), R("s1", True, since=1.0), R("s2", True, since=2.0)]
    acts = choose(pods, 3, 1, sleep, now_s=5.0)
    kept = 1 if sleep is not None else 0
    assert acts.delete_sleepers == ("s1", "s2")[: 2 - kept]


# -- the loop with sleepers --------------------------------------------------------------------
async def test_scale_down_sleeps_idle_replicas_keeps_replicas_and_scale_up_wakes_them() -> None:
    loop, world, demand, _, wall, state = make({"maxSleeping": 2})
    demand.waiting = 4  # one replica's worth
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (3, 1)
    assert world.sleeping() == ["llama-1", "llama-2"]
    assert world.replicas == 3 and world.writes == []  # the Deployment still counts them
    for name in ("llama-1", "llama-2"):
        pod = world.pods[name]
        assert pod.asleep and pod.cost == SLEEPER_COST
        assert pod.annotations[ASLEEP_SINCE_ANNOTATION] == f"{wall.t:.3f}"
        assert pod.labels[AWAKE_LABEL] == "false"  # a Service selecting awake=true drops it
    # labelled before the sleep call: out of the activator's endpoints first
    assert world.calls.index("mark llama-2") < world.calls.index("sleep llama-2")
    assert world.reasons() == ["ReplicasSlept"]
    assert (
        "put 2 replica(s) to sleep (llama-2, llama-1); 2 asleep (maxSleeping 2)"
        in (world.events[0][1])
    )

    [d] = await loop.tick()  # the sleepers are neither load nor awake replicas
    assert (d.current_replicas, d.desired_replicas) == (1, 1)
    assert d.numbers["sleepers.sleeping"] == 2 and d.numbers["sleepers.awake"] == 1

    demand.waiting = 16  # four replicas' worth: two wakes, one cold start
    world.calls.clear()
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (1, 4)
    assert sorted(c for c in world.calls if c.startswith("wake")) == [
        "wake llama-1",
        "wake llama-2",
    ]
    assert world.sleeping() == [] and world.writes == [4] and world.replicas == 4
    assert not any(p.asleep for p in world.pods.values())
    assert all(world.pods[n].labels[AWAKE_LABEL] == "true" for n in ("llama-1", "llama-2"))
    assert all(POD_DELETION_COST_ANNOTATION not in p.annotations for p in world.pods.values())
    assert world.reasons()[-1] == "ReplicasWoken"
    assert (
        "woke 2 sleeper(s) (llama-1, llama-2) instead of a cold start; cold-starting 1"
        in (world.events[-1][1])
    )
    st = state.status(REF)
    assert st is not None and st.applied_replicas == 4


async def test_the_sleep_call_waits_the_settle_time_after_the_labels_and_wake_sets_awake_last() -> (
    None
):
    """Routers drop a pod on its labels; the engine sleeps only ``settle_s`` later (what
    they sent before arrives and finishes), and awake=true comes after the wake call."""
    loop, world, demand, ctl, _, _ = make({"maxSleeping": 1}, replicas=2)
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(seconds)
        world.calls.append("settle")

    ctl.settle_s, ctl._pause = 1.5, pause
    demand.waiting = 4
    await loop.tick()
    assert pauses == [1.5]
    assert world.calls[-3:] == ["mark llama-1", "settle", "sleep llama-1"]
    demand.waiting = 8
    world.calls.clear()
    await loop.tick()
    assert world.calls == ["wake llama-1", "mark llama-1"]  # awake=true once it serves
    assert world.pods["llama-1"].labels == {AWAKE_LABEL: "true"}


async def test_past_the_budget_replicas_leave_with_the_lowest_deletion_cost() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 1}, replicas=4)
    demand.waiting = 4
    await loop.tick()
    assert world.sleeping() == ["llama-3"]
    assert world.writes == [2] and sorted(world.pods) == ["llama-0", "llama-3"]


async def test_a_sleeper_past_its_ttl_is_deleted_with_the_decision_unchanged() -> None:
    loop, world, demand, _, wall, _ = make({"maxSleeping": 2, "ttlSeconds": 600}, replicas=2)
    demand.waiting = 4
    await loop.tick()
    assert world.sleeping() == ["llama-1"] and world.replicas == 2
    wall.t += 599
    await loop.tick()
    assert world.replicas == 2
    wall.t += 1
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (1, 1)  # nothing to decide
    assert world.writes == [1] and sorted(world.pods) == ["llama-0"]
    assert world.reasons() == ["ReplicasSlept", "SleepersDeleted"]
    assert "past ttlSeconds 600, maxSleeping 2" in world.events[-1][1]


async def test_scale_to_zero_sleeps_the_last_replica_and_a_held_request_wakes_it() -> None:
    loop, world, demand, _, _, _ = make(
        {"maxSleeping": 1}, replicas=1, scaleToZero={"enabled": True, "idlePeriodSeconds": 0}
    )
    for _ in range(5):  # idle from the first tick on: to zero after the idle period
        [d] = await loop.tick()
        if world.sleeping():
            break
    assert world.sleeping() == ["llama-0"] and world.replicas == 1 and world.writes == []
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (0, 0)
    demand.waiting = 1
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (0, 1)
    assert world.sleeping() == [] and world.writes == []  # woken, no cold start


async def test_the_cache_lagging_our_marks_does_not_sleep_a_second_replica() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 2}, replicas=2)
    world.cache_lags = True
    demand.waiting = 4
    await loop.tick()
    [d] = await loop.tick()  # observe() still shows llama-1 awake: our mark overlays it
    assert world.sleeping() == ["llama-1"] and d.current_replicas == 1
    assert world.reasons() == ["ReplicasSlept"]


async def test_a_failed_sleep_on_an_awake_engine_keeps_it_serving_and_retries() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 1}, replicas=2)
    world.fail_sleep = {"llama-1"}
    demand.waiting = 4
    [d] = await loop.tick()
    assert world.sleeping() == [] and world.replicas == 2 and world.writes == []
    assert world.reasons() == ["SleepFailed"]
    assert world.events[0][2] is True and "HTTP 500" in world.events[0][1]
    [d] = await loop.tick()  # still two awake: the decision still asks for one; retried
    assert d.current_replicas == 2 and world.calls.count("sleep llama-1") == 2
    assert world.reasons() == ["SleepFailed"]  # one Warning per five minutes
    world.fail_sleep = set()
    await loop.tick()
    assert world.sleeping() == ["llama-1"]


async def test_a_failed_sleep_with_no_answer_is_held_as_a_sleeper_and_woken_later() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 1}, replicas=2)
    world.fail_sleep, world.answers_is_sleeping = {"llama-1"}, False
    demand.waiting = 4
    await loop.tick()
    assert world.sleeping() == ["llama-1"]  # kept off the endpoints: it may be asleep
    demand.waiting = 8
    await loop.tick()
    assert world.sleeping() == [] and world.calls[-2:] == ["wake llama-1", "mark llama-1"]


async def test_a_failed_wake_cold_starts_instead_and_gives_up_on_the_sleeper() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 1}, replicas=2)
    demand.waiting = 4
    await loop.tick()
    assert world.sleeping() == ["llama-1"]
    world.fail_wake = {"llama-1"}
    demand.waiting = 8
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (1, 2)
    assert world.writes == [3]  # capacity from a cold start, the sleeper kept
    assert world.sleeping() == ["llama-1"] and world.reasons()[-1] == "WakeFailed"
    assert "cold-starting as many instead" in world.events[-1][1]
    for _ in range(MAX_WAKE_FAILURES - 1):  # more demand, more failed wakes
        demand.waiting += 4
        await loop.tick()
    assert world.calls.count("wake llama-1") == MAX_WAKE_FAILURES
    assert world.sleeping() == ["llama-1"]  # not deleted while cold starts are written
    await loop.tick()  # given up, demand met: deleted (lowest cost)
    assert "llama-1" not in world.pods and world.sleeping() == []
    assert "SleepersDeleted" in world.reasons()


async def test_a_pod_whose_deletion_cost_was_not_set_is_not_counted_as_leaving() -> None:
    loop, world, demand, ctl, _, _ = make({"maxSleeping": 0}, replicas=2)
    marked: list[str] = []

    async def refuse(namespace: str, name: str, **kw: Any) -> None:
        marked.append(name)
        raise ActuationError(f"patch pod {namespace}/{name}: HTTP 403 Forbidden")

    ctl.io.mark = refuse  # type: ignore[method-assign]
    demand.waiting = 4
    await loop.tick()
    assert marked == ["llama-1"] and world.writes == [] and world.replicas == 2


async def test_turning_sleep_off_deletes_the_sleepers() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 1}, replicas=2)
    demand.waiting = 4
    await loop.tick()
    assert world.sleeping() == ["llama-1"]
    doc = {
        "minReplicaCount": 0,
        "maxReplicaCount": 8,
        "metrics": [{"signal": "waiting", "target": 4}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
    loop.set_targets([StoredTarget(TargetSpec(ref=REF, policy=validate_policy(doc)), "2")])
    await loop.tick()
    assert sorted(world.pods) == ["llama-0"] and world.writes == [1]
    assert world.pods["llama-0"].cost == 0  # the awake replica was never marked
    assert DELETE_COST < SLEEPER_COST < 0


async def test_a_conflict_re_decides_from_a_fresh_view() -> None:
    loop, world, demand, _, _, _ = make({"maxSleeping": 1}, replicas=1)
    demand.waiting = 12
    world.conflicts = 1
    await loop.tick()
    assert world.writes == [3] and world.replicas == 3


async def test_a_follower_neither_sleeps_nor_wakes() -> None:
    class NotLeader:
        is_leader = False

        def can_write(self, ref: TargetRef) -> bool:
            return False

    loop, world, demand, _, _, _ = make({"maxSleeping": 2})
    loop.leader = NotLeader()
    demand.waiting = 4
    [d] = await loop.tick()
    assert d.desired_replicas == 1 and world.calls == [] and world.sleeping() == []


async def test_status_and_metrics_show_awake_and_sleeping_counts() -> None:
    from prometheus_client import generate_latest

    from autoscaler.api.metrics import ControllerMetrics
    from autoscaler.target_status import status_body

    loop, world, demand, ctl, _, _ = make({"maxSleeping": 2})
    metrics = ControllerMetrics()
    loop.observer, ctl.observer = metrics, metrics
    demand.waiting = 4
    await loop.tick()
    [d] = await loop.tick()
    status = status_body(d, now_rfc3339="2026-01-01T00:00:00Z")
    assert (status["awakeReplicas"], status["sleepingReplicas"]) == (1, 2)
    text = generate_latest(metrics.registry).decode()
    assert 'llm_autoscaler_sleeping_replicas{name="llama",namespace="llm"} 2.0' in text
    assert 'llm_autoscaler_awake_replicas{name="llama",namespace="llm"} 1.0' in text
    assert (
        'llm_autoscaler_sleeper_actions_total{action="slept",name="llama",namespace="llm"} 2.0'
        in text
    )
    plain = Decision(0.0, 1, 1, d.reason, "", False)  # a target without sleepers: no fields
    assert "sleepingReplicas" not in status_body(plain, now_rfc3339="2026-01-01T00:00:00Z")


async def test_sleepers_are_kept_while_a_burst_is_expected_and_released_when_none_is() -> None:
    """Three quiet periods of 100 s, each ended by a scale-up: 50 s into the fourth, a
    burst is expected within the TTL (kept); at 150 s no past period lasted that long, so
    no burst is expected within it: the sleeper is deleted at once, not at the 600 s TTL."""
    loop, world, demand, _, wall, _ = make({"maxSleeping": 2, "ttlSeconds": 600}, replicas=2)
    demand.waiting = 4
    await loop.tick()  # one replica's worth: llama-1 sleeps, a quiet period starts
    for _ in range(3):
        wall.t += 100
        demand.waiting = 8
        await loop.tick()  # the burst: woken, the quiet period ends after 100 s
        assert world.sleeping() == []
        demand.waiting = 4
        await loop.tick()
        assert world.sleeping() == ["llama-1"]
    wall.t += 50
    [d] = await loop.tick()
    assert d.numbers["sleepers.outlook"] == 1.0  # burst-expected
    assert (d.numbers["sleepers.outlook.comparable"], d.numbers["sleepers.outlook.gaps"]) == (3, 3)
    assert world.replicas == 2 and "SleepersReleased" not in world.reasons()
    reason, message, _ = world.events[-1]
    assert reason == "SleepersKept" and message.startswith(
        "keeping sleepers after 50 s quiet: next burst expected within ttlSeconds 600"
    )
    wall.t += 10
    await loop.tick()
    assert world.reasons().count("SleepersKept") == 1  # once per quiet period
    wall.t -= 10
    (keep,) = [c for c in status_conditions(d, None) if c.type == "SleeperOutlook"]
    assert (keep.status, keep.reason) == ("True", "BurstExpected")
    assert "3 of 3 past quiet periods longer than 50 s" in keep.message

    wall.t += 100
    [d] = await loop.tick()
    assert d.numbers["sleepers.outlook"] == 0.0  # no-burst-expected
    assert world.sleeping() == [] and sorted(world.pods) == ["llama-0"] and world.writes == [1]
    reason, message, warning = world.events[-1]
    assert reason == "SleepersReleased" and not warning
    assert message.startswith("deleting 1 sleeper(s) (llama-1) after 150 s quiet: no burst ")
    assert "within ttlSeconds 600: 0 of 0 past quiet periods longer than 150 s" in message
    (release,) = [c for c in status_conditions(d, None) if c.type == "SleeperOutlook"]
    assert (release.status, release.reason) == ("False", "NoBurstExpected")


async def test_without_history_the_outlook_keeps_sleepers_up_to_the_ttl() -> None:
    loop, world, demand, _, wall, _ = make({"maxSleeping": 1, "ttlSeconds": 600}, replicas=2)
    demand.waiting = 4
    await loop.tick()
    wall.t += 300
    [d] = await loop.tick()
    assert d.numbers["sleepers.outlook"] == -1.0 and world.sleeping() == ["llama-1"]
    (c,) = [c for c in status_conditions(d, None) if c.type == "SleeperOutlook"]
    assert (c.status, c.reason) == ("True", "NoForecast")
    wall.t += 300
    await loop.tick()
    assert world.reasons()[-1] == "SleepersDeleted"  # the TTL, as without the outlook
