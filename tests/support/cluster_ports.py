"""A `ClusterPort` that writes nothing, for loop tests whose cluster only observes."""

from __future__ import annotations

from autoscaler.domain import Decision
from autoscaler.target import TargetSpec


class NoWrites:
    """Scale, warm-pool and record calls accepted and dropped; subclasses add `observe`
    (and override what they check)."""

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        return None

    async def set_warm_pool(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        return None

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        return None
