"""Adapters from the loop's ports to the real parts: Kubernetes (kubernetes-asyncio),
the metrics sources and the forecast planner."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from autoscaler.control.clock import Clock, MonotonicClock
from autoscaler.control.ports import Replica, TargetView, VariantView
from autoscaler.domain import Decision, Forecast, Reason, TargetRef
from autoscaler.errors import AutoscalerError, PermanentError
from autoscaler.forecast.planner import Planner, PlannerConfig
from autoscaler.kube.cache import ClusterCache, spec_selector
from autoscaler.kube.events import EventLimiter
from autoscaler.kube.scale import ScaleClient, ScaleInfo, WorkloadRecord
from autoscaler.logging import get_logger
from autoscaler.metrics.source import PodEndpoint
from autoscaler.policy.regime import describe as describe_regime
from autoscaler.policy.regime import regime_name
from autoscaler.policy.sleepers import Outlook
from autoscaler.policy.status import (
    MetricsAvailability,
    PolicyStatus,
    active_fields,
    fallback_fields,
    paused_fields,
)
from autoscaler.policy.variants import VariantChange
from autoscaler.target import TargetSpec, variant_target
from autoscaler.target_status import Condition, VariantStatus, overrides_condition

log = get_logger(__name__)


class CapacityPort(Protocol):
    async def max_replicas(self, spec: TargetSpec, current: int) -> int | None: ...


class WarmPoolPort(Protocol):
    async def resize(self, spec: TargetSpec, replicas: int, peak: bool) -> None: ...


class RecorderPort(Protocol):
    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None: ...


class StatusWriterPort(Protocol):
    async def write_status(
        self,
        ref: TargetRef,
        decision: Decision | None,
        *,
        conditions: Sequence[Condition] = (),
        observed_generation: int | None = None,
        policy: PolicyStatus | None = None,
        variants: Sequence[VariantStatus] | None = (),
    ) -> None: ...

    def generation_of(self, ref: TargetRef) -> int | None:
        """The ``metadata.generation`` of the spec last read (None: unknown)."""
        ...


class KubeCluster:
    """`ClusterPort` over the shared informer cache and the scale subresource.

    A tick costs no API request in steady state: the scale (with the resourceVersion for
    the conflict-checked write), the pods and GPU capacity come from `ClusterCache`. The
    scale is read from the API instead only until the workload informer has synced and
    once after a conflict (the cache may lag our own or another writer's change).
    Ownership (an HPA or ScaledObject on the same target) is listed once per namespace
    every ``ownership_check_s``, shared by every target there.
    """

    def __init__(
        self,
        api: Any,
        *,
        cache: ClusterCache | None = None,
        scale: ScaleClient | None = None,
        capacity: CapacityPort | None = None,
        warm_pool: WarmPoolPort | None = None,
        recorder: RecorderPort | None = None,
        status: StatusWriterPort | None = None,
        clock: Clock | None = None,
        ownership_check_s: float = 30.0,
        status_every_s: float = 300.0,
        blind_event_every_s: float = 300.0,
    ) -> None:
        self.api = api
        self._own_cache = cache is None
        self.cache = cache if cache is not None else ClusterCache(api)
        self.scale_client = scale or ScaleClient(api)
        self.capacity = capacity
        self.warm_pool = warm_pool
        self.recorder = recorder
        self.status = status
        self.status_every_s = status_every_s
        self._status_sent: dict[TargetRef, tuple[tuple[object, ...], float]] = {}
        self._policy_status: dict[TargetRef, tuple[TargetSpec, PolicyStatus]] = {}
        self.clock = clock or MonotonicClock()
        self.ownership_check_s = ownership_check_s
        self._owners: dict[str, tuple[float, Mapping[tuple[str, str], str]]] = {}
        self._owners_inflight: dict[str, asyncio.Task[Mapping[tuple[str, str], str]]] = {}
        self._owner: dict[TargetRef, str | None] = {}
        self._reread: set[TargetRef] = set()  # read the scale from the API next time
        # After our own write: (cache resourceVersion when written, what the write returned)
        self._written: dict[TargetRef, tuple[str, ScaleInfo]] = {}
        self.api_reads = 0  # scale GETs made instead of reading the cache
        self._view_of: dict[TargetRef, tuple[str, str, int, str]] = {}
        self._metrics: dict[TargetRef, MetricsAvailability] = {}
        self._blind_events = EventLimiter(blind_event_every_s)
        # targets with variants: the per-variant refs observed, and the last status rows
        self._variant_refs: dict[TargetRef, frozenset[TargetRef]] = {}
        self._variant_rows: dict[TargetRef, tuple[VariantStatus, ...]] = {}
        # targets whose variants carry roles: why a role held, could not grow or was raised
        self._role_notes: dict[TargetRef, tuple[str, ...]] = {}

    async def _owners_in(self, namespace: str) -> Mapping[tuple[str, str], str]:
        """``{(kind, name): who}`` for ``namespace``: one list per namespace per period,
        shared by concurrent callers."""
        now = self.clock.now()
        cached = self._owners.get(namespace)
        if cached is not None and now - cached[0] < self.ownership_check_s:
            return cached[1]
        task = self._owners_inflight.get(namespace)
        if task is None:
            task = asyncio.ensure_future(self.scale_client.list_owners(namespace))
            self._owners_inflight[namespace] = task
            task.add_done_callback(lambda _: self._owners_inflight.pop(namespace, None))
        owners = await asyncio.shield(task)
        self._owners[namespace] = (now, owners)
        return owners

    async def _owner_conflict(self, spec: TargetSpec) -> str | None:
        if spec.mode != "direct":
            return None
        target = spec.scale_target_ref
        owners = await self._owners_in(spec.ref.namespace)
        conflict = owners.get((target.kind, target.name))
        self._owner[spec.ref] = conflict
        return conflict

    async def _scale_info(self, spec: TargetSpec, work: WorkloadRecord | None) -> ScaleInfo:
        target = spec.scale_target_ref
        ns = spec.ref.namespace
        informer = (
            self.cache.deployments if target.kind == "Deployment" else self.cache.statefulsets
        )
        if spec.ref in self._reread or not informer.synced.is_set():
            self._reread.discard(spec.ref)
            self.api_reads += 1
            return await self.scale_client.get_scale(target.kind, ns, target.name)
        if work is None:
            raise PermanentError(f"read {target.kind} {ns}/{target.name} scale: not found")
        written = self._written.get(spec.ref)
        if written is not None:
            if written[0] == work.resource_version:
                return written[1]  # the watch has not shown our write yet
            del self._written[spec.ref]
        return work.scale

    async def observe(self, spec: TargetSpec) -> TargetView:
        if spec.variants:
            return await self._observe_variants(spec)
        return await self._observe_one(spec)

    async def _observe_variants(self, spec: TargetSpec) -> TargetView:
        """One target over several Deployments: each variant observed as a target of its
        own (`variant_target`: its Deployment, its selector, its capacity), the model's
        view the sums (its pods are every variant's pods: one decision), the parts kept
        in ``variants`` for the split."""
        subs = [variant_target(spec, v) for v in spec.variants]
        refs = frozenset(sub.ref for sub in subs)
        for gone in self._variant_refs.get(spec.ref, frozenset()) - refs:
            self.forget(gone)  # a variant removed from the spec
        self._variant_refs[spec.ref] = refs
        views = [await self._observe_one(sub) for sub in subs]
        # Pods the scheduler cannot place are neither serving nor starting: the model's
        # replicas (what the policy core scales) leave them out; the split keeps them on top.
        stuck = [min(w.unschedulable_replicas, w.spec_replicas) for w in views]
        caps: list[int | None] = []
        for v, w, n in zip(spec.variants, views, stuck, strict=True):
            room = None if v.max_replicas is None else max(0, v.max_replicas - n)
            bounds = [b for b in (w.capacity_max_replicas, room) if b is not None]
            caps.append(min(bounds) if bounds else None)
        conflicts = [
            f"{v.name}: {w.owner_conflict}"
            for v, w in zip(spec.variants, views, strict=True)
            if w.owner_conflict
        ]
        return TargetView(
            spec_replicas=sum(w.spec_replicas for w in views) - sum(stuck),
            ready_replicas=sum(w.ready_replicas for w in views),
            pending_replicas=max(0, sum(w.pending_replicas for w in views) - sum(stuck)),
            pods=tuple(p for w in views for p in w.pods),
            capacity_max_replicas=(
                None if any(c is None for c in caps) else sum(c for c in caps if c is not None)
            ),
            cold_start_samples_s=tuple(t for w in views for t in w.cold_start_samples_s),
            cold_start_total=sum(w.cold_start_total or len(w.cold_start_samples_s) for w in views),
            owner_conflict="; ".join(conflicts) or None,
            variants=tuple(
                VariantView(
                    name=v.name,
                    spec_replicas=w.spec_replicas,
                    ready_replicas=w.ready_replicas,
                    pending_replicas=w.pending_replicas,
                    unschedulable_replicas=w.unschedulable_replicas,
                    free_slots=w.free_slots,
                    resource_version=w.resource_version,
                    pods=w.pods,
                )
                for v, w in zip(spec.variants, views, strict=True)
            ),
            unschedulable_replicas=sum(stuck),
        )

    async def _observe_one(self, spec: TargetSpec) -> TargetView:
        self.cache.start()
        target = spec.scale_target_ref
        work = self.cache.workload(target.kind, spec.ref.namespace, target.name)
        info = await self._scale_info(spec, work)
        selector = spec_selector(spec, work) or info.selector
        if not selector:
            raise PermanentError(
                f"{target.kind} {spec.ref.namespace}/{target.name}: no pod selector "
                "(set spec.selector)"
            )
        view_key = (spec.ref.namespace, selector, spec.metrics_port, spec.metrics_path)
        if self._view_of.get(spec.ref, view_key) != view_key:
            self._release_view(spec.ref)  # the target's selector or port changed
        self._view_of[spec.ref] = view_key
        view = self.cache.index.view(*view_key)
        synced = self.cache.pods.synced.is_set()
        snap = view.snapshot(synced)
        pods = tuple(
            PodEndpoint(p.name, p.metrics_url)
            for p in snap.pods
            if p.ready and p.metrics_url and not p.sleeping
        )
        ready = snap.ready
        replicas: tuple[Replica, ...] = ()
        if snap.sleeping or spec.policy.sleep is not None:  # else no per-pod work per tick
            live = [p for p in snap.pods if not p.terminating]
            ready -= sum(1 for p in live if p.ready and p.sleeping)
            replicas = tuple(
                Replica(p.name, p.ready, p.sleeping, p.engine_url, p.asleep_since_s, p.metrics_url)
                for p in live
            )
        capacity = None
        if self.capacity is not None and spec.policy.capacity.enforce:
            capacity = await self.capacity.max_replicas(spec, info.spec_replicas)
        return TargetView(
            spec_replicas=info.spec_replicas,
            # Until the watch has synced we do not know which pods are ready: 0 read pods
            # makes every signal missing, so the core holds.
            ready_replicas=ready if synced else 0,
            resource_version=info.resource_version,
            pending_replicas=snap.pending,
            pods=pods if synced else (),
            capacity_max_replicas=capacity,
            cold_start_samples_s=snap.cold_start_samples_s,
            cold_start_total=snap.cold_start_total,
            owner_conflict=await self._owner_conflict(spec),
            sleeping_replicas=snap.sleeping if synced else 0,
            replicas=replicas if synced else (),
            unschedulable_replicas=snap.unschedulable if synced else 0,
            # what the capacity book can still place, less this workload's own pods not
            # bound yet (they take slots as soon as the scheduler binds them)
            free_slots=(
                None
                if capacity is None
                else max(0, capacity - max(info.spec_replicas, snap.placed))
            ),
        )

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        target = spec.scale_target_ref
        work = self.cache.workload(target.kind, spec.ref.namespace, target.name)
        try:
            result = await self.scale_client.set_replicas(
                target.kind, spec.ref.namespace, target.name, replicas, resource_version
            )
        except AutoscalerError:  # a conflict: the cache may be behind; read the API once
            self._reread.add(spec.ref)
            raise
        if work is not None:
            self._written[spec.ref] = (work.resource_version, result.info)

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        if self.warm_pool is not None:
            await self.warm_pool.resize(spec, replicas, peak)

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        """Events for applied changes; the CRD status when the outcome, the policy in use
        (profile, effective policy hash, fields over the profile) or the spec's generation
        changes (or every ``status_every_s``), so a steady target costs no API writes per
        tick."""
        if self.recorder is not None:
            await self.recorder.record(spec, decision, applied)
        if self.status is None:
            return
        owner = self._owner.get(spec.ref)
        policy = self._policy_of(spec)
        generation = self.status.generation_of(spec.ref)
        metrics = self._metrics.get(spec.ref)
        variants: tuple[VariantStatus, ...] | None = self._variant_rows.get(spec.ref, ())
        if not spec.variants and spec.ref in self._variant_rows:
            variants = None  # removed from the spec: the status rows go too (once)
        key = (
            variants,
            decision.current_replicas,
            decision.desired_replicas,
            decision.reason,
            decision.numbers.get("held", 0),
            decision.numbers.get("sleepers.sleeping"),
            decision.numbers.get("sleepers.outlook"),
            owner,
            policy,
            generation,
            None if metrics is None else (metrics.available, metrics.reason),
            spec.pause,
            self._role_notes.get(spec.ref),
            regime_name(decision.numbers),
        )
        now = self.clock.now()
        sent = self._status_sent.get(spec.ref)
        if sent is not None and sent[0] == key and now - sent[1] < self.status_every_s:
            return
        conditions = status_conditions(decision, owner, metrics)
        paused = paused_fields(spec.pause)
        if paused is not None:
            conditions = (*conditions, Condition(*_fields(paused)))
        overrides = overrides_condition(policy)
        if overrides is not None:
            conditions = (*conditions, overrides)
        if spec.roles is not None:
            conditions = (*conditions, roles_condition(self._role_notes.get(spec.ref, ())))
        try:
            await self.status.write_status(
                spec.ref,
                decision,
                conditions=conditions,
                observed_generation=generation,
                policy=policy,
                **({"variants": variants} if variants != () else {}),
            )
        except AutoscalerError as err:
            log.warning("status write failed", target=str(spec.ref), error=str(err))
            return
        if variants is None:
            del self._variant_rows[spec.ref]
        self._status_sent[spec.ref] = (key, now)

    async def record_variants(
        self,
        spec: TargetSpec,
        rows: Sequence[VariantStatus],
        applied: Sequence[VariantChange],
        total: tuple[int, int],
    ) -> None:
        """A target with variants: the per-variant rows for the next status write, and an
        Event on each variant's Deployment whose replicas were written (``applied``),
        naming the variant, the move and why (``total``: the model's current -> desired)."""
        self._variant_rows[spec.ref] = tuple(rows)
        emit = getattr(self.recorder, "emit", None)
        if not callable(emit):
            return
        by_name = {v.name: v for v in spec.variants}
        for change in applied:
            variant = by_name.get(change.name)
            if variant is None:
                continue
            up = change.to_replicas > change.from_replicas
            await emit(
                variant_target(spec, variant),
                "VariantScaledUp" if up else "VariantScaledDown",
                f"variant {change.name}: {change.from_replicas} -> {change.to_replicas} "
                f"replicas ({change.reason}: {change.message}); model {total[0]} -> "
                f"{total[1]} replicas",
                warning=False,
            )

    async def record_roles(self, spec: TargetSpec, notes: Sequence[str]) -> None:
        """A target whose variants carry roles: this tick's role notes (the ``Roles``
        condition of the next status write) and an Event on the target for each note
        that is new since the last tick, naming the role and the reason: Warning
        ``RoleHeld`` (a signal missing: held, never zero) and ``RoleGrowthBlocked``
        (Pending pods stop that role's growth only), Normal ``RoleRaised`` (the ratio
        band) and ``RoleLatencyOverSLO``. Steady notes emit nothing again."""
        before = self._role_notes.get(spec.ref, ())
        self._role_notes[spec.ref] = tuple(notes)
        emit = getattr(self.recorder, "emit", None)
        if not callable(emit):
            return
        for note in notes:
            if note in before:
                continue
            reason, warning = _role_event(note)
            if reason is not None:
                await emit(spec, reason, note, warning=warning)

    async def record_metrics(self, spec: TargetSpec, availability: MetricsAvailability) -> None:
        """This tick's ``MetricsAvailable`` (written with the next status) and, while blind,
        a Warning Event ``MetricsUnavailable`` on the target: when the reason changes, else
        once every ``blind_event_every_s``; a Normal ``MetricsAvailable`` when sight returns."""
        before = self._metrics.get(spec.ref)
        self._metrics[spec.ref] = availability
        emit = getattr(self.recorder, "emit", None)
        if not callable(emit):
            return
        if not availability.available:
            if self._blind_events.allow(spec.ref, availability.reason, self.clock.now()):
                await emit(
                    spec,
                    "MetricsUnavailable",
                    f"{availability.reason}: {availability.message}; replicas are held "
                    "(missing data is never read as zero) unless a fallback is set",
                    warning=True,
                )
        elif before is not None and not before.available:
            self._blind_events.reset(spec.ref)
            await emit(spec, "MetricsAvailable", availability.message, warning=False)

    def _policy_of(self, spec: TargetSpec) -> PolicyStatus:
        """``spec.policy_status()``, computed once per spec object (a new spec is a new
        object: the store hands back the same one while the object's spec is unchanged)."""
        cached = self._policy_status.get(spec.ref)
        if cached is not None and cached[0] is spec:
            return cached[1]
        status = spec.policy_status()
        self._policy_status[spec.ref] = (spec, status)
        return status

    def _release_view(self, ref: TargetRef) -> None:
        key = self._view_of.pop(ref, None)
        if key is not None and key not in self._view_of.values():
            self.cache.index.drop_view(*key)

    def forget(self, ref: TargetRef) -> None:
        """Drop what is kept for a target that is no longer scaled (its pod view too,
        unless another target shares it)."""
        self._release_view(ref)
        self._status_sent.pop(ref, None)
        self._policy_status.pop(ref, None)
        self._owner.pop(ref, None)
        self._written.pop(ref, None)
        self._reread.discard(ref)
        self._metrics.pop(ref, None)
        self._blind_events.reset(ref)
        self._variant_rows.pop(ref, None)
        self._role_notes.pop(ref, None)
        for sub in self._variant_refs.pop(ref, frozenset()):
            self.forget(sub)

    async def close(self) -> None:
        for task in list(self._owners_inflight.values()):
            task.cancel()
        if self._own_cache:
            await self.cache.stop()


def _role_event(note: str) -> tuple[str | None, bool]:
    """(Event reason, is a Warning) for a role note; None: no Event (behaviour limits)."""
    if "missing" in note:
        return "RoleHeld", True
    if "Pending" in note:
        return "RoleGrowthBlocked", True
    if "ratio band" in note:
        return "RoleRaised", False
    if "SLO" in note:
        return "RoleLatencyOverSLO", False
    return None, False


def roles_condition(notes: Sequence[str]) -> Condition:
    """``Roles``: False (reason ``RoleHeld``) while a role holds for a missing signal,
    True otherwise; the message lists every role note (or that both roles decide)."""
    held = [n for n in notes if "missing" in n]
    if held:
        return Condition("Roles", "False", "RoleHeld", "; ".join(notes))
    message = "; ".join(notes) or "prefill and decode decide on their own signals"
    return Condition("Roles", "True", "RolesDeciding", message)


def status_conditions(
    decision: Decision, owner: str | None, metrics: MetricsAvailability | None = None
) -> tuple[Condition, ...]:
    """Ready (the spec is valid and the target ours), Active (demand above the activation
    targets, as KEDA's ScaledObject reports it; Unknown, never Idle, when nothing was
    read), Actuating (the decision is applied), and with ``metrics``: MetricsAvailable
    (could any signal be read, else why) and Fallback (``fallback.replicas`` drives the
    count); with prediction on, LoadRegime (the learned regime as its reason: Fleet, Steady
    or Following, and why in the message, `policy.regime.describe`)."""
    active = Condition(*_fields(active_fields(decision.active, metrics)))
    seen: tuple[Condition, ...] = ()
    look = Outlook.from_numbers(decision.numbers)
    if look is not None:  # sleepers wait: kept for a burst expected in their TTL, or not
        seen = (
            Condition(
                SLEEPER_OUTLOOK, "True" if look.keep else "False", _camel(look.reason), look.message
            ),
        )
    if metrics is not None:
        fallback = fallback_fields(decision.reason == Reason.FALLBACK, decision.message)
        seen = (
            Condition("MetricsAvailable", metrics.status, metrics.reason, metrics.message),
            Condition(*_fields(fallback)),
            *seen,
        )
    regime, why = regime_name(decision.numbers), describe_regime(decision.numbers)
    if regime is not None and why is not None:
        seen = (*seen, Condition("LoadRegime", "True", regime, why))
    if owner:
        return (
            Condition("Ready", "False", "OwnedByOtherAutoscaler", owner),
            active,
            Condition("Actuating", "False", "OwnedByOtherAutoscaler", owner),
            *seen,
        )
    return (
        Condition("Ready", "True", "Reconciled", "spec valid; target reconciled"),
        active,
        Condition("Actuating", "True", "Reconciled", decision.message),
        *seen,
    )


SLEEPER_OUTLOOK = "SleeperOutlook"


def _camel(reason: str) -> str:
    """``no-burst-expected`` -> ``NoBurstExpected`` (a condition reason)."""
    return "".join(part.capitalize() for part in reason.split("-"))


def _fields(c: Any) -> tuple[str, str, str, str]:
    return (c.type, c.status, c.reason, c.message)


class PlannerAdapter:
    """`PlannerPort` over `forecast.Planner`: feeds new cold-start samples, signals and
    ready replicas each tick; sizes the warm pool within the policy's lead time."""

    def __init__(self, spec: TargetSpec) -> None:
        prediction = spec.policy.prediction
        # Until capacity is learned, a replica holds what the policy's per-replica
        # (AverageValue) targets say it does.
        per_replica: dict[str, float] = {
            str(m.signal): m.target for m in spec.policy.metrics if m.type == "AverageValue"
        }
        config = (
            PlannerConfig.from_prediction(prediction, capacity_fallback=per_replica)
            if prediction
            else PlannerConfig(capacity_fallback=per_replica)
        )
        self.planner = Planner(config)
        self.spec = spec
        self._samples_seen = 0

    def update(self, t: float, signals: Mapping[str, float], view: TargetView) -> None:
        samples = view.cold_start_samples_s
        total = view.cold_start_total or len(samples)
        if total != self._samples_seen:  # else nothing new (every tick in steady state)
            if total < self._samples_seen:  # a new source of samples: start over
                self._samples_seen = 0
            new = min(total - self._samples_seen, len(samples))
            for duration_s in samples[len(samples) - new :] if new > 0 else ():
                self.planner.observe_pod_ready(t, duration_s)
            self._samples_seen = total
        self.planner.update(t, signals, view.ready_replicas or None)

    def forecast(self, t: float) -> Forecast | None:
        return self.planner.forecast(t)

    def warm_pool_size(self, t: float, replicas_now: int) -> int:
        lead_s = self.spec.policy.warm_pool.lead_time_seconds
        return self.planner.warm_pool_size(t, lead_s, replicas_now)

    def numbers(self) -> Mapping[str, float]:
        return self.planner.numbers()
