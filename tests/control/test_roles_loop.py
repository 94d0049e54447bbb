"""Prefill/decode roles in the control loop over in-memory ports and a fake clock: each
role read from its own pods, a missing signal holding that role only (never zero, said
in the status and an Event), HPA rate limits per role with per-role state, writes only
on change, followers never writing."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView, VariantView
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.errors import ConflictError
from autoscaler.metrics.source import PodEndpoint
from autoscaler.policy.schema import validate_policy
from autoscaler.policy.variants import VariantChange
from autoscaler.store.base import StoredTarget
from autoscaler.target import RolesSpec, ScaleTargetRef, TargetSpec, VariantSpec
from autoscaler.target_status import VariantStatus
from tests.control.test_loop import NotLeader

REF = TargetRef("llm", "llama")
PREFILL = VariantSpec("prefill", ScaleTargetRef(name="llama-prefill"), 4.0, role="prefill")
DECODE = VariantSpec("decode", ScaleTargetRef(name="llama-decode"), 4.0, role="decode")


@dataclass
class RoleCluster:
    """Two Deployments (by name: replicas) whose pods are named after them."""

    replicas: dict[str, int] = field(
        default_factory=lambda: {"llama-prefill": 2, "llama-decode": 2}
    )
    writes: list[tuple[str, int]] = field(default_factory=list)
    variant_records: list[tuple[tuple[VariantStatus, ...], tuple[VariantChange, ...]]] = field(
        default_factory=list
    )
    notes: list[tuple[str, ...]] = field(default_factory=list)
    conflict_once_on: str | None = None

    async def observe(self, spec: TargetSpec) -> TargetView:
        views = []
        for name, dep in (("prefill", "llama-prefill"), ("decode", "llama-decode")):
            n = self.replicas[dep]
            pods = tuple(PodEndpoint(f"{dep}-{i}", f"http://{dep}-{i}/metrics") for i in range(n))
            views.append(VariantView(name, n, n, pods=pods))
        total = sum(self.replicas.values())
        return TargetView(spec_replicas=total, ready_replicas=total, variants=tuple(views))

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        if self.conflict_once_on == spec.scale_target_ref.name:
            self.conflict_once_on = None
            raise ConflictError("the object has been modified")
        self.writes.append((spec.scale_target_ref.name, replicas))
        self.replicas[spec.scale_target_ref.name] = replicas

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        return None

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        return None

    async def record_variants(
        self,
        spec: TargetSpec,
        rows: tuple[VariantStatus, ...],
        applied: tuple[VariantChange, ...],
        total: tuple[int, int],
    ) -> None:
        self.variant_records.append((rows, applied))

    async def record_roles(self, spec: TargetSpec, notes: Sequence[str]) -> None:
        self.notes.append(tuple(notes))


@dataclass
class RoleSignals:
    """Per role (the pods' name says it): the signals their pods report; None: unread."""

    prefill: Mapping[str, float] | None = None
    decode: Mapping[str, float] | None = None
    keys: list[str] = field(default_factory=list)

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        self.keys.append(str(spec.ref))
        names = {p.name.rsplit("-", 1)[0] for p in view.pods}
        assert len(names) == 1, names  # one role's pods only
        values = self.prefill if names == {"llama-prefill"} else self.decode
        if values is None:
            return SignalReading(signals={}, pods_read=0, errors=("connection refused",))
        return SignalReading(signals=dict(values), pods_read=len(view.pods))


def make(
    behavior: dict[str, Any] | None = None, **kw: Any
) -> tuple[ControlLoop, RoleCluster, RoleSignals, ControllerState, FakeClock]:
    one_per_minute = {
        "stabilizationWindowSeconds": 0,
        "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
    }
    policy = validate_policy(
        {
            "maxReplicaCount": 6,
            "metrics": [{"signal": "waiting", "target": 4}],
            "behavior": behavior or {"scaleUp": one_per_minute, "scaleDown": one_per_minute},
        }
    )
    spec = TargetSpec(
        ref=REF,
        policy=policy,
        scale_target_ref=ScaleTargetRef(name="llama-prefill"),
        variants=(PREFILL, DECODE),
        roles=RolesSpec(prompt_tokens_per_s_per_prefill=1000.0, running_per_decode=10.0),
    )
    state, cluster, signals, clock = ControllerState(), RoleCluster(), RoleSignals(), FakeClock()
    loop = ControlLoop(state, cluster, signals, clock=clock, **kw)
    loop.set_targets([StoredTarget(spec, "1")])
    return loop, cluster, signals, state, clock


async def test_each_role_is_read_from_its_own_pods_under_its_own_key() -> None:
    loop, cluster, signals, state, _ = make()
    signals.prefill = {"prompt_tokens_per_s": 2000.0, "waiting": 0.0}
    signals.decode = {"running": 20.0, "kv_cache_usage": 0.3}
    [d] = await loop.tick()
    assert signals.keys == ["llm/llama//prefill", "llm/llama//decode"]
    assert (d.current_replicas, d.desired_replicas, d.reason) == (4, 4, Reason.STEADY)
    assert d.numbers["roles.prefill.prompt_tokens_per_s"] == 2000.0
    assert d.numbers["roles.decode.running"] == 20.0
    assert cluster.writes == []  # both at what they need: nothing written
    st = state.status(REF)
    assert st is not None
    assert [(v.name, v.role, v.desired_replicas) for v in st.variants] == [
        ("prefill", "prefill", 2),
        ("decode", "decode", 2),
    ]


async def test_rate_limits_apply_per_role_with_per_role_state() -> None:
    # one pod per minute each way: with one shared history, one role's move would use up
    # the other's period; per role, both move in the same tick
    loop, cluster, signals, _, clock = make()
    signals.prefill = {"prompt_tokens_per_s": 5000.0}  # wants 5 prefill
    signals.decode = {"running": 0.0}  # wants 1 decode
    [d] = await loop.tick()
    assert cluster.writes == [("llama-prefill", 3), ("llama-decode", 1)]
    assert (d.current_replicas, d.desired_replicas) == (4, 4)
    await clock.advance(10.0)
    [d] = await loop.tick()  # inside both periods: neither moves, each rate-limited
    assert cluster.writes == [("llama-prefill", 3), ("llama-decode", 1)]
    assert d.reason == Reason.RATE_LIMITED and "prefill: rate-limited" in d.message
    await clock.advance(60.0)
    await loop.tick()
    assert cluster.writes[-1] == ("llama-prefill", 4)
    rows, applied = cluster.variant_records[-1]
    assert [(c.name, c.to_replicas) for c in applied] == [("prefill", 4)]
    assert "role prefill 3 -> 4: prompt tokens 5000/s at 1000/s per replica" in applied[0].message


async def test_a_missing_signal_holds_that_role_only_and_says_so() -> None:
    loop, cluster, signals, state, clock = make()
    signals.prefill = None  # the prefill pods cannot be read
    signals.decode = {"running": 0.0}
    [d] = await loop.tick()
    assert cluster.writes == [("llama-decode", 1)]  # decode still scales down
    assert cluster.replicas["llama-prefill"] == 2  # held, never read as zero
    assert "prefill: prompt-token rate missing, holding" in cluster.notes[-1]
    st = state.status(REF)
    assert st is not None and "prefill: prompt-token rate missing, holding" in st.role_notes
    # both missing: both hold, the decision says why
    signals.decode = None
    await clock.advance(61.0)
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (3, 3)
    assert d.reason == Reason.HOLD_MISSING_DATA
    assert cluster.writes == [("llama-decode", 1)]


async def test_a_conflict_leaves_the_rest_to_the_next_tick_which_writes_it() -> None:
    loop, cluster, signals, _, clock = make()
    signals.prefill = {"prompt_tokens_per_s": 5000.0}
    signals.decode = {"running": 0.0}
    cluster.conflict_once_on = "llama-prefill"
    await loop.tick()
    assert cluster.writes == []  # prefill refused: decode waits too (one re-read)
    assert cluster.variant_records[-1][1] == ()
    await clock.advance(1.0)
    await loop.tick()
    # the refused write was never observed: prefill's period is still free
    assert cluster.writes == [("llama-prefill", 3), ("llama-decode", 1)]


async def test_a_follower_decides_per_role_and_writes_nothing() -> None:
    loop, cluster, signals, state, _ = make(leader=NotLeader())
    signals.prefill = {"prompt_tokens_per_s": 5000.0}
    signals.decode = {"running": 0.0}
    [d] = await loop.tick()
    assert d.numbers["roles.prefill.desired"] == 3.0
    assert cluster.writes == [] and cluster.variant_records == [] and cluster.notes == []


async def test_role_notes_are_events_when_new_and_the_roles_condition_of_the_status() -> None:

    from autoscaler.control.adapters import KubeCluster
    from tests.control.test_blind_status import Recorder, Status, _decision

    rec, status = Recorder(), Status()
    cluster = KubeCluster(None, cache=object(), scale=object(), recorder=rec, status=status,  # type: ignore[arg-type]
                          clock=FakeClock())  # fmt: skip
    _, _, _, loop_state, _ = make()
    spec = loop_state.targets[REF].spec
    held = "prefill: prompt-token rate missing, holding"
    blocked = "decode: 1 pod(s) Pending, not growing"
    await cluster.record_roles(spec, (held,))
    await cluster.record(spec, _decision(), applied=False)
    await cluster.record_roles(spec, (held, blocked))  # only the new note is an Event
    await cluster.record_roles(spec, (held, blocked))  # steady: nothing again
    assert rec.events == [("RoleHeld", held, True), ("RoleGrowthBlocked", blocked, True)]
    roles = {c.type: c for c in status.writes[-1]}["Roles"]
    assert (roles.status, roles.reason, roles.message) == ("False", "RoleHeld", held)
    # the notes are part of what a status write is keyed on: a change is written at once
    await cluster.record_roles(spec, ("prefill: raised to 2 by the ratio band",))
    await cluster.record(spec, _decision(), applied=False)
    roles = {c.type: c for c in status.writes[-1]}["Roles"]
    assert (roles.status, roles.reason) == ("True", "RolesDeciding")
    assert rec.events[-1] == ("RoleRaised", "prefill: raised to 2 by the ratio band", False)
