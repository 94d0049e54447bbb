"""`SignalPort` over a metrics source (pod scrape or Prometheus)."""

from __future__ import annotations

from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.domain import TargetRef
from autoscaler.metrics.prometheus import WorkloadPods
from autoscaler.metrics.source import MetricSource
from autoscaler.target import Role, TargetSpec


def workload_pods(spec: TargetSpec, role: Role | None = None) -> WorkloadPods:
    """What the Prometheus source reads for a target: its workload's pods; with
    ``variants`` every variant's Deployment's (one model: its signals over all of them,
    docs/metrics.md "Variants and roles"); for a role's key (`roles.role_ref`) the pods
    of that role's variants only."""
    names = [v.scale_target_ref.name for v in spec.variants if role is None or v.role == role] or [
        spec.scale_target_ref.name
    ]
    return WorkloadPods(spec.ref.namespace, names[0], others=tuple(names[1:]))


class SourceSignals:
    """Reads the view's ready pods through ``source``; unread pods stay unknown."""

    def __init__(self, source: MetricSource) -> None:
        self.source = source

    @property
    def source_kind(self) -> str:
        """ "prometheus" or "pods": what a blind target's condition names as the cause."""
        from autoscaler.metrics.prometheus import PrometheusSource

        return "prometheus" if isinstance(self.source, PrometheusSource) else "pods"

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        exclude = getattr(self.source, "exclude_pods", None)
        if callable(exclude) and (view.sleeping_replicas or spec.policy.sleep is not None):
            # sleepers' idle series out of a query-based source (Prometheus): the
            # averages are over the awake pods only, as the pod scrape reads them
            exclude(str(spec.ref), [r.name for r in view.replicas if r.sleeping])
        want_lengths = getattr(self.source, "want_lengths", None)
        if callable(want_lengths):  # variants with a maxModelLen: prompt lengths steer them
            want_lengths(str(spec.ref), any(v.max_model_len is not None for v in spec.variants))
        reading = await self.source.read(str(spec.ref), view.pods, now)
        return SignalReading(
            signals=dict(reading.signals),
            pods_read=reading.pods_read,
            errors=reading.errors,
            rejected=dict(reading.rejected),
            length_buckets=dict(reading.length_buckets),
        )

    def forget(self, ref: TargetRef) -> None:
        """Drop a deleted target's per-target state in the source (scrape histories)."""
        forget = getattr(self.source, "forget", None)
        if callable(forget):
            forget(str(ref))

    async def close(self) -> None:
        await self.source.close()
