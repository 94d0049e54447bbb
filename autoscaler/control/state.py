"""What the control loop publishes and the servers read: per target, the latest decision,
a bounded decision history (newest first), recent observations, and activation changes.

Readers (REST API, KEDA gRPC, dashboard) never call into the loop: they read this.
`wait_for_change` lets the KEDA ``StreamIsActive`` push a change within one tick.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from autoscaler.control.clock import Clock
from autoscaler.control.history import DecisionHistory, ObservationRing
from autoscaler.domain import Decision, Observation, TargetRef
from autoscaler.target import TargetSpec
from autoscaler.target_status import VariantStatus

HISTORY_LEN = 500
OBSERVATIONS_LEN = 600
# /healthz answers 503 once the last completed tick (or the loop's start, before the first
# tick) is older than this many tick intervals: the loop is stuck or dead.
HEALTHZ_STALE_TICKS = 30


@dataclass
class TargetStatus:
    spec: TargetSpec
    version: str = ""
    last_decision: Decision | None = None
    # Compact (see `control.history`): 4-8 bytes per observed number, planner numbers only
    # on the newest decision and on change points.
    history: DecisionHistory = field(default_factory=lambda: DecisionHistory(HISTORY_LEN))
    observations: ObservationRing = field(default_factory=lambda: ObservationRing(OBSERVATIONS_LEN))
    applied_replicas: int | None = None
    warm_pool_replicas: int | None = None
    condition: str | None = None  # e.g. "OwnedByHPA: ..." when we refuse to act
    # a target with variants: per variant, observed counts and the split's (REST, status)
    variants: tuple[VariantStatus, ...] = ()
    # variants with roles: why a role held, could not grow or was raised (REST, status)
    role_notes: tuple[str, ...] = ()

    @property
    def active(self) -> bool:
        return self.last_decision is not None and self.last_decision.active

    def recent_decisions(self, limit: int = 50) -> list[Decision]:
        """Newest first."""
        return list(self.history)[-limit:][::-1]


@dataclass
class LoopHealth:
    """What /healthz and /readyz judge the control loop by (written by the loop only)."""

    clock: Clock | None = None  # the loop's clock; None while no loop runs (nothing to judge)
    tick_interval_s: float = 1.0
    started_t: float | None = None
    last_tick_t: float | None = None
    error: str | None = None  # the last unexpected loop error, until a tick completes again
    restarts: int = 0
    reconcile_errors: int = 0

    def stale(self) -> str | None:
        """Why the loop counts as dead (no tick for HEALTHZ_STALE_TICKS), else None."""
        if self.clock is None or self.started_t is None:
            return None
        since = self.last_tick_t if self.last_tick_t is not None else self.started_t
        age_s = self.clock.now() - since
        limit_s = HEALTHZ_STALE_TICKS * self.tick_interval_s
        if age_s <= limit_s:
            return None
        what = "last completed tick" if self.last_tick_t is not None else "loop start, no tick"
        return f"{what} {age_s:.1f}s ago (limit {limit_s:g}s = {HEALTHZ_STALE_TICKS} ticks)"


class ControllerState:
    """Shared, single-event-loop state. Mutated only by the control loop."""

    def __init__(self) -> None:
        self.targets: dict[TargetRef, TargetStatus] = {}
        self.is_leader: bool = False
        # Leadership (shard Leases; one shard = the leader Lease): shards, held, writable,
        # members, blocked, as /readyz shows them; None without leader election.
        self.leadership: dict[str, object] | None = None
        self.ready: bool = False
        self.ticks: int = 0
        self.loop = LoopHealth()
        # A fresh Event per publish: waiters hold the current one, publish sets it and
        # swaps in a new one. (asyncio.Condition.wait under wait_for can raise "Lock is
        # not acquired" when cancelled on Python 3.11; Event.wait cancels cleanly.)
        self._changed = asyncio.Event()

    def status(self, ref: TargetRef) -> TargetStatus | None:
        return self.targets.get(ref)

    async def publish(self, ref: TargetRef, obs: Observation, decision: Decision) -> None:
        st = self.targets.get(ref)
        if st is None:
            return
        st.observations.append(obs)
        st.history.append(decision)
        st.last_decision = decision
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def wait_for_change(self, timeout_s: float | None = None) -> bool:
        """Wait until the next publish; False on timeout."""
        changed = self._changed
        try:
            await asyncio.wait_for(changed.wait(), timeout_s)
        except TimeoutError:
            return False
        return True
