"""What every router shares: the process objects it reads (`ApiContext`), the access
dependencies, the path parameter types and the request-body reader."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Path, Request, Security
from fastapi.security import HTTPAuthorizationCredentials

from autoscaler.api.body import check_json_media_type, parse_json
from autoscaler.api.documents import NAME_PATTERN
from autoscaler.api.limits import DryRunGate
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.api.security import ApiSettings, bearer, check_access
from autoscaler.control.state import ControllerState
from autoscaler.store.base import PolicyStore

Namespace = Annotated[str, Path(pattern=NAME_PATTERN, max_length=253, description="namespace")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, max_length=253, description="target name")]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]


@dataclass(frozen=True)
class ApiContext:
    """The objects the routes read; built once per app by `create_app`."""

    state: ControllerState
    store: PolicyStore
    settings: ApiSettings
    metrics: ControllerMetrics
    dry_run_gate: DryRunGate
    can_read: list[Any]
    can_write: list[Any]


def make_context(
    state: ControllerState,
    store: PolicyStore,
    settings: ApiSettings,
    metrics: ControllerMetrics,
    dry_run_gate: DryRunGate,
) -> ApiContext:
    def read_access(credentials: Credentials) -> None:
        check_access(settings, credentials, "read")

    def write_access(credentials: Credentials) -> None:
        check_access(settings, credentials, "write")

    return ApiContext(
        state=state,
        store=store,
        settings=settings,
        metrics=metrics,
        dry_run_gate=dry_run_gate,
        can_read=[Depends(read_access)],
        can_write=[Depends(write_access)],
    )


async def json_body(request: Request, root: str = "") -> Any:
    # The body limit (413) is enforced while this reads; see BodyLimitMiddleware.
    check_json_media_type(request.headers.get("content-type"))
    return parse_json(await request.body(), root=root)
