"""A target with variants in the control loop over in-memory ports and a fake clock: one
decision split over the Deployments, writes only for the variants that move, a conflict
re-read, re-decided and re-split, followers never writing."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView, VariantView
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, TargetRef
from autoscaler.errors import ConflictError
from autoscaler.policy.schema import validate_policy
from autoscaler.policy.variants import VariantChange
from autoscaler.store.base import StoredTarget
from autoscaler.target import ScaleTargetRef, TargetSpec, VariantSpec
from autoscaler.target_status import VariantStatus
from tests.control.test_loop import FakeSignals, NotLeader

REF = TargetRef("llm", "llama")
H100 = VariantSpec("h100", ScaleTargetRef(name="llama-h100"), 4.0, min_replicas=1)
MIG = VariantSpec("mig", ScaleTargetRef(name="llama-mig"), 1.33, max_replicas=3)


@dataclass
class VariantCluster:
    """Two Deployments (by name: replicas, resourceVersion) and MIG slices left."""

    replicas: dict[str, int] = field(default_factory=lambda: {"llama-h100": 1, "llama-mig": 0})
    versions: dict[str, int] = field(default_factory=lambda: {"llama-h100": 1, "llama-mig": 1})
    mig_slots: int = 3
    conflict_once_on: str | None = None
    external_on_conflict: dict[str, int] = field(default_factory=dict)
    writes: list[tuple[str, int]] = field(default_factory=list)
    variant_records: list[tuple[tuple[VariantStatus, ...], tuple[VariantChange, ...]]] = field(
        default_factory=list
    )
    applied: list[bool] = field(default_factory=list)

    async def observe(self, spec: TargetSpec) -> TargetView:
        h, m = self.replicas["llama-h100"], self.replicas["llama-mig"]
        return TargetView(
            spec_replicas=h + m,
            ready_replicas=h + m,
            variants=(
                VariantView("h100", h, h, resource_version=str(self.versions["llama-h100"])),
                VariantView(
                    "mig",
                    m,
                    m,
                    free_slots=max(0, self.mig_slots - m),
                    resource_version=str(self.versions["llama-mig"]),
                ),
            ),
        )

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        name = spec.scale_target_ref.name
        if self.conflict_once_on == name:
            self.conflict_once_on = None
            for dep, n in self.external_on_conflict.items():
                self.replicas[dep] = n
                self.versions[dep] += 1
            raise ConflictError("the object has been modified")
        if resource_version != str(self.versions[name]):
            raise ConflictError("stale resourceVersion")
        self.writes.append((name, replicas))
        self.replicas[name] = replicas
        self.versions[name] += 1

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        return None

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        self.applied.append(applied)

    async def record_variants(
        self,
        spec: TargetSpec,
        rows: tuple[VariantStatus, ...],
        applied: tuple[VariantChange, ...],
        total: tuple[int, int],
    ) -> None:
        self.variant_records.append((rows, applied))


def make(
    **kw: Any,
) -> tuple[ControlLoop, VariantCluster, FakeSignals, ControllerState, FakeClock]:
    policy = validate_policy(
        {"maxReplicaCount": 6, "metrics": [{"signal": "waiting", "target": 4}]}
    )
    spec = TargetSpec(
        ref=REF,
        policy=policy,
        scale_target_ref=ScaleTargetRef(name="llama-h100"),
        variants=(H100, MIG),
    )
    state, cluster, signals, clock = ControllerState(), VariantCluster(), FakeSignals(), FakeClock()
    loop = ControlLoop(state, cluster, signals, clock=clock, **kw)
    loop.set_targets([StoredTarget(spec, "1")])
    return loop, cluster, signals, state, clock


async def test_one_decision_is_split_cheapest_first_and_only_moving_variants_are_written() -> None:
    loop, cluster, signals, state, clock = make()
    signals.values = {"waiting": 20}  # 20 / 4: the model needs 5 replicas
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (1, 5)
    # three slices (all there are), then one more H100
    assert cluster.writes == [("llama-h100", 2), ("llama-mig", 3)]
    rows, applied = cluster.variant_records[-1]
    assert {r.name: r.desired_replicas for r in rows} == {"h100": 2, "mig": 3}
    assert [(c.name, c.to_replicas) for c in applied] == [("h100", 2), ("mig", 3)]
    assert cluster.applied == [False]  # the Events are per variant, not for the total
    st = state.status(REF)
    assert st is not None and [v.name for v in st.variants] == ["h100", "mig"]
    # steady: the same split, nothing written, nothing recorded as applied
    await clock.advance(1.0)
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (5, 5)
    assert cluster.writes == [("llama-h100", 2), ("llama-mig", 3)]
    assert cluster.variant_records[-1][1] == ()


async def test_a_conflict_is_re_read_re_decided_and_re_split() -> None:
    loop, cluster, signals, _, _ = make()
    signals.values = {"waiting": 12}  # 3 replicas
    # while we write the H100 variant, someone sets the MIG Deployment to 2
    cluster.conflict_once_on = "llama-mig"
    cluster.external_on_conflict = {"llama-mig": 2}
    [d] = await loop.tick()
    assert d.desired_replicas == 3
    # first split (from h100=1, mig=0): mig 0 -> 2, refused; the re-read shows mig=2 and
    # h100=1: the total is already 3, nothing more to write
    assert cluster.writes == []
    assert cluster.replicas == {"llama-h100": 1, "llama-mig": 2}


async def test_a_follower_splits_but_never_writes() -> None:
    loop, cluster, signals, state, _ = make(leader=NotLeader())
    signals.values = {"waiting": 20}
    await loop.tick()
    assert cluster.writes == [] and cluster.variant_records == []
    st = state.status(REF)
    assert st is not None
    assert {v.name: v.desired_replicas for v in st.variants} == {"h100": 2, "mig": 3}


async def test_a_cluster_port_that_does_not_observe_variants_fails_the_target_clearly() -> None:
    loop, cluster, signals, state, _ = make()

    async def plain(spec: TargetSpec) -> TargetView:
        return TargetView(1, 1)

    cluster.observe = plain  # type: ignore[method-assign]
    signals.values = {"waiting": 20}
    assert await loop.tick() == []
    st = state.status(REF)
    assert st is not None and st.condition is not None
    assert "variants ['h100', 'mig'] not observed" in st.condition
    assert cluster.writes == []


# ------------------------------------------------ capacity and length (issue 37)

# an H100 serves three reference replicas' worth (capacity 3) at 4/hour, 1.33 per unit; a
# MIG slice one at 1.33/hour: the same per unit, so the slices' lower price per replica
# decides ties (`cost_per_capacity`, then per replica)
H100_X3 = VariantSpec(
    "h100", ScaleTargetRef(name="llama-h100"), 4.0, capacity_per_replica=3.0, min_replicas=1
)
MIG_8K = VariantSpec(
    "mig",
    ScaleTargetRef(name="llama-mig"),
    1.33,
    capacity_per_replica=1.0,
    max_replicas=3,
    max_model_len=8192,
)


@dataclass
class LengthSignals(FakeSignals):
    """`FakeSignals` with the pods' prompt-length histogram over the window."""

    length_buckets: dict[float, float] = field(default_factory=dict)

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        reading = await super().read(spec, view, now)
        return replace(reading, length_buckets=dict(self.length_buckets))


