"""``/v1/activator/held``: activators push the requests they hold per target.

``POST`` replaces one activator's counts (keyed by its identity, with a time-to-live);
``GET`` shows what the controller sums. A report needs read access (a read or write token
when one is configured): it can only raise a target toward its own ``maxReplicaCount`` and
keep it from idling, and the controller's NetworkPolicy limits who reaches the port.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Security
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, Field

from autoscaler.api.body import SafeJSONResponse
from autoscaler.api.documents import NAME_PATTERN
from autoscaler.api.security import ApiSettings, bearer, check_access
from autoscaler.control.held import HeldCounts, HeldReport
from autoscaler.domain import TargetRef

MAX_TARGETS = 10_000


class HeldTarget(BaseModel):
    model_config = ConfigDict(extra="forbid")
    namespace: str = Field(pattern=NAME_PATTERN, max_length=253)
    name: str = Field(pattern=NAME_PATTERN, max_length=253)
    held: int = Field(ge=0, le=10_000_000)
    in_flight: int = Field(0, ge=0, le=10_000_000)
    # held requests this activator ever handed to a Ready pod (cumulative)
    forwarded: int = Field(0, ge=0, le=2**62)


class HeldBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    activator: str = Field(min_length=1, max_length=253)
    ttl_s: float = Field(5.0, gt=0, le=300)
    leaving: bool = False
    targets: list[HeldTarget] = Field(default_factory=list, max_length=MAX_TARGETS)


def held_router(
    held: HeldCounts,
    settings: ApiSettings,
    hold_cap: Callable[[TargetRef], int | None] = lambda ref: None,
) -> APIRouter:
    """``hold_cap``: a target's ``scaleToZero.holdCap`` (None: unset), sent back to the
    activator in each answer as ``holdCaps`` for the targets it reported."""
    router = APIRouter(default_response_class=SafeJSONResponse, tags=["activator"])

    def access(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
    ) -> None:
        check_access(settings, credentials, "read")

    @router.post("/v1/activator/held", dependencies=[Depends(access)])
    async def report(body: HeldBody) -> SafeJSONResponse:
        """One activator's held and in-flight counts per target (replaces its last)."""
        risen = held.report(
            body.activator,
            (
                HeldReport(TargetRef(t.namespace, t.name), t.held, t.in_flight, t.forwarded)
                for t in body.targets
            ),
            ttl_s=body.ttl_s,
            leaving=body.leaving,
        )
        caps = {}
        for t in body.targets:
            cap = hold_cap(TargetRef(t.namespace, t.name))
            if cap is not None:
                caps[f"{t.namespace}/{t.name}"] = cap
        return SafeJSONResponse(
            {"accepted": len(body.targets), "poked": [str(r) for r in risen], "holdCaps": caps}
        )

    @router.get("/v1/activator/held", dependencies=[Depends(access)])
    async def show() -> SafeJSONResponse:
        """The live activators' reports."""
        return SafeJSONResponse({"activators": held.snapshot()})

    return router
