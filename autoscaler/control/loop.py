"""The control loop: one reconcile per target per tick, all targets concurrently.

Phases (``tick_phases`` P > 1): the loop ticks every ``tick_interval_s / P`` and each
target is due on its own phase of that grid (a stable hash of its name), so a fleet's
reads, scrapes and decisions are spread over the interval instead of arriving in one
burst each tick: a target's decision lag (due -> decided) is one P-th of the burst's
work, and every target still decides once per polling interval. P = 1 is the classic
tick: every due target at once.

Stragglers (``straggler_wait_s`` set, as `llm-autoscaler run` sets it to one tick step):
after that long a tick stops waiting for its last few targets (at most `STRAGGLER_SHARE`
of them, or `MIN_STRAGGLERS`); such a target (a pod that hangs after its headers or
trickles its body, until the scrape deadline) finishes on its own, is not started again
while it runs, and delays no other target's decision. More of them is an overloaded
process: the tick waits for all (back-pressure). None (the default, and every test and
simulator loop) always waits for all of them.

A tick: observe the target (replicas, ready pods, capacity) -> read signals (missing,
never zero, when a source fails) -> update the forecast -> `decide` (pure) -> actuate
(leader only, direct mode only, re-deciding after a conflict) -> warm pool -> publish.

Supervision: an exception in one target's reconcile (any type, e.g. a raw TimeoutError
from a client) is caught for that target, counted, logged once per failure streak and
shown as its ``ReconcileFailed`` condition; other targets go on. An unexpected error in
the loop itself restarts the ticking after an exponential backoff and sets
``state.loop.error`` (/readyz 503) until a tick completes again.
"""

from __future__ import annotations

import asyncio
import functools
import math
import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from autoscaler.control.clock import Clock, MonotonicClock
from autoscaler.control.held import HeldCounts
from autoscaler.control.ports import (
    AlwaysLeader,
    ClusterPort,
    DecisionObserver,
    LeaderPort,
    PlannerPort,
    SignalPort,
    SignalReading,
    SleeperPort,
    TargetView,
)
from autoscaler.control.roles import (
    PREFILL_SIGNALS,
    RoleObserved,
    has_roles,
    merged_signals,
    observe_role,
    plan_role,
    role_signals,
    role_spec,
    role_state,
    role_status_rows,
    role_targets,
)
from autoscaler.control.state import ControllerState, TargetStatus
from autoscaler.control.variants import (
    capacity_observation,
    plan_for,
    status_rows,
    variant_numbers,
)
from autoscaler.domain import (
    Decision,
    DecisionState,
    Forecast,
    Observation,
    Reason,
    TargetRef,
)
from autoscaler.errors import ActuationError, AutoscalerError, ConflictError
from autoscaler.logging import get_logger
from autoscaler.policy.core import decide, initial_state
from autoscaler.policy.roles import (
    RolesDecision,
    RoleSignals,
    RoleStep,
    RoleTargets,
    size_roles,
    step_role,
)
from autoscaler.policy.status import metrics_availability, paused_decision
from autoscaler.policy.variants import VariantChange, VariantPlan
from autoscaler.store.base import StoredTarget
from autoscaler.target import ROLES, Role, TargetSpec, variant_target

log = get_logger(__name__)

RESTART_BACKOFF_MAX_S = 60.0
# A tick stops waiting for its slowest targets (stragglers, module doc) only when they
# are at most this share of its targets, or this many.
STRAGGLER_SHARE = 0.05
MIN_STRAGGLERS = 2

PlannerFactory = Callable[[TargetSpec], PlannerPort]