def make_capacity(
    signals: LengthSignals,
) -> tuple[ControlLoop, VariantCluster, ControllerState, FakeClock]:
    policy = validate_policy(
        {"maxReplicaCount": 20, "metrics": [{"signal": "waiting", "target": 4}]}
    )
    spec = TargetSpec(
        ref=REF,
        policy=policy,
        scale_target_ref=ScaleTargetRef(name="llama-h100"),
        variants=(H100_X3, MIG_8K),
    )
    state, cluster, clock = ControllerState(), VariantCluster(), FakeClock()
    loop = ControlLoop(state, cluster, signals, clock=clock)
    loop.set_targets([StoredTarget(spec, "1")])
    return loop, cluster, state, clock


async def test_the_decision_counts_capacity_and_one_h100_replaces_three_slices() -> None:
    signals = LengthSignals(length_buckets={1024.0: 10.0, math.inf: 10.0})  # all short
    loop, cluster, state, clock = make_capacity(signals)
    signals.values = {"waiting": 24}  # 24 / 4: six reference replicas
    [d] = await loop.tick()
    # the one H100 running counts as three; the other three units are the slices
    assert (d.current_replicas, d.desired_replicas) == (3, 6)
    assert cluster.writes == [("llama-mig", 3)]
    assert d.numbers["variants.demand_capacity"] == 6.0
    rows = {r.name: r for r in cluster.variant_records[-1][0]}
    assert rows["h100"].capacity_per_replica == 3.0 and rows["mig"].max_model_len == 8192
    # steady: six units running, nothing written
    await clock.advance(1.0)
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (6, 6)
    assert cluster.writes == [("llama-mig", 3)]
    # three more units with the slices at their max: one H100, not three
    signals.values = {"waiting": 36}
    await clock.advance(60.0)  # past the scale-up rate limit (in reference replicas too)
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (6, 9)
    assert cluster.writes == [("llama-mig", 3), ("llama-h100", 2)]


