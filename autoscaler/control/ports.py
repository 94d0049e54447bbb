"""What the control loop needs from the outside world, as small protocols.

Adapters implement them over Kubernetes (`autoscaler.control.adapters`), over the local
demo cluster, or over in-memory fakes in tests. The loop never imports kube or HTTP code.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from autoscaler.domain import Decision, Forecast, TargetRef
from autoscaler.metrics.source import PodEndpoint  # a ready pod and its metrics URL
from autoscaler.target import TargetSpec


@dataclass(frozen=True, slots=True)
class Replica:
    """One pod of the target as the sleeper controller needs it (not terminating)."""

    name: str
    ready: bool
    sleeping: bool  # labelled a sleeper: counted by the workload, serving nothing
    engine_url: str | None = None  # http://<podIP>:<port>: POST /sleep, /wake_up there
    asleep_since_s: float | None = None  # unix seconds (the TTL's start)
    metrics_url: str | None = None


@dataclass(frozen=True, slots=True)
class VariantView:
    """One variant's Deployment (a target with ``variants``) as the cluster reports it.
    ``unschedulable``: pods the scheduler cannot place (PodScheduled=False, Unschedulable);
    ``free_slots``: more pods the capacity book can place for its GPU resource (None: not
    limited, no GPU requested or capacity not enforced)."""

    name: str
    spec_replicas: int
    ready_replicas: int
    pending_replicas: int = 0  # created, not Ready yet (starting or waiting for a node)
    unschedulable_replicas: int = 0
    free_slots: int | None = None
    resource_version: str = ""
    pods: tuple[PodEndpoint, ...] = ()  # its ready pods (per-role signals read these)


@dataclass(frozen=True, slots=True)
class TargetView:
    """The scale target as the cluster reports it right now."""

    spec_replicas: int
    ready_replicas: int
    resource_version: str = ""
    pending_replicas: int = 0
    pods: tuple[PodEndpoint, ...] = ()
    capacity_max_replicas: int | None = None
    cold_start_samples_s: tuple[float, ...] = ()  # the newest samples
    cold_start_total: int = 0  # samples ever taken (0: unknown, use the tuple's length)
    owner_conflict: str | None = None  # set when an HPA/ScaledObject owns the target
    # Sleepers (control/sleepers.py): counted in spec_replicas, left out of ready_replicas
    # and pods (they serve nothing). ``replicas``: every pod, only while sleepers matter.
    sleeping_replicas: int = 0
    replicas: tuple[Replica, ...] = ()
    # A target with variants: the fields above are the sums over its variants (the model's
    # pods, one decision; spec/pending replicas without the unschedulable pods, which are
    # neither serving nor starting), these the per-variant parts the split works from.
    variants: tuple[VariantView, ...] = ()
    unschedulable_replicas: int = 0  # see VariantView
    free_slots: int | None = None  # see VariantView

    @property
    def awake_replicas(self) -> int:
        """The workload's replicas that are not asleep: what the policy core scales."""
        return max(0, self.spec_replicas - self.sleeping_replicas)


@dataclass(frozen=True, slots=True)
class SignalReading:
    signals: Mapping[str, float] = field(default_factory=dict)
    pods_read: int | None = None
    errors: tuple[str, ...] = ()
    rejected: Mapping[str, int] = field(default_factory=dict)  # out-of-range pods by reason
    held: int = 0  # requests held at the activators (control/held.py)
    in_flight: int = 0  # requests the activators have forwarded and not finished
    # prompt-length histogram (upper bound in tokens -> cumulative requests over the
    # window); empty: not read. A target with variants steers long requests by it.
    length_buckets: Mapping[float, float] = field(default_factory=dict)


class ClusterPort(Protocol):
    async def observe(self, spec: TargetSpec) -> TargetView: ...

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        """Write replicas; raise `ConflictError` when the object changed since read."""
        ...

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None: ...

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        """Events / status for a decision (best effort)."""
        ...


@dataclass(frozen=True, slots=True)
class SleepOutcome:
    """What the sleeper controller did for one decision: the workload replicas to write
    (sleepers included), and whether anything was acted on (a call or a write)."""

    replicas: int
    acted: bool = False
    sleeping: int = 0  # sleepers after this step


class SleeperPort(Protocol):
    """Sleepers (vLLM sleep mode) for targets with ``policy.sleep``: `control.sleepers`."""

    def wants(self, spec: TargetSpec, view: TargetView) -> bool:
        """This target's replica count goes through `reconcile` (sleep set, or sleepers
        left from before it was unset)."""
        ...

    def adjust(self, spec: TargetSpec, view: TargetView) -> TargetView:
        """The view with this controller's own recent sleep/wake marks the cache has not
        shown yet."""
        ...

    async def reconcile(self, spec: TargetSpec, view: TargetView, desired: int) -> SleepOutcome:
        """Move the awake replicas toward ``desired``: wake or sleep pods, delete expired
        sleepers; return the workload replicas to write."""
        ...

    def numbers(self, ref: TargetRef) -> Mapping[str, float]:
        """Numbers for the decision (``sleepers.outlook.*``: keep or release, and why)."""
        ...


class SignalPort(Protocol):
    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading: ...


class PlannerPort(Protocol):
    """Per-target forecaster: fed every tick, asked for demand at now + horizon."""

    def update(self, t: float, signals: Mapping[str, float], view: TargetView) -> None: ...

    def forecast(self, t: float) -> Forecast | None: ...

    def warm_pool_size(self, t: float, replicas_now: int) -> int: ...

    def numbers(self) -> Mapping[str, float]:
        """Every number behind the last forecast (merged into the decision's numbers)."""
        ...


class LeaderPort(Protocol):
    @property
    def is_leader(self) -> bool: ...

    def can_write(self, ref: TargetRef) -> bool:
        """This instance may write for ``ref`` now (scale, warm pool, status, Events): the
        leader Lease, or with sharding the Lease of the target's shard."""
        ...


class DecisionObserver(Protocol):
    def observe_decision(self, ref: TargetRef, decision: Decision) -> None: ...

    def observe_tick(self, duration_s: float) -> None: ...

    def observe_decision_lag(self, lag_s: float) -> None:
        """From when a target was due to its decision (seconds, >= 0)."""
        ...

    def observe_scrape_error(self, ref: TargetRef) -> None: ...

    def observe_rejected(self, ref: TargetRef, reason: str, count: int) -> None:
        """Pods (or answers) whose values were out of range, by closed-set reason."""
        ...

    def observe_reconcile_error(self, ref: TargetRef) -> None: ...

    def observe_scale_failure(self, ref: TargetRef, reason: str) -> None:
        """A scale write that applied nothing: reason ``error`` or ``conflict``."""
        ...

    def observe_loop_restart(self) -> None: ...


class AlwaysLeader:
    """Single-instance mode (local demo, leader election disabled)."""

    @property
    def is_leader(self) -> bool:
        return True

    def can_write(self, ref: TargetRef) -> bool:
        return True
