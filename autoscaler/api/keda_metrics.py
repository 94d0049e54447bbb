"""KEDA's ``metrics-api`` trigger endpoint: the loop's desired replicas as a metric value."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from autoscaler.api.body import SafeJSONResponse
from autoscaler.api.context import ApiContext, Name, Namespace
from autoscaler.api.documents import PROBLEM, R503, READ
from autoscaler.domain import TargetRef
from autoscaler.keda.value import (
    DEFAULT_TARGET_SIZE,
    MAX_TARGET_SIZE,
    MIN_TARGET_SIZE,
    read_target,
)


def keda_router(ctx: ApiContext) -> APIRouter:
    state = ctx.state
    router = APIRouter(default_response_class=SafeJSONResponse)

    @router.get(
        "/v1/keda/{namespace}/{name}",
        tags=["keda"],
        dependencies=ctx.can_read,
        responses={**READ, 409: {**PROBLEM, "description": "target not in keda mode"}, **R503},
    )
    async def keda_metrics_api(
        namespace: Namespace,
        name: Name,
        target_size: Annotated[
            float,
            Query(alias="targetSize", ge=MIN_TARGET_SIZE, le=MAX_TARGET_SIZE, allow_inf_nan=False),
        ] = DEFAULT_TARGET_SIZE,
    ) -> dict[str, Any]:
        """For KEDA's ``metrics-api`` trigger: ``valueLocation: value`` with
        ``targetValue`` equal to ``targetSize``; value = desiredReplicas * targetSize."""
        reading = read_target(state, TargetRef(namespace, name), target_size)
        return {
            "value": reading.value,
            "desiredReplicas": reading.desired_replicas,
            "currentReplicas": reading.current_replicas,
            "targetSize": reading.target_size,
            "active": reading.active,
            "activeValue": 1 if reading.active else 0,
            "reason": reading.reason,
            "held": reading.held,
        }

    return router
