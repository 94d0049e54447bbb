"""Adapters from the loop's ports to the real parts: Kubernetes (kubernetes-asyncio),
the metrics sources and the forecast planner."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from autoscaler.control.clock import Clock, MonotonicClock
from autoscaler.control.ports import TargetView
from autoscaler.domain import Decision, Forecast, TargetRef
from autoscaler.errors import AutoscalerError, OwnershipError
from autoscaler.forecast.planner import Planner, PlannerConfig
from autoscaler.kube.crd import Condition
from autoscaler.kube.pods import PodWatcher
from autoscaler.kube.scale import ScaleClient
from autoscaler.logging import get_logger
from autoscaler.metrics.source import PodEndpoint
from autoscaler.store.base import TargetSpec

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
    ) -> None: ...


def _selector(match_labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(match_labels.items()))


class KubeCluster:
    """`ClusterPort` over the scale subresource and a pod watcher per target.

    Ownership (an HPA or ScaledObject on the same target) is re-checked every
    ``ownership_check_s`` rather than every tick: it changes rarely and costs two lists.
    """

    def __init__(
        self,
        api: Any,
        *,
        scale: ScaleClient | None = None,
        capacity: CapacityPort | None = None,
        warm_pool: WarmPoolPort | None = None,
        recorder: RecorderPort | None = None,
        status: StatusWriterPort | None = None,
        clock: Clock | None = None,
        ownership_check_s: float = 30.0,
        status_every_s: float = 30.0,
    ) -> None:
        self.api = api
        self.scale_client = scale or ScaleClient(api)
        self.capacity = capacity
        self.warm_pool = warm_pool
        self.recorder = recorder
        self.status = status
        self.status_every_s = status_every_s
        self._status_sent: dict[TargetRef, tuple[tuple[object, ...], float]] = {}
        self.clock = clock or MonotonicClock()
        self.ownership_check_s = ownership_check_s
        self._watchers: dict[TargetRef, PodWatcher] = {}
        self._owner: dict[TargetRef, tuple[float, str | None]] = {}

    async def _watcher(self, spec: TargetSpec, selector: str) -> PodWatcher:
        w = self._watchers.get(spec.ref)
        if w is not None and (w.selector != selector or w.port != spec.metrics_port):
            self._watchers.pop(spec.ref)
            await w.stop()
            w = None
        if w is None:
            w = PodWatcher(
                self.api,
                spec.ref.namespace,
                selector,
                metrics_port=spec.metrics_port,
                metrics_path=spec.metrics_path,
            )
            w.start()
            self._watchers[spec.ref] = w
        return w

    async def _owner_conflict(self, spec: TargetSpec) -> str | None:
        if spec.mode != "direct":
            return None
        now = self.clock.now()
        cached = self._owner.get(spec.ref)
        if cached is not None and now - cached[0] < self.ownership_check_s:
            return cached[1]
        conflict: str | None = None
        try:
            await self.scale_client.check_ownership(
                spec.scale_target_ref.kind, spec.ref.namespace, spec.scale_target_ref.name
            )
        except OwnershipError as err:
            conflict = str(err)
        self._owner[spec.ref] = (now, conflict)
        return conflict

    async def observe(self, spec: TargetSpec) -> TargetView:
        target = spec.scale_target_ref
        info = await self.scale_client.get_scale(target.kind, spec.ref.namespace, target.name)
        selector = _selector(spec.selector) if spec.selector else info.selector
        snap = (await self._watcher(spec, selector)).snapshot()
        pods = tuple(
            PodEndpoint(p.name, p.metrics_url) for p in snap.pods if p.ready and p.metrics_url
        )
        capacity = None
        if self.capacity is not None and spec.policy.capacity.enforce:
            capacity = await self.capacity.max_replicas(spec, info.spec_replicas)
        return TargetView(
            spec_replicas=info.spec_replicas,
            # Until the watch has synced we do not know which pods are ready: 0 read pods
            # makes every signal missing, so the core holds.
            ready_replicas=snap.ready if snap.synced else 0,
            resource_version=info.resource_version,
            pending_replicas=snap.pending,
            pods=pods if snap.synced else (),
            capacity_max_replicas=capacity,
            cold_start_samples_s=snap.cold_start_samples_s,
            owner_conflict=await self._owner_conflict(spec),
        )

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        target = spec.scale_target_ref
        await self.scale_client.set_replicas(
            target.kind, spec.ref.namespace, target.name, replicas, resource_version
        )

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        if self.warm_pool is not None:
            await self.warm_pool.resize(spec, replicas, peak)

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        """Events for applied changes; the CRD status when the outcome changes (or every
        ``status_every_s``), so a steady target costs no API writes per tick."""
        if self.recorder is not None:
            await self.recorder.record(spec, decision, applied)
        if self.status is None:
            return
        owner = self._owner.get(spec.ref, (0.0, None))[1]
        key = (decision.current_replicas, decision.desired_replicas, decision.reason, owner)
        now = self.clock.now()
        sent = self._status_sent.get(spec.ref)
        if sent is not None and sent[0] == key and now - sent[1] < self.status_every_s:
            return
        condition = (
            Condition("Actuating", "False", "OwnedByOtherAutoscaler", owner)
            if owner
            else Condition("Actuating", "True", "Reconciled", decision.message)
        )
        try:
            await self.status.write_status(spec.ref, decision, conditions=(condition,))
        except AutoscalerError as err:
            log.warning("status write failed", target=str(spec.ref), error=str(err))
            return
        self._status_sent[spec.ref] = (key, now)

    async def close(self) -> None:
        for w in self._watchers.values():
            await w.stop()
        self._watchers.clear()


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
        if len(samples) < self._samples_seen:  # the watcher's window rolled over
            self._samples_seen = 0
        for duration_s in samples[self._samples_seen :]:
            self.planner.observe_pod_ready(t, duration_s)
        self._samples_seen = len(samples)
        self.planner.update(t, signals, view.ready_replicas or None)

    def forecast(self, t: float) -> Forecast | None:
        return self.planner.forecast(t)

    def warm_pool_size(self, t: float, replicas_now: int) -> int:
        lead_s = self.spec.policy.warm_pool.lead_time_seconds
        return self.planner.warm_pool_size(t, lead_s, replicas_now)

    def numbers(self) -> Mapping[str, float]:
        return self.planner.numbers()