class ControlLoop:
    def __init__(
        self,
        state: ControllerState,
        cluster: ClusterPort,
        signals: SignalPort,
        *,
        planner_factory: PlannerFactory | None = None,
        leader: LeaderPort | None = None,
        clock: Clock | None = None,
        observer: DecisionObserver | None = None,
        tick_interval_s: float = 1.0,
        max_conflict_retries: int = 3,
        dry_run: bool = False,
        summary_every_s: float = 60.0,
        decides: Callable[[TargetRef], bool] | None = None,
        tick_phases: int = 1,
        straggler_wait_s: float | None = None,
        sleepers: SleeperPort | None = None,
    ) -> None:
        if straggler_wait_s is not None and not straggler_wait_s > 0:
            raise ValueError(f"straggler_wait_s={straggler_wait_s!r}: must be > 0 or None")
        if tick_phases < 1 or tick_phases != int(tick_phases):
            raise ValueError(f"tick_phases={tick_phases!r}: must be a whole number >= 1")
        self.state = state
        self.cluster = cluster
        self.signals = signals
        self.planner_factory = planner_factory
        self.leader = leader or AlwaysLeader()
        self.clock = clock or MonotonicClock()
        self.observer = observer
        self.tick_interval_s = tick_interval_s
        self.tick_phases = tick_phases
        self._step_s = tick_interval_s / tick_phases  # time between ticks
        self.straggler_wait_s = straggler_wait_s
        # reconciles still running after their tick stopped waiting (module doc)
        self._in_flight: dict[TargetRef, asyncio.Task[Decision | None]] = {}
        self._grid_origin = self.clock.now()  # where every target's phase grid starts
        self.max_conflict_retries = max_conflict_retries
        self.dry_run = dry_run  # process-wide advisory mode: decide and publish, never write
        # Sharded with scope "held": reconcile only the targets this replica writes.
        self.decides = decides
        self._decision_states: dict[TargetRef, DecisionState] = {}
        # a target whose variants carry roles: one decision state per role (HPA behaviour
        # per role, docs/policy.md "Prefill/decode roles")
        self._role_states: dict[tuple[TargetRef, Role], DecisionState] = {}
        self._planners: dict[TargetRef, PlannerPort] = {}
        self._next_due: dict[TargetRef, float] = {}
        self._failing: dict[TargetRef, int] = {}  # consecutive failed reconciles per target
        self.summary_every_s = summary_every_s
        self._summary = {"decisions": 0, "logged": 0}
        self._summary_t = self.clock.now()
        self._loop_failures = 0  # consecutive loop failures (restart backoff exponent)
        # Requests held at the activators (control/held.py): added to the signals; a held
        # request for a target at zero pokes it (`poke`) instead of waiting for its tick.
        self.held: HeldCounts | None = None
        self._poked: set[TargetRef] = set()
        self._poke_tasks: set[asyncio.Task[Decision | None]] = set()
        # vLLM sleep mode for targets with policy.sleep (control/sleepers.py): the core
        # decides awake replicas; this wakes, sleeps and deletes pods to match.
        self.sleepers = sleepers
        state.loop.clock, state.loop.tick_interval_s = self.clock, tick_interval_s

    # -- targets --------------------------------------------------------------------------
    def set_targets(self, targets: Iterable[StoredTarget]) -> None:
        """Replace the target set; unchanged targets keep their decision history."""
        seen: set[TargetRef] = set()
        for stored in targets:
            ref = stored.spec.ref
            seen.add(ref)
            st = self.state.targets.get(ref)
            if st is None:
                self.state.targets[ref] = TargetStatus(spec=stored.spec, version=stored.version)
            elif st.version != stored.version or st.spec != stored.spec:
                if st.spec.policy.prediction != stored.spec.policy.prediction:
                    self._planners.pop(ref, None)
                st.spec, st.version = stored.spec, stored.version
                self._next_due.pop(ref, None)  # edits take effect on the next tick
        for ref in list(self.state.targets):
            if ref not in seen:
                del self.state.targets[ref]
                self._forget(ref)
                self._decision_states.pop(ref, None)
                self._planners.pop(ref, None)
                self._next_due.pop(ref, None)
                self._failing.pop(ref, None)

    def _forget(self, ref: TargetRef) -> None:
        """A deleted target's per-target memory elsewhere (scrape histories, cluster
        caches, metric series) goes with it; parts without ``forget`` keep nothing."""
        for part in (self.cluster, self.signals, self.observer, self.sleepers):
            forget = getattr(part, "forget", None)
            if callable(forget):
                forget(ref)
        for role in ROLES:  # a target with roles: its per-role reads and states
            self._role_states.pop((ref, role), None)
            forget = getattr(self.signals, "forget", None)
            if callable(forget):
                forget(TargetRef(ref.namespace, f"{ref.name}//{role}"))

    # -- loop -----------------------------------------------------------------------------
    async def run(self) -> None:
        """Tick forever, supervised: an unexpected error restarts the ticking after
        ``tick x 2^(n-1)`` seconds (n consecutive failures, at most RESTART_BACKOFF_MAX_S)."""
        health = self.state.loop
        health.started_t = self.clock.now()
        while True:
            try:
                await self._tick_forever()
            except asyncio.CancelledError:
                for task in self._in_flight.values():  # stopped: stragglers too
                    task.cancel()
                raise
            except Exception as err:  # supervision: whatever broke, tick again later
                self._loop_failures += 1
                delay_s = min(
                    self.tick_interval_s * 2 ** min(self._loop_failures - 1, 30),
                    RESTART_BACKOFF_MAX_S,
                )
                health.error = f"{type(err).__name__}: {err}"[:500]
                health.restarts += 1
                log.error("control loop failed; restarting", error=health.error, backoff_s=delay_s)
                if self.observer is not None:
                    self.observer.observe_loop_restart()
                await self.clock.sleep(delay_s)

    async def _tick_forever(self) -> None:
        """Tick every ``tick_interval_s / tick_phases`` (aligned to the clock, no drift)."""
        step = self._step_s
        next_t = self.clock.now()
        if self.tick_phases > 1:  # on the phase grid
            next_t = self._grid_after(next_t - step / 2, 0.0, step)
        while True:
            await self.tick()
            next_t += step
            now = self.clock.now()
            if next_t < now:  # a slow tick: skip missed slots instead of bursting
                next_t = now if self.tick_phases == 1 else self._grid_after(now, 0.0, step)
            await self.clock.sleep(next_t - now)

    def _grid_after(self, t: float, offset_s: float, period_s: float) -> float:
        """The first time >= ``t`` of the grid ``origin + offset_s + k * period_s``."""
        origin = self._grid_origin + offset_s
        return origin + math.ceil((t - origin) / period_s) * period_s

    def _phase_offset_s(self, ref: TargetRef) -> float:
        """Where in the interval ``ref`` is due: a stable hash, the same in every replica
        and after a restart."""
        key = f"{ref.namespace}/{ref.name}".encode()
        return (zlib.crc32(key) % self.tick_phases) * self._step_s

    def _due_after(self, ref: TargetRef, due_t: float, start: float) -> float:
        """With phases: the next time ``ref`` is due, on its phase, one polling interval
        after ``due_t`` (the nearest grid point, as a classic tick rounds), and at least
        half a tick after this read: a late target keeps its phase but is never read
        again at once to catch up."""
        interval = self.state.targets[ref].spec.policy.polling_interval
        offset, period = self._phase_offset_s(ref), self.tick_interval_s
        nxt = self._grid_after(due_t + interval - period / 2, offset, period)
        if nxt - start < period / 2:
            nxt = self._grid_after(start + period / 2, offset, period)
        return nxt

    async def tick(self) -> list[Decision]:
        start = self.clock.now()
        # Half a tick of slack: a tick that wakes a hair early must not skip a target
        # whose polling interval equals the tick (that would halve its read rate).
        slack = self._step_s / 2
        phased = self.tick_phases > 1
        due: list[TargetRef] = []
        due_at: dict[TargetRef, float] = {}
        for ref in self.state.targets:
            due_t = self._next_due.get(ref)
            if due_t is None:  # new (or edited): now, or with phases its phase's next slot
                if phased:
                    due_t = self._grid_after(
                        start - slack, self._phase_offset_s(ref), self.tick_interval_s
                    )
                    self._next_due[ref] = due_t
                else:
                    due_t = start
            if due_t <= start + slack:
                due.append(ref)
                due_at[ref] = due_t
        if self.decides is not None:
            due = self._held_only(due)
        if self._in_flight or self._poked:  # still reconciling (a straggler or a poke)
            due = [ref for ref in due if ref not in self._in_flight and ref not in self._poked]
        for ref in due:
            if phased:
                self._next_due[ref] = self._due_after(ref, due_at[ref], start)
            else:
                interval = self.state.targets[ref].spec.policy.polling_interval
                self._next_due[ref] = start + interval
        if self.straggler_wait_s is None:
            results = await asyncio.gather(
                *(self._reconcile_guarded(ref, due_at[ref]) for ref in due)
            )
        else:
            results = await self._reconcile_bounded(due, due_at, self.straggler_wait_s)
        self.state.ticks += 1
        self.state.ready = True
        self._log_summary(self.clock.now())
        if self.observer is not None:
            self.observer.observe_tick(self.clock.now() - start)
        self.state.loop.last_tick_t = self.clock.now()  # a completed tick: ticks resumed
        self.state.loop.error = None
        self._loop_failures = 0
        return [d for d in results if d is not None]

    async def _reconcile_bounded(
        self, due: list[TargetRef], due_at: dict[TargetRef, float], wait_s: float
    ) -> list[Decision | None]:
        """Reconcile ``due``, waiting at most ``wait_s``: the decisions done by then; the
        others go on as stragglers (`_in_flight`, removed when they end)."""
        if not due:
            return []
        tasks = [asyncio.ensure_future(self._reconcile_guarded(ref, due_at[ref])) for ref in due]
        # A few slow targets are faulty pods; many are an overloaded process, and then the
        # tick waits for them (the next one starts late: back-pressure, not a pile-up).
        few = max(MIN_STRAGGLERS, math.ceil(STRAGGLER_SHARE * len(tasks)))
        try:
            done, pending = await asyncio.wait(tasks, timeout=wait_s)
            while len(pending) > few:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            done = {t for t in tasks if t not in pending}
        except asyncio.CancelledError:
            for task in tasks:
                task.cancel()
            raise
        for ref, task in zip(due, tasks, strict=True):
            if task in pending:
                self._in_flight[ref] = task
                task.add_done_callback(functools.partial(self._straggler_done, ref))
        return [t.result() for t in tasks if t in done]

    def _straggler_done(self, ref: TargetRef, task: asyncio.Future[Decision | None]) -> None:
        if self._in_flight.get(ref) is task:
            del self._in_flight[ref]

    def poke(self, ref: TargetRef) -> bool:
        """Reconcile ``ref`` now, outside the tick (an activator holds a request for it:
        Knative's activator poke). False when unknown, not decided here, or already
        being poked; the tick skips a target while its poke runs."""
        if ref not in self.state.targets or ref in self._poked or ref in self._in_flight:
            return False
        if self.decides is not None and not self.decides(ref):
            return False
        self._poked.add(ref)
        task = asyncio.get_running_loop().create_task(self._poke(ref), name=f"poke/{ref}")
        self._poke_tasks.add(task)
        task.add_done_callback(self._poke_tasks.discard)
        return True

    async def _poke(self, ref: TargetRef) -> Decision | None:
        try:
            return await self._reconcile_guarded(ref, self.clock.now())
        finally:
            self._poked.discard(ref)

    def _held_only(self, due: list[TargetRef]) -> list[TargetRef]:
        """Targets another replica writes are not reconciled here: their decision state and
        planner go (one that comes back starts as after a leader change), so each replica
        scrapes and decides only its share."""
        assert self.decides is not None
        keep = []
        for ref in due:
            if self.decides(ref):
                keep.append(ref)
            else:
                self._decision_states.pop(ref, None)
                self._planners.pop(ref, None)
        return keep

    async def _reconcile_guarded(self, ref: TargetRef, due_t: float) -> Decision | None:
        """One target's reconcile; no exception of one target reaches the others."""
        try:
            decision = await self.reconcile(ref)
        except Exception as err:  # any type: a raw client TimeoutError must not stop the loop
            self._reconcile_failed(ref, err)
            return None
        if decision is not None and self.observer is not None:
            # how late the decision came: from when the target was due to decided
            self.observer.observe_decision_lag(max(0.0, self.clock.now() - due_t))
        failed = self._failing.pop(ref, 0)
        st = self.state.targets.get(ref)
        if st is not None and st.condition and st.condition.startswith("ReconcileFailed"):
            st.condition = None
        if failed:
            log.info("reconcile recovered", target=str(ref), failed_ticks=failed)
        return decision

    def _reconcile_failed(self, ref: TargetRef, err: Exception) -> None:
        """Count the failure; log it once per failure streak (with the traceback when
        the error is not one of ours); show it as the target's condition."""
        streak = self._failing[ref] = self._failing.get(ref, 0) + 1
        self.state.loop.reconcile_errors += 1
        message = f"{type(err).__name__}: {err}"[:500]
        if streak == 1:
            if isinstance(err, AutoscalerError):
                log.warning("reconcile failed", target=str(ref), error=message)
            else:
                log.error("reconcile failed", target=str(ref), error=message, exc_info=err)
        if self.observer is not None:
            self.observer.observe_reconcile_error(ref)
        st = self.state.targets.get(ref)
        if st is not None:
            st.condition = f"ReconcileFailed: {message}"

    # -- one target -----------------------------------------------------------------------
    def _planner(self, spec: TargetSpec) -> PlannerPort | None:
        if self.planner_factory is None or spec.policy.prediction is None:
            return None
        planner = self._planners.get(spec.ref)
        if planner is None:
            planner = self._planners[spec.ref] = self.planner_factory(spec)
        return planner

    async def _read_signals(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        try:
            reading = await self.signals.read(spec, view, now)
        except AutoscalerError as err:
            # Missing data, never zero: the core holds replicas on an empty mapping.
            reading = SignalReading(signals={}, pods_read=0, errors=(str(err),))
        if self.held is not None:
            reading = self.held.adjust(spec.ref, view, reading)
        if reading.errors and self.observer is not None:
            self.observer.observe_scrape_error(spec.ref)
        if self.observer is not None:
            for reason, count in reading.rejected.items():
                self.observer.observe_rejected(spec.ref, reason, count)
        return reading

    async def reconcile(self, ref: TargetRef) -> Decision | None:
        st = self.state.targets.get(ref)
        if st is None:
            return None
        spec = st.spec
        now = self.clock.now()
        view = await self._observe(spec)
        if has_roles(spec):
            return await self._reconcile_roles(st, spec, view, now)
        reading = await self._read_signals(spec, view, now)
        planner = self._planner(spec)
        forecast = None
        if planner is not None:
            planner.update(now, reading.signals, view)
            forecast = planner.forecast(now)
        obs = _observation(now, view, reading, forecast)
        if spec.variants:  # replicas counted by capacity (docs/policy.md "Variants")
            obs = capacity_observation(spec, view, obs)
        prev = self._decision_states.get(ref)
        if prev is None:  # first reconcile here (new target, restart, new leader): HPA's
            prev = initial_state(obs.current_replicas, now)  # initial recommendation
        decision, new_state = self._decide(spec, obs, prev, now)

        holder, can_write = self._may_write(st, view)
        applied = False
        frozen = spec.pause is not None  # a paused target's warm pool is left as it is
        # Variants: the one decision split over the Deployments (docs/policy.md "Variants")
        plan = (
            plan_for(spec, view, decision.desired_replicas, now, reading.length_buckets)
            if spec.variants
            else None
        )
        written: tuple[VariantChange, ...] = ()
        sleeps = plan is None and self.sleepers is not None and self.sleepers.wants(spec, view)
        sleeping: int | None = view.sleeping_replicas if sleeps else None
        if plan is not None:
            if can_write and (decision.changed or (plan.changes and not frozen)):
                decision, new_state, obs, view, plan, written = await self._apply_variants(
                    spec, obs, prev, decision, new_state, view, plan, reading.length_buckets
                )
                applied = bool(written)
        elif can_write and (decision.changed or (sleeps and not frozen)):
            # with sleepers, every tick: a TTL expires with the decision unchanged
            decision, new_state, obs, applied, sleeping = await self._apply(
                spec, obs, prev, decision, new_state, view, sleeps
            )
        self._decision_states[ref] = new_state
        if applied:  # before the awaits below: a held request in between sees it (held.py)
            st.applied_replicas = decision.desired_replicas
        if (
            self.held is not None
            and obs.held
            and obs.current_replicas == 0 < decision.desired_replicas
        ):
            self.held.scaled_from_zero(ref)  # a cold start for held requests: timed
        if can_write and not frozen and spec.policy.warm_pool.enabled and planner is not None:
            await self._size_warm_pool(st, planner, now, decision)
        if planner is not None or reading.rejected or sleeping is not None:
            # one merge: this runs per target per tick
            decision = replace(
                decision,
                numbers={
                    **(planner.numbers() if planner is not None else {}),
                    **decision.numbers,
                    # why pods were left unread: out-of-range values, by reason
                    **{f"pods_rejected.{r}": float(n) for r, n in reading.rejected.items()},
                    **_sleeper_numbers(decision, sleeping),
                    **(
                        self.sleepers.numbers(ref)
                        if sleeping is not None and self.sleepers is not None
                        else {}
                    ),
                },
            )
        if holder:
            await self._report_metrics(spec, view, reading)
        if plan is not None:
            decision = replace(
                decision, numbers={**decision.numbers, **variant_numbers(spec, plan)}
            )
            st.variants = status_rows(spec, view, plan)
        try:  # every tick: the recorder decides what is worth an Event or a status write
            if holder and plan is not None:
                await self._record_variants(spec, st, written, decision)
            if holder:
                # with variants, the Events are per variant Deployment (record_variants)
                await self.cluster.record(spec, decision, applied and plan is None)
        except AutoscalerError as err:
            log.warning("recording decision failed", target=str(ref), error=str(err))
        before = st.last_decision
        await self.state.publish(ref, obs, decision)
        if self.observer is not None:
            self.observer.observe_decision(ref, decision)
        self._log_decision(ref, before, decision, applied)
        return decision

    def _may_write(self, st: TargetStatus, view: TargetView) -> tuple[bool, bool]:
        """(holder, can_write). Only the holder of the target's Lease writes anything for
        it (replicas, warm pool, status, Events); the others decide and publish. Replicas
        only in direct mode, outside dry-run, and while no HPA/ScaledObject owns it."""
        spec = st.spec
        holder = self.leader.can_write(spec.ref)
        can_write = holder and spec.mode == "direct" and not self.dry_run
        if view.owner_conflict is not None and spec.mode == "direct":
            st.condition = f"OwnershipConflict: {view.owner_conflict}"
            can_write = False
        elif st.condition and st.condition.startswith("OwnershipConflict"):
            st.condition = None
        return holder, can_write

    # -- prefill/decode roles ---------------------------------------------------------------
    async def _read_role(
        self, spec: TargetSpec, role: Role, view: TargetView, now: float
    ) -> SignalReading:
        """The role's pods, read under a key of the role's own (`role_ref`); missing,
        never zero, when the source fails."""
        try:
            reading = await self.signals.read(role_spec(spec, role), view, now)
        except AutoscalerError as err:
            reading = SignalReading(signals={}, pods_read=0, errors=(f"{role}: {err}",))
        if reading.errors and self.observer is not None:
            self.observer.observe_scrape_error(spec.ref)
        return reading

    async def _reconcile_roles(
        self, st: TargetStatus, spec: TargetSpec, view: TargetView, now: float
    ) -> Decision:
        """A target whose variants carry roles (docs/policy.md "Prefill/decode roles"):
        per role its pods' signals, `size_roles` for both, then each role's own HPA
        behaviour (`step_role`, state per role) and its own split over its variants.
        One role's unschedulable pods stop that role's growth only. Writes only the
        variants that move; a conflict leaves the rest to the next tick (re-read)."""
        ref = spec.ref
        observed = {role: observe_role(spec, view, role) for role in ROLES}
        readings = {
            role: await self._read_role(spec, role, observed[role].view, now) for role in ROLES
        }
        signals = role_signals(readings)
        targets = role_targets(spec)
        sized = size_roles(
            signals, targets, role_state(observed["prefill"]), role_state(observed["decode"])
        )
        steps: dict[Role, RoleStep] = {}
        for role in ROLES:
            o = observed[role]
            prev = self._role_states.get((ref, role))
            if prev is None:  # first reconcile here: HPA's initial recommendation
                prev = initial_state(o.replicas, now)
            steps[role] = step_role(
                spec.policy.behavior,
                sized.prefill if role == "prefill" else sized.decode,
                o.replicas,
                o.ready,
                prev,
                now,
                floor=targets.min_prefill if role == "prefill" else targets.min_decode,
                cold_start_guard=spec.policy.cold_start_guard.enabled,
            )
            self._role_states[(ref, role)] = steps[role].state
        plans = {role: plan_role(spec, view, role, steps[role].desired, now) for role in ROLES}
        decision, lines = _roles_decision(now, targets, observed, signals, sized, steps)
        holder, can_write = self._may_write(st, view)
        written: list[VariantChange] = []
        if can_write and spec.pause is None:
            written = await self._apply_roles(spec, view, plans, lines)
        st.variants = role_status_rows(spec, view, plans)
        st.role_notes = _role_notes(sized, steps)
        if written:
            st.applied_replicas = decision.desired_replicas
        merged = SignalReading(
            signals=merged_signals(readings),
            pods_read=sum(r.pods_read or 0 for r in readings.values()),
            errors=tuple(e for r in readings.values() for e in r.errors),
        )
        if holder:
            await self._report_metrics(spec, view, merged)
        try:
            if holder:
                await self._record_variants(spec, st, tuple(written), decision)
                report = getattr(self.cluster, "record_roles", None)
                if callable(report):
                    await report(spec, st.role_notes)
                await self.cluster.record(spec, decision, False)
        except AutoscalerError as err:
            log.warning("recording decision failed", target=str(ref), error=str(err))
        obs = _observation(now, view, merged, None)
        before = st.last_decision
        await self.state.publish(ref, obs, decision)
        if self.observer is not None:
            self.observer.observe_decision(ref, decision)
        self._log_decision(ref, before, decision, bool(written))
        return decision

    async def _apply_roles(
        self,
        spec: TargetSpec,
        view: TargetView,
        plans: dict[Role, VariantPlan],
        lines: dict[Role, str],
    ) -> list[VariantChange]:
        """Write each variant whose replicas move (prefill's first), with the
        resourceVersion read; each change's message names its role and why. On a
        conflict or an error the rest waits for the next tick (which re-reads)."""
        by_name = {v.name: v for v in spec.variants}
        versions = {v.name: v.resource_version for v in view.variants}
        written: list[VariantChange] = []
        for role in ROLES:
            for change in plans[role].changes:
                try:
                    await self.cluster.scale(
                        variant_target(spec, by_name[change.name]),
                        change.to_replicas,
                        versions[change.name],
                    )
                except (ConflictError, ActuationError) as err:
                    log.warning(
                        "role variant scale failed; the rest waits for the next tick",
                        target=str(spec.ref),
                        role=role,
                        variant=change.name,
                        error=str(err),
                    )
                    if self.observer is not None:
                        kind = "conflict" if isinstance(err, ConflictError) else "error"
                        self.observer.observe_scale_failure(spec.ref, kind)
                    return written
                written.append(replace(change, message=f"{change.message}; {lines[role]}"))
        return written

    async def _record_variants(
        self,
        spec: TargetSpec,
        st: TargetStatus,
        written: tuple[VariantChange, ...],
        decision: Decision,
    ) -> None:
        """The per-variant rows and written changes to the cluster port's optional
        ``record_variants`` (status rows, an Event per variant written)."""
        report = getattr(self.cluster, "record_variants", None)
        if callable(report):
            total = (decision.current_replicas, decision.desired_replicas)
            await report(spec, st.variants, written, total)

    async def _apply_variants(
        self,
        spec: TargetSpec,
        obs: Observation,
        prev: DecisionState,
        decision: Decision,
        new_state: DecisionState,
        view: TargetView,
        plan: VariantPlan,
        lengths: Mapping[float, float],
    ) -> tuple[
        Decision, DecisionState, Observation, TargetView, VariantPlan, tuple[VariantChange, ...]
    ]:
        """Write the split: each variant whose replicas move (only those), with the
        resourceVersion read. After a conflict, re-read, RE-DECIDE from the state before
        this tick and re-split, as `_apply` does for one Deployment."""
        written: list[VariantChange] = []
        by_name = {v.name: v for v in spec.variants}
        for attempt in range(self.max_conflict_retries + 1):
            versions = {v.name: v.resource_version for v in view.variants}
            try:
                for change in plan.changes:
                    await self.cluster.scale(
                        variant_target(spec, by_name[change.name]),
                        change.to_replicas,
                        versions[change.name],
                    )
                    written.append(change)
                return decision, new_state, obs, view, plan, tuple(written)
            except ConflictError as err:
                log.info(
                    "variant scale conflict, re-deciding",
                    target=str(spec.ref),
                    attempt=attempt,
                    error=str(err),
                )
                view = await self._observe(spec)
                obs = _reobserved(obs, view)
                obs = capacity_observation(spec, view, obs)
                decision, new_state = self._decide(spec, obs, prev, obs.t)
                plan = plan_for(spec, view, decision.desired_replicas, obs.t, lengths)
                if not plan.changes:
                    return decision, new_state, obs, view, plan, tuple(written)
            except ActuationError as err:
                log.warning(
                    "variant scale failed; the rest not applied",
                    target=str(spec.ref),
                    error=str(err),
                )
                if self.observer is not None:
                    self.observer.observe_scale_failure(spec.ref, "error")
                return decision, new_state, obs, view, plan, tuple(written)
        log.warning("giving up after repeated conflicts", target=str(spec.ref))
        if self.observer is not None:
            self.observer.observe_scale_failure(spec.ref, "conflict")
        return decision, new_state, obs, view, plan, tuple(written)

    @staticmethod
    def _decide(
        spec: TargetSpec, obs: Observation, prev: DecisionState, now: float
    ) -> tuple[Decision, DecisionState]:
        """`decide`, then a pause (annotation) overrides the count: no write, or one to the
        paused replicas. The state still learns from the observation."""
        decision, state = decide(spec.policy, obs, prev, now)
        if spec.pause is not None:
            decision = paused_decision(decision, spec.pause)
        return decision, state

    async def _report_metrics(
        self, spec: TargetSpec, view: TargetView, reading: SignalReading
    ) -> None:
        """Whether anything was read (``MetricsAvailable``) to the cluster port's optional
        ``record_metrics`` (status condition, Warning Event); ports without it keep
        nothing. The source's kind ("pods" or "prometheus") names what failed."""
        report = getattr(self.cluster, "record_metrics", None)
        if not callable(report):
            return
        availability = metrics_availability(
            source=str(getattr(self.signals, "source_kind", "pods")),
            spec_replicas=view.awake_replicas,
            pods=len(view.pods),
            pods_read=reading.pods_read,
            signals_read=len(reading.signals),
            errors=reading.errors,
        )
        try:
            await report(spec, availability)
        except AutoscalerError as err:
            log.warning(
                "recording metrics availability failed", target=str(spec.ref), error=str(err)
            )

    def _log_decision(
        self, ref: TargetRef, before: Decision | None, decision: Decision, applied: bool
    ) -> None:
        """INFO when something changed (replicas, reason, a write), DEBUG otherwise: one
        line per target per tick is most of a fleet's log volume and ~10% of its CPU.
        `tick` adds a periodic INFO summary."""
        self._summary["decisions"] += 1
        changed = (
            applied
            or before is None
            or decision.changed
            or (before.current_replicas, before.desired_replicas, before.reason)
            != (decision.current_replicas, decision.desired_replicas, decision.reason)
        )
        if changed:
            self._summary["logged"] += 1
        emit = log.info if changed else log.debug
        emit(
            "decision",
            target=str(ref),
            current=decision.current_replicas,
            desired=decision.desired_replicas,
            reason=str(decision.reason),
            applied=applied,
            message=decision.message,
        )

    def _log_summary(self, now: float) -> None:
        if now - self._summary_t < self.summary_every_s:
            return
        counts = dict(self._summary)
        self._summary = dict.fromkeys(counts, 0)
        log.info(
            "decisions summary",
            targets=len(self.state.targets),
            period_s=round(now - self._summary_t, 1),
            decisions=counts["decisions"],
            logged_changes=counts["logged"],
            failing_targets=len(self._failing),
            ticks=self.state.ticks,
        )
        self._summary_t = now

    async def _observe(self, spec: TargetSpec) -> TargetView:
        view = await self.cluster.observe(spec)
        if self.sleepers is not None:
            view = self.sleepers.adjust(spec, view)  # our own marks the cache lags behind
        return view

    async def _write(
        self, spec: TargetSpec, decision: Decision, view: TargetView, sleeps: bool
    ) -> bool:
        """Apply ``decision``; whether anything was applied. Without sleepers the workload's
        replicas are the decision; with them the sleeper controller wakes, sleeps or
        deletes pods and says what the replicas become."""
        if not sleeps or self.sleepers is None:
            await self.cluster.scale(spec, decision.desired_replicas, view.resource_version)
            return True
        outcome = await self.sleepers.reconcile(spec, view, decision.desired_replicas)
        if outcome.replicas != view.spec_replicas:
            await self.cluster.scale(spec, outcome.replicas, view.resource_version)
        return outcome.acted

    async def _apply(
        self,
        spec: TargetSpec,
        obs: Observation,
        prev: DecisionState,
        decision: Decision,
        new_state: DecisionState,
        view: TargetView,
        sleeps: bool = False,
    ) -> tuple[Decision, DecisionState, Observation, bool, int | None]:
        """Write the decision; after a conflict, re-read and RE-DECIDE from the state
        before this tick, so a stale decision is never applied."""
        sleeping = view.sleeping_replicas if sleeps else None
        for attempt in range(self.max_conflict_retries + 1):
            try:
                applied = await self._write(spec, decision, view, sleeps)
                return decision, new_state, obs, applied, sleeping
            except ConflictError as err:
                log.info(
                    "scale conflict, re-deciding",
                    target=str(spec.ref),
                    attempt=attempt,
                    error=str(err),
                )
                view = await self._observe(spec)
                sleeping = view.sleeping_replicas if sleeps else None
                obs = _reobserved(obs, view)
                decision, new_state = self._decide(spec, obs, prev, obs.t)
                if not decision.changed:
                    return decision, new_state, obs, False, sleeping
            except ActuationError as err:
                log.warning("scale failed; nothing applied", target=str(spec.ref), error=str(err))
                if self.observer is not None:
                    self.observer.observe_scale_failure(spec.ref, "error")
                return decision, new_state, obs, False, sleeping
        log.warning("giving up after repeated conflicts", target=str(spec.ref))
        if self.observer is not None:
            self.observer.observe_scale_failure(spec.ref, "conflict")
        return decision, new_state, obs, False, sleeping

    async def _size_warm_pool(
        self, st: TargetStatus, planner: PlannerPort, now: float, decision: Decision
    ) -> None:
        pool = st.spec.policy.warm_pool
        want = planner.warm_pool_size(now, decision.desired_replicas)
        size = min(max(want, pool.min_replicas), pool.max_replicas)
        peak = want > pool.min_replicas
        if size == st.warm_pool_replicas:
            return
        try:
            await self.cluster.set_warm_pool(st.spec, size, peak)
            st.warm_pool_replicas = size
        except AutoscalerError as err:
            log.warning("warm pool resize failed", target=str(st.spec.ref), error=str(err))


def _observation(
    now: float, view: TargetView, reading: SignalReading, forecast: Forecast | None
) -> Observation:
    return Observation(
        t=now,
        current_replicas=view.awake_replicas,  # sleepers serve nothing
        ready_replicas=view.ready_replicas,
        signals=dict(reading.signals),
        pods_read=reading.pods_read,
        pending_replicas=view.pending_replicas,
        capacity_max_replicas=view.capacity_max_replicas,
        forecast=forecast,
        held=reading.held,
        in_flight=reading.in_flight,
    )


def _reobserved(obs: Observation, view: TargetView) -> Observation:
    """``obs`` with the replica counts of a view re-read after a write conflict (the
    signals stay: they were read this tick)."""
    return replace(
        obs,
        current_replicas=view.awake_replicas,
        ready_replicas=view.ready_replicas,
        pending_replicas=view.pending_replicas,
        capacity_max_replicas=view.capacity_max_replicas,
    )


def _sleeper_numbers(decision: Decision, sleeping: int | None) -> dict[str, float]:
    """``sleepers.sleeping`` / ``sleepers.awake`` as observed at the decision, for targets
    with sleepers (status, /metrics); nothing for the others."""
    if sleeping is None:
        return {}
    return {
        "sleepers.sleeping": float(sleeping),
        "sleepers.awake": float(decision.current_replicas),
    }


def _role_why(role: Role, signals: RoleSignals, targets: RoleTargets) -> str:
    """What sized the role, in its own units."""
    if role == "prefill":
        if signals.prompt_tokens_per_s is None:
            return "prompt-token rate missing"
        why = (
            f"prompt tokens {signals.prompt_tokens_per_s:.0f}/s at "
            f"{targets.prompt_tokens_per_s_per_prefill:g}/s per replica"
        )
        if signals.ttft_p90_s is not None:
            why += f", TTFT p95 {signals.ttft_p90_s:.3g}s"
        return why
    parts = []
    if signals.running is not None:
        parts.append(f"running {signals.running:g} at {targets.running_per_decode:g} per replica")
    if signals.kv_usage is not None:
        parts.append(f"KV usage {signals.kv_usage:.2f} (target {targets.kv_usage_target:g})")
    if signals.itl_p90_s is not None:
        parts.append(f"ITL p95 {signals.itl_p90_s:.3g}s")
    return ", ".join(parts) or "running and KV usage missing"


def _role_notes(sized: RolesDecision, steps: Mapping[Role, RoleStep]) -> tuple[str, ...]:
    """Why a role held, could not grow or was raised (`size_roles`), and the limits its
    own behaviour applied."""
    limits = [f"{role}: {limit}" for role in ROLES for limit in steps[role].limits]
    return (*sized.notes, *limits)


def _roles_decision(
    now: float,
    targets: RoleTargets,
    observed: Mapping[Role, RoleObserved],
    signals: RoleSignals,
    sized: RolesDecision,
    steps: Mapping[Role, RoleStep],
) -> tuple[Decision, dict[Role, str]]:
    """The model's decision as published (REST, status, history): the sums of both
    roles, a message per role, ``roles.<role>.*`` numbers; and per role the line its
    variants' Events carry."""
    cur = sum(observed[r].replicas for r in ROLES)
    desired = sum(steps[r].desired for r in ROLES)
    lines: dict[Role, str] = {}
    numbers: dict[str, float] = {}
    for role in ROLES:
        o, step = observed[role], steps[role]
        move = (
            f"{o.replicas} -> {step.desired}"
            if step.desired != o.replicas
            else f"hold at {o.replicas}"
        )
        lines[role] = f"role {role} {move}: {_role_why(role, signals, targets)}"
        numbers[f"roles.{role}.replicas"] = float(o.replicas)
        numbers[f"roles.{role}.desired"] = float(step.desired)
        numbers[f"roles.{role}.sized"] = float(sized.prefill if role == "prefill" else sized.decode)
        numbers[f"roles.{role}.ready"] = float(o.ready)
        numbers[f"roles.{role}.unschedulable"] = float(o.unschedulable)
    for name, value in (
        ("prompt_tokens_per_s", signals.prompt_tokens_per_s),
        ("waiting", signals.waiting),
        ("ttft_p95_s", signals.ttft_p90_s),
        ("running", signals.running),
        ("kv_cache_usage", signals.kv_usage),
        ("itl_p95_s", signals.itl_p90_s),
    ):
        if value is not None:
            numbers[f"roles.{'prefill' if name in PREFILL_SIGNALS else 'decode'}.{name}"] = value
    notes = _role_notes(sized, steps)
    ups = [r for r in ROLES if steps[r].desired > observed[r].replicas]
    downs = [r for r in ROLES if steps[r].desired < observed[r].replicas]
    limits = [lim for r in ROLES for lim in steps[r].limits]
    if ups:
        reason = Reason.SCALE_UP
    elif downs:
        reason = Reason.SCALE_DOWN
    elif any("missing" in n for n in sized.notes):
        reason = Reason.HOLD_MISSING_DATA
    elif limits:
        reason = Reason(limits[-1])
    else:
        reason = Reason.STEADY
    message = "; ".join(lines[r] for r in ROLES)
    if notes:
        message += " (" + "; ".join(notes) + ")"
    active = bool(
        (signals.prompt_tokens_per_s or 0) > 0
        or (signals.waiting or 0) > 0
        or (signals.running or 0) > 0
    )
    decision = Decision(
        t=now,
        current_replicas=cur,
        desired_replicas=desired,
        reason=reason,
        message=message,
        active=active,
        numbers=numbers,
        limits=tuple(Reason(lim) for lim in dict.fromkeys(limits)),
    )
    return decision, lines
