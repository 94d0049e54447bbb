"""The activator's HTTP side (aiohttp server + aiohttp client): an OpenAI-compatible front
for many models that holds requests while a model has no Ready replica.

Routing, in order: a configured Host, a configured path prefix (stripped before
forwarding), then the JSON body's ``model`` field (as KubeAI routes). Unknown model: 404
listing the served models; ``GET /v1/models`` lists them. Then the target's `Gate` gives
an endpoint (at once when warm, after holding when cold), and the request is forwarded;
the response is passed through chunk by chunk (``iter_any``), so streamed tokens reach the
client as the pod sends them.

While held, a streaming client (``"stream": true``) gets ``: held`` SSE comments every
``heartbeatS`` so proxies do not cut an idle connection; once those headers are sent, a
later refusal arrives as an SSE ``data: {"error": ...}`` event (the status is already 200).
A pod that refuses the connection is skipped for a second and the request is held again:
the activator never answers 502/504 for a cold start.

The activator's own routes live under ``/-/`` (healthz, readyz) and ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import aiohttp
from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    exposition,
    generate_latest,
)

from autoscaler.activator.config import ActivatorConfig, TargetConfig
from autoscaler.activator.gate import Gate, Rejected
from autoscaler.logging import get_logger

log = get_logger(__name__)

MAX_BODY_BYTES: Final = 32 * 1024 * 1024
# RFC 9110 hop-by-hop headers, and those the client session sets itself.
_HOP: Final = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailers",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_HELD_COMMENT: Final = b": held\n\n"


class ActivatorMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.held = Gauge(
            "llm_activator_held_requests",
            "Requests held because the target has no Ready replica with room.",
            ["target"],
            registry=r,
        )
        self.in_flight = Gauge(
            "llm_activator_in_flight_requests",
            "Requests forwarded and not finished (streams included).",
            ["target"],
            registry=r,
        )
        self.ready = Gauge(
            "llm_activator_ready_endpoints", "Ready endpoints per target.", ["target"], registry=r
        )
        self.requests = Counter(
            "llm_activator_requests",
            "Requests answered, by target and outcome.",
            ["target", "outcome"],
            registry=r,
        )
        self.hold_seconds = Histogram(
            "llm_activator_hold_seconds",
            "How long forwarded requests were held (the cold start a client saw).",
            ["target"],
            buckets=(0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200),
            registry=r,
        )


@dataclass
class Route:
    target: TargetConfig
    gate: Gate


@dataclass
class Activator:
    """Gates per target, the router and the proxy. `app()` builds the aiohttp app."""

    config: ActivatorConfig
    metrics: ActivatorMetrics = field(default_factory=ActivatorMetrics)
    gates: dict[str, Gate] = field(default_factory=dict)  # target key -> gate
    on_counts_change: Any = None  # Callable[[], None]: the reporter's `changed`
    _by_model: dict[str, Route] = field(default_factory=dict)
    _by_host: dict[str, Route] = field(default_factory=dict)
    _by_prefix: list[tuple[str, Route]] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None
    _draining: bool = False

    def __post_init__(self) -> None:
        d = self.config.defaults
        for t in self.config.targets:
            gate = self.gates.get(t.key)
            if gate is None:
                gate = self.gates[t.key] = Gate(
                    name=t.key,
                    cap=self.config.hold_cap(t),
                    timeout_s=self.config.hold_timeout_s(t),
                    max_per_replica=self.config.max_concurrency(t),
                    retry_after_s=d.retry_after_s,
                    on_change=self._gate_changed,
                )
            route = Route(t, gate)
            self._by_model[t.model] = route
            for h in t.hosts:
                self._by_host[h.lower()] = route
            if t.path_prefix:
                self._by_prefix.append((t.path_prefix.rstrip("/"), route))
        self._by_prefix.sort(key=lambda p: -len(p[0]))

    def set_hold_caps(self, caps: Mapping[str, int]) -> None:
        """The controller's answer to a report: a target whose LLMAutoscaler sets
        ``scaleToZero.holdCap`` holds up to that many; the others keep this file's cap."""
        for t in self.config.targets:
            gate = self.gates.get(t.key)
            if gate is not None:
                gate.cap = caps.get(t.key, self.config.hold_cap(t))

    # ------------------------------------------------------------------ counts
    def counts(self) -> dict[str, tuple[int, int, int]]:
        """target key -> (held, in flight): what the reporter pushes."""
        return {
            k: (g.held, g.in_flight, g.stats.forwarded_after_hold) for k, g in self.gates.items()
        }

    def _gate_changed(self, gate: Gate) -> None:
        self.metrics.held.labels(gate.name).set(gate.held)
        self.metrics.in_flight.labels(gate.name).set(gate.in_flight)
        if self.on_counts_change is not None:
            self.on_counts_change()

    def set_ready(self, key: str, ready: list[str]) -> None:
        gate = self.gates.get(key)
        if gate is not None:
            gate.set_endpoints(ready)
            self.metrics.ready.labels(key).set(len(gate.ready))

    @property
    def models(self) -> list[str]:
        return sorted(self._by_model)

    # ------------------------------------------------------------------ app
    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/-/healthz", self._healthz)
        app.router.add_get("/-/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_route("*", "/{tail:.*}", self._proxy)
        app.on_startup.append(self._startup)
        app.on_cleanup.append(self._cleanup)
        return app

    async def _startup(self, app: web.Application) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=30),
                auto_decompress=False,
            )

    async def _cleanup(self, app: web.Application) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def drain(self) -> None:
        """Shutdown: held requests get a retryable 503 at once; in-flight ones finish."""
        self._draining = True
        for gate in self.gates.values():
            gate.close()

    async def _models(self, request: web.Request) -> web.Response:
        data = [{"id": m, "object": "model", "owned_by": "llm-autoscaler"} for m in self.models]
        return web.json_response({"object": "list", "data": data})

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    async def _readyz(self, request: web.Request) -> web.Response:
        if self._draining:
            return web.json_response({"ready": False, "reason": "draining"}, status=503)
        return web.json_response({"ready": True})

    async def _metrics(self, request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": exposition.CONTENT_TYPE_LATEST})

    # ------------------------------------------------------------------ routing
    def _route(self, request: web.Request, body: bytes) -> tuple[Route, str, bool] | web.Response:
        """(route, upstream path, streaming?), or the error response to send."""
        path = request.path_qs
        parsed: Any = None
        if body and request.method == "POST":
            try:
                parsed = json.loads(body)
            except ValueError:
                parsed = None
        stream = isinstance(parsed, dict) and parsed.get("stream") is True
        host = (request.host or "").split(":")[0].lower()
        if host in self._by_host:
            return self._by_host[host], path, stream
        for prefix, route in self._by_prefix:
            if request.path == prefix or request.path.startswith(prefix + "/"):
                return route, path[len(prefix) :] or "/", stream
        if not isinstance(parsed, dict):
            return _error(400, "the body must be a JSON object with a 'model' field", "bad_body")
        model = parsed.get("model")
        if not isinstance(model, str) or not model:
            return _error(400, "field 'model': missing or not a string", "missing_model")
        found = self._by_model.get(model)
        if found is None:
            return _error(
                404,
                f"model {model[:200]!r} is not served here; served models: {self.models}",
                "model_not_found",
                models=self.models,
            )
        return found, path, stream

    # ------------------------------------------------------------------ proxy
    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        routed = self._route(request, body)
        if isinstance(routed, web.Response):
            return routed
        route, path, stream = routed
        gate, name = route.gate, route.target.key
        held = _Held()
        t0 = time.monotonic()
        while True:  # until forwarded (a refused connection holds the request again)
            try:
                if stream:
                    ep, held_s = await self._acquire_streaming(request, gate, held)
                else:
                    ep, held_s = await gate.acquire()
            except Rejected as err:
                outcome = "rejected_full" if err.status == 429 else "rejected_unavailable"
                self.metrics.requests.labels(name, outcome).inc()
                if held.response is not None:
                    await _sse_error(held.response, err)
                    return held.response
                return _error(
                    err.status, str(err), type(err).__name__, retry_after_s=err.retry_after_s
                )
            waited_s = time.monotonic() - t0
            try:
                resp = await self._forward(request, ep, path, body, held.response, waited_s)
            except _Refused:
                gate.suspect(ep)
                continue
            finally:
                gate.release(ep)
            if held_s > 0 or held.response is not None:
                self.metrics.hold_seconds.labels(name).observe(waited_s)
            self.metrics.requests.labels(name, "forwarded").inc()
            return resp

    async def _acquire_streaming(
        self, request: web.Request, gate: Gate, held: _Held
    ) -> tuple[str, float]:
        """Acquire, sending ``: held`` SSE comments every heartbeat while held. A client
        gone (a write fails, or the handler is cancelled) cancels the acquire: its place
        in the queue is freed."""
        task = asyncio.ensure_future(gate.acquire())
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.config.defaults.heartbeat_s)
                if done:
                    return task.result()
                if held.response is None:  # commit to an SSE stream to keep the client
                    held.response = web.StreamResponse(
                        status=200,
                        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"},
                    )
                    await held.response.prepare(request)
                await held.response.write(_HELD_COMMENT)
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Rejected):
                    await task

    async def _forward(
        self,
        request: web.Request,
        ep: str,
        path: str,
        body: bytes,
        held_resp: web.StreamResponse | None,
        waited_s: float,
    ) -> web.StreamResponse:
        assert self._session is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        peer = request.remote or ""
        prior = request.headers.get("X-Forwarded-For")
        headers["X-Forwarded-For"] = f"{prior}, {peer}" if prior else peer
        try:
            upstream = await self._session.request(
                request.method,
                f"http://{ep}{path}",
                data=body if body else None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
                allow_redirects=False,
            )
        except (aiohttp.ClientConnectorError, aiohttp.ServerDisconnectedError) as err:
            log.info("endpoint refused; holding again", endpoint=ep, error=str(err)[:200])
            raise _Refused from None
        async with upstream:
            if held_resp is not None:
                # Headers already sent (heartbeats): pass the body through as it comes.
                async for chunk in upstream.content.iter_any():
                    await held_resp.write(chunk)
                await held_resp.write_eof()
                return held_resp
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP}
            if waited_s > 0.001:
                out_headers["X-Activator-Held-Seconds"] = f"{waited_s:.3f}"
            resp = web.StreamResponse(status=upstream.status, headers=out_headers)
            if upstream.content_length is not None:
                resp.content_length = upstream.content_length
            await resp.prepare(request)
            async for chunk in upstream.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp


class _Refused(Exception):
    """The endpoint refused the connection: hold the request again."""


@dataclass(slots=True)
class _Held:
    """The SSE response a held streaming request already committed to (heartbeats sent)."""

    response: web.StreamResponse | None = None


async def _sse_error(resp: web.StreamResponse, err: Rejected) -> None:
    payload = {"error": {"message": str(err), "type": type(err).__name__, "code": err.status}}
    with contextlib.suppress(ConnectionError, aiohttp.ClientConnectionResetError):
        await resp.write(b"data: " + json.dumps(payload).encode() + b"\n\n")
        await resp.write_eof()


def _error(
    status: int,
    message: str,
    code: str,
    *,
    retry_after_s: int | None = None,
    models: list[str] | None = None,
) -> web.Response:
    body: dict[str, Any] = {"error": {"message": message, "type": code, "code": status}}
    if models is not None:
        body["models"] = models
    headers: Mapping[str, str] = {"Retry-After": str(retry_after_s)} if retry_after_s else {}
    return web.json_response(body, status=status, headers=headers)