async def test_long_prompts_grow_the_h100_not_the_slices_and_the_event_says_why() -> None:
    # every prompt in the window is 8193..16384 tokens: over the slices' maxModelLen
    signals = LengthSignals(length_buckets={8192.0: 0.0, 16384.0: 12.0, math.inf: 12.0})
    loop, cluster, state, _ = make_capacity(signals)
    signals.values = {"waiting": 24}
    [d] = await loop.tick()
    assert d.desired_replicas == 6
    assert cluster.writes == [("llama-h100", 2)]  # 6 units: two H100s, no slice
    rows, applied = cluster.variant_records[-1]
    (change,) = applied
    assert change.message.startswith("requests over 8192 tokens: only h100 serves them")
    assert {r.name: r.too_long_share for r in rows} == {"h100": None, "mig": 1.0}
    assert rows[1].to_dict()["tooLongShare"] == 1.0
    assert d.numbers["variants.lengths_known"] == 1.0


async def test_without_a_length_histogram_all_demand_is_servable_and_that_is_said() -> None:
    signals = LengthSignals()  # no prompt-length histogram read: unknown, not "short"
    loop, cluster, state, _ = make_capacity(signals)
    signals.values = {"waiting": 24}
    [d] = await loop.tick()
    assert cluster.writes == [("llama-mig", 3)]
    assert d.numbers["variants.lengths_known"] == 0.0


async def test_a_decision_that_holds_a_fractional_capacity_grows_nothing() -> None:
    # one H100 of capacity 2.5 is counted as 3 reference replicas (rounded up); a decision
    # that holds at 3 must not grow a slice for the rounding's half unit
    signals = LengthSignals(length_buckets={1024.0: 10.0, math.inf: 10.0})
    loop, cluster, state, clock = make_capacity(signals)
    spec = next(iter(state.targets.values())).spec
    h100 = replace(H100_X3, capacity_per_replica=2.5)
    loop.set_targets([StoredTarget(replace(spec, variants=(h100, MIG_8K)), "2")])
    signals.values = {"waiting": 12}  # 12 / 4: three reference replicas
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (3, 3)
    assert cluster.writes == []
    assert d.numbers["variants.demand_capacity"] == 2.5
    signals.values = {"waiting": 16}  # one more reference replica: one slice
    await clock.advance(60.0)
    [d] = await loop.tick()
    assert (d.current_replicas, d.desired_replicas) == (3, 4)
    assert cluster.writes == [("llama-mig", 1)]
