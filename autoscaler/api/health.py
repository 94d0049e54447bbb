"""Liveness (/healthz), readiness (/readyz) and the controller's own /metrics."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from autoscaler.api.body import SafeJSONResponse
from autoscaler.api.context import ApiContext
from autoscaler.api.documents import R503


def health_router(ctx: ApiContext) -> APIRouter:
    state, store, metrics = ctx.state, ctx.store, ctx.metrics
    router = APIRouter(default_response_class=SafeJSONResponse)

    @router.get("/healthz", tags=["health"], responses=R503)
    async def healthz() -> SafeJSONResponse:
        """Liveness: the control loop completed a tick within HEALTHZ_STALE_TICKS ticks
        (503 with the age otherwise: the loop is stuck or dead, restart the process)."""
        stale = state.loop.stale()
        if stale is not None:
            return SafeJSONResponse({"status": "stale", "problems": [stale]}, status_code=503)
        return SafeJSONResponse({"status": "ok"})

    @router.get("/readyz", tags=["health"], responses=R503)
    async def readyz() -> SafeJSONResponse:
        """Readiness: the loop has completed a tick, is not stalled or restarting, and the
        policy store answers. Answered from memory (a store that follows the API server
        reports its watch's health; no LIST per probe), so probes cost the same at any N."""
        problems: list[str] = []
        if not state.ready:
            problems.append("control loop has not completed its first tick")
        if state.loop.error is not None:
            problems.append(f"control loop restarting after an error: {state.loop.error}")
        stale = state.loop.stale()
        if stale is not None:
            problems.append(f"control loop stalled: {stale}")
        health = getattr(store, "health", None)
        try:
            if callable(health):
                if (problem := health()) is not None:
                    problems.append(f"policy store: {problem}")
            else:  # a local store (file): reading it costs no API request
                await store.list()
        except Exception as err:  # any store failure means not ready; reported, not raised
            problems.append(f"policy store: {type(err).__name__}: {err}")
        body: dict[str, object] = {
            "status": "ok" if not problems else "not-ready",
            "problems": problems,
            "leader": state.is_leader,
        }
        if state.leadership is not None:  # which shards (Leases) this replica holds
            body["leadership"] = state.leadership
        return SafeJSONResponse(body, status_code=200 if not problems else 503)

    @router.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}},
    )
    async def prometheus_metrics() -> Response:
        """The controller's own metrics in Prometheus text format.

        Rendered in a worker thread: at 1,000 targets the page is ~1.3-2 MB, 90-190 ms
        of CPU to build (`benchmarks/bench_metrics_page.py`), which on the event loop
        would stall every tick, watch and gRPC answer that long at each scrape. The
        collectors only read (snapshots of dicts, frozen decisions, prometheus_client's
        locked values), so they are safe to run beside the loop."""
        body = await asyncio.to_thread(generate_latest, metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    return router
