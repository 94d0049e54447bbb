"""The REST policy API, the KEDA metrics-api endpoint, health and /metrics (FastAPI).

Readers never call into the control loop: decisions come from `ControllerState`, policies
from the `PolicyStore`. Every write is stored (and durable) before it is acknowledged, and
concurrent writers are detected with ETag / If-Match (412, RFC 9110). An invalid policy is
rejected whole with 422 and one message per problem naming field, value and rule. Bodies
are bounded (413), strict JSON (no Infinity/NaN, bounded nesting) and dry-runs are
rate-limited per client (429), since the API shares its event loop with the control loop.

This module composes the app; one router per resource: `targets` (targets and policies),
`decisions` (latest, history, dry-run), `keda_metrics` and `health`; the shared pieces are
`documents` (body models, error responses, OpenAPI), `errors` (exception handlers) and
`context` (what the routes read, access dependencies).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from prometheus_client import CollectorRegistry

from autoscaler.api.body import SafeJSONResponse
from autoscaler.api.context import make_context
from autoscaler.api.decisions import decisions_router
from autoscaler.api.documents import install_openapi
from autoscaler.api.errors import install_exception_handlers
from autoscaler.api.health import health_router
from autoscaler.api.keda_metrics import keda_router
from autoscaler.api.limits import BodyLimitMiddleware, DryRunGate
from autoscaler.api.metrics import UNMATCHED_ROUTE, ControllerMetrics
from autoscaler.api.security import ApiSettings
from autoscaler.api.targets import targets_router
from autoscaler.control.state import ControllerState
from autoscaler.store.base import PolicyStore

# ----------------------------------------------------------------------------- middleware


class _LatencyMiddleware:
    """Pure ASGI (no BaseHTTPMiddleware buffering): request latency by route template."""

    def __init__(self, app: Any, metrics: ControllerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(
        self,
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status_code = 500

        async def send_wrapper(message: MutableMapping[str, Any]) -> None:
            nonlocal status_code
            if message["type"] == "http.response.start":
                status_code = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            route = scope.get("route")
            template = getattr(route, "path", None) or UNMATCHED_ROUTE
            self.metrics.observe_request(
                str(scope.get("method", "")), template, status_code, time.perf_counter() - start
            )


# ----------------------------------------------------------------------------- app


def create_app(
    state: ControllerState,
    store: PolicyStore,
    settings: ApiSettings | None = None,
    registry: CollectorRegistry | None = None,
    *,
    metrics: ControllerMetrics | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> FastAPI:
    """Build the app. Pass the loop's `ControllerMetrics` (or its registry) so /metrics
    serves the loop's metrics too; ``app.state.metrics`` is the instance in use.
    ``clock`` (monotonic seconds) drives the dry-run rate limit."""
    api_settings = settings if settings is not None else ApiSettings()
    if metrics is None:
        metrics = ControllerMetrics(registry)
    app = FastAPI(
        title="llm-autoscaler",
        version="1",
        description="Policies, decisions and KEDA endpoints of the llm-autoscaler controller.",
        default_response_class=SafeJSONResponse,
    )
    app.state.api_settings = api_settings
    app.state.metrics = metrics
    app.state.controller_state = state
    app.state.store = store
    dry_run_gate = DryRunGate(api_settings.dry_run, clock)
    app.state.dry_run_gate = dry_run_gate

    ctx = make_context(state, store, api_settings, metrics, dry_run_gate)
    install_exception_handlers(app)
    for router in (health_router, targets_router, decisions_router, keda_router):
        app.include_router(router(ctx))
    install_openapi(app)

    if api_settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(api_settings.cors_origins),
            allow_methods=["GET", "PUT", "PATCH", "DELETE", "POST"],
            allow_headers=["Authorization", "Content-Type", "If-Match"],
            expose_headers=["ETag"],
        )
    app.add_middleware(BodyLimitMiddleware, max_body_bytes=api_settings.max_body_bytes)
    app.add_middleware(_LatencyMiddleware, metrics=metrics)
    return app
