"""The REST policy API, the KEDA metrics-api endpoint, health and /metrics (FastAPI).

Readers never call into the control loop: decisions come from `ControllerState`, policies
from the `PolicyStore`. Every write is stored (and durable) before it is acknowledged, and
concurrent writers are detected with ETag / If-Match (412, RFC 9110). An invalid policy is
rejected whole with 422 and one message per problem naming field, value and rule. Bodies
are bounded (413), strict JSON (no Infinity/NaN, bounded nesting) and dry-runs are
rate-limited per client (429), since the API shares its event loop with the control loop.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Annotated, Any, Final, Literal

from fastapi import Depends, FastAPI, Path, Query, Request, Response, Security
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.security import HTTPAuthorizationCredentials
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from autoscaler.api.body import (
    BodyTooDeep,
    SafeJSONResponse,
    clip,
    clip_problems,
    parse_json,
    render_json,
)
from autoscaler.api.limits import BodyLimitMiddleware, DryRunGate, DryRunLimits, client_key
from autoscaler.api.metrics import UNMATCHED_ROUTE, ControllerMetrics
from autoscaler.api.preconditions import IfMatch, MalformedIfMatch, parse_if_match
from autoscaler.api.security import ApiSettings, bearer, check_access
from autoscaler.control.state import HISTORY_LEN, OBSERVATIONS_LEN, ControllerState
from autoscaler.domain import Decision, DecisionState, Observation, TargetRef
from autoscaler.errors import ConfigError
from autoscaler.keda.value import (
    DEFAULT_TARGET_SIZE,
    MAX_TARGET_SIZE,
    NoDataYet,
    TargetUnknown,
    WrongMode,
    read_target,
)
from autoscaler.logging import get_logger
from autoscaler.mergepatch import merge_patch
from autoscaler.policy.core import decide
from autoscaler.policy.schema import Policy, load_policy
from autoscaler.store.base import (
    NotFound,
    PolicyStore,
    PreconditionFailed,
    StoredTarget,
    TargetSpec,
)
from autoscaler.store.file import (
    PolicyFileInvalid,
    target_spec_from_dict,
    target_spec_to_dict,
)

log = get_logger(__name__)

NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"
Namespace = Annotated[str, Path(pattern=NAME_PATTERN, max_length=253, description="namespace")]
Name = Annotated[str, Path(pattern=NAME_PATTERN, max_length=253, description="target name")]
Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(bearer)]

Responses = dict[int | str, dict[str, Any]]
_PROBLEM: dict[str, Any] = {"description": "error", "content": {"application/json": {}}}
_R400: Responses = {400: {**_PROBLEM, "description": "malformed If-Match or JSON nesting"}}
_R401: Responses = {401: {**_PROBLEM, "description": "missing or malformed bearer token"}}
_R403: Responses = {403: {**_PROBLEM, "description": "token not accepted"}}
_R404: Responses = {404: {**_PROBLEM, "description": "no such target"}}
_R412: Responses = {412: {**_PROBLEM, "description": "If-Match does not match the current version"}}
_R413: Responses = {413: {**_PROBLEM, "description": "request body above the size limit"}}
_R429: Responses = {429: {**_PROBLEM, "description": "rate limited; see Retry-After"}}
_R422: Responses = {422: {**_PROBLEM, "description": "invalid input; `problems` lists each"}}
_R503: Responses = {503: {**_PROBLEM, "description": "temporarily unavailable"}}
_READ: Responses = {**_R401, **_R403, **_R404, **_R422}
_WRITE: Responses = {**_READ, **_R400, **_R412, **_R413, **_R503}


# ----------------------------------------------------------------------------- schemas
# Documentation-only models: request bodies are validated by `target_spec_from_dict` /
# `load_policy`, so every error has the same field/value/rule shape as the CRD and CLI.


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ScaleTargetRefDoc(_Doc):
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    name: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=253)
    apiVersion: str = "apps/v1"


class TargetDocument(_Doc):
    """A target: where to act, how, and the policy. namespace/name default to the URL."""

    namespace: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=253)
    name: str | None = Field(default=None, pattern=NAME_PATTERN, max_length=253)
    mode: Literal["direct", "keda", "advisory"] = "direct"
    scaleTargetRef: ScaleTargetRefDoc | None = None
    metricsPort: int = Field(default=8000, ge=1, le=65535)
    metricsPath: str = Field(default="/metrics", pattern=r"^/")
    engine: str = Field(default="auto", min_length=1)
    selector: dict[str, str] | None = None
    policy: Policy = Field(default_factory=Policy)


class DryRunRequest(_Doc):
    """A candidate policy to replay over the target's recent observations."""

    policy: Policy


def _body_schema(model: type[BaseModel], *media_types: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {mt: {"schema": ref} for mt in media_types or ("application/json",)},
        },
    }


def _if_match_param() -> dict[str, Any]:
    return {
        "name": "If-Match",
        "in": "header",
        "required": False,
        "description": (
            'ETag(s) from a previous read, quoted ("12"), or * (must exist); the write '
            "fails with 412 if none matches; weak or malformed values are 400"
        ),
        "schema": {"type": "string"},
    }


def _with_if_match(extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, "parameters": [_if_match_param()]}


# ----------------------------------------------------------------------------- helpers


def _etag(version: str) -> str:
    return f'"{version}"'


def _if_match(request: Request) -> IfMatch | None:
    return parse_if_match(request.headers.getlist("if-match"))


def _not_matched(ref: TargetRef, current: str | None, pre: IfMatch) -> PreconditionFailed:
    where = "does not exist" if current is None else f"is at version {current}"
    return PreconditionFailed(f"target {ref} {where}; If-Match {pre.describe()} does not match")


async def _json_body(request: Request, root: str = "") -> Any:
    # The body limit (413) is enforced while this reads; see BodyLimitMiddleware.
    return parse_json(await request.body(), root=root)


def _status_doc(state: ControllerState, ref: TargetRef) -> dict[str, Any] | None:
    st = state.status(ref)
    if st is None:
        return None
    return {
        "lastDecision": st.last_decision.to_dict() if st.last_decision else None,
        "appliedReplicas": st.applied_replicas,
        "warmPoolReplicas": st.warm_pool_replicas,
        "condition": st.condition,
        "observations": len(st.observations),
    }


_DOC_CACHE: dict[tuple[TargetRef, str], dict[str, Any]] = {}
_DOC_CACHE_MAX = 4096


def _spec_doc(stored: StoredTarget) -> dict[str, Any]:
    """Rendering a policy is the costliest part of a read; versions never change content."""
    key = (stored.spec.ref, stored.version)
    doc = _DOC_CACHE.get(key)
    if doc is None or doc.get("_spec") is not stored.spec:
        if len(_DOC_CACHE) >= _DOC_CACHE_MAX:
            _DOC_CACHE.clear()
        doc = {"_spec": stored.spec, "doc": target_spec_to_dict(stored.spec)}
        _DOC_CACHE[key] = doc
    rendered: dict[str, Any] = doc["doc"]
    return rendered


def _target_doc(stored: StoredTarget, state: ControllerState) -> dict[str, Any]:
    return {
        **_spec_doc(stored),
        "version": stored.version,
        "status": _status_doc(state, stored.spec.ref),
    }


def _problem(status_code: int, detail: str, **extra: Any) -> SafeJSONResponse:
    return SafeJSONResponse({"detail": detail, **extra}, status_code=status_code)


_YIELD_EVERY_S: Final = 0.001  # the GIL is otherwise held up to sys.getswitchinterval()


def replay(
    policy: Policy,
    observations: list[Observation],
    live: Mapping[float, Decision],
    cpu_budget_s: float | None = None,
    *,
    yield_gil: bool = False,
) -> list[dict[str, Any]]:
    """Decide over ``observations`` from a fresh `DecisionState` (run off the loop). With
    ``cpu_budget_s`` it stops once this thread has used that much CPU (fewer decisions
    than observations): a candidate policy's cost is bounded whatever it asks for."""
    state = DecisionState()
    out: list[dict[str, Any]] = []
    started_s = yielded_s = time.thread_time()
    for obs in observations:
        if out and cpu_budget_s is not None and time.thread_time() - started_s > cpu_budget_s:
            break  # at least one decision, so the summary always has something to say
        decision, state = decide(policy, obs, state, obs.t)
        if yield_gil and time.thread_time() - yielded_s > _YIELD_EVERY_S:
            time.sleep(0)  # hand the GIL to the event loop thread if it waits for it
            yielded_s = time.thread_time()
        live_decision = live.get(obs.t)
        out.append(
            {
                **decision.to_dict(),
                "live_desired_replicas": (
                    live_decision.desired_replicas if live_decision is not None else None
                ),
            }
        )
    return out


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

    def read_access(credentials: Credentials) -> None:
        check_access(api_settings, credentials, "read")

    def write_access(credentials: Credentials) -> None:
        check_access(api_settings, credentials, "write")

    can_read = [Depends(read_access)]
    can_write = [Depends(write_access)]

    # -- error mapping ---------------------------------------------------------------

    @app.exception_handler(PolicyFileInvalid)
    async def _file_invalid(_: Request, err: PolicyFileInvalid) -> SafeJSONResponse:
        return _problem(503, str(err), problems=clip_problems(err.problems))

    @app.exception_handler(ConfigError)
    async def _config_error(_: Request, err: ConfigError) -> SafeJSONResponse:
        return _problem(422, "invalid input", problems=clip_problems(err.problems))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, err: RequestValidationError) -> SafeJSONResponse:
        problems = []
        for e in err.errors():
            loc = ".".join(str(p) for p in e.get("loc", ()))
            problems.append(f"{loc}: {e.get('msg')} (value {clip(repr(e.get('input')))})")
        return _problem(422, "invalid input", problems=jsonable_encoder(clip_problems(problems)))

    @app.exception_handler(BodyTooDeep)
    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, err: Exception) -> SafeJSONResponse:
        # RecursionError: belt and braces should any nesting get past parse_json's bound.
        detail = str(err) if isinstance(err, BodyTooDeep) else "input nested too deeply"
        return _problem(400, detail)

    @app.exception_handler(MalformedIfMatch)
    async def _bad_if_match(_: Request, err: MalformedIfMatch) -> SafeJSONResponse:
        return _problem(400, str(err))

    @app.exception_handler(NotFound)
    @app.exception_handler(TargetUnknown)
    async def _not_found(_: Request, err: Exception) -> SafeJSONResponse:
        return _problem(404, str(err))

    @app.exception_handler(PreconditionFailed)
    async def _precondition(_: Request, err: PreconditionFailed) -> SafeJSONResponse:
        return _problem(412, clip(str(err)))  # may quote a client's If-Match

    @app.exception_handler(WrongMode)
    async def _wrong_mode(_: Request, err: WrongMode) -> SafeJSONResponse:
        return _problem(409, str(err))

    @app.exception_handler(NoDataYet)
    async def _no_data(_: Request, err: NoDataYet) -> SafeJSONResponse:
        return SafeJSONResponse({"detail": str(err)}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> SafeJSONResponse:
        return SafeJSONResponse(
            {"detail": err.detail}, status_code=err.status_code, headers=err.headers
        )

    # -- health and metrics ----------------------------------------------------------

    @app.get("/healthz", tags=["health"], responses=_R503)
    async def healthz() -> SafeJSONResponse:
        """Liveness: the control loop completed a tick within HEALTHZ_STALE_TICKS ticks
        (503 with the age otherwise: the loop is stuck or dead, restart the process)."""
        stale = state.loop.stale()
        if stale is not None:
            return SafeJSONResponse({"status": "stale", "problems": [stale]}, status_code=503)
        return SafeJSONResponse({"status": "ok"})

    @app.get("/readyz", tags=["health"], responses=_R503)
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
        body = {"status": "ok" if not problems else "not-ready", "problems": problems}
        return SafeJSONResponse(body, status_code=200 if not problems else 503)

    @app.get(
        "/metrics",
        tags=["health"],
        response_class=Response,
        responses={200: {"content": {CONTENT_TYPE_LATEST.split(";")[0]: {}}}},
    )
    async def prometheus_metrics() -> Response:
        """The controller's own metrics in Prometheus text format."""
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    # -- targets -----------------------------------------------------------------------

    @app.get("/v1/targets", tags=["targets"], dependencies=can_read, responses=_READ)
    async def list_targets(
        namespace: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=253)] = None,
    ) -> SafeJSONResponse:
        """All targets (optionally of one namespace) with their version and status."""
        items = await store.list(namespace)
        return SafeJSONResponse({"items": [_target_doc(t, state) for t in items]})

    @app.get(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_read,
        responses=_READ,
    )
    async def get_target(namespace: Namespace, name: Name) -> SafeJSONResponse:
        stored = await store.get(TargetRef(namespace, name))
        return SafeJSONResponse(_target_doc(stored, state), headers={"ETag": _etag(stored.version)})

    async def _store_spec(
        spec: TargetSpec, if_match: str | None, response: Response, created: bool
    ) -> dict[str, Any]:
        stored = await store.put(spec, if_match=if_match)
        response.headers["ETag"] = _etag(stored.version)
        if created:
            response.status_code = 201
            response.headers["Location"] = f"/v1/targets/{spec.ref.namespace}/{spec.ref.name}"
        log.info("target_stored", target=str(spec.ref), version=stored.version, created=created)
        return _target_doc(stored, state)

    async def _exists(ref: TargetRef) -> StoredTarget | None:
        try:
            return await store.get(ref)
        except NotFound:
            return None

    async def _store_if_match(ref: TargetRef, pre: IfMatch | None) -> str | None:
        """What the store compares: None (unconditional), "*" (exists) or one version; a
        list of ETags is resolved against the current version (the store's own
        conditional write then catches a writer in between)."""
        if pre is None:
            return None
        if pre.any_version:
            return "*"
        if len(pre.versions) == 1:
            return pre.versions[0]
        current = await _exists(ref)
        version = current.version if current is not None else None
        if version is None or not pre.matches(version):
            raise _not_matched(ref, version, pre)
        return version

    @app.put(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_write,
        responses={**_WRITE, 201: {"description": "created"}},
        openapi_extra=_with_if_match(_body_schema(TargetDocument)),
    )
    async def put_target(
        namespace: Namespace, name: Name, request: Request, response: Response
    ) -> dict[str, Any]:
        """Create or replace a target whole. 201 on create, 200 on replace."""
        ref = TargetRef(namespace, name)
        pre = _if_match(request)
        spec = target_spec_from_dict(await _json_body(request), ref=ref)
        if_match = await _store_if_match(ref, pre)
        existed = await _exists(ref)
        return await _store_spec(spec, if_match, response, created=existed is None)

    async def _patch(
        ref: TargetRef,
        request: Request,
        response: Response,
        build: Callable[[StoredTarget, Any], TargetSpec],
        root: str = "",
    ) -> dict[str, Any]:
        pre = _if_match(request)
        patch = await _json_body(request, root)
        if not isinstance(patch, Mapping):
            raise ConfigError("invalid body", ["body: a merge patch must be a JSON object"])
        for _attempt in range(3):
            current = await _exists(ref)
            if current is None:
                if pre is not None:
                    raise _not_matched(ref, None, pre)
                raise NotFound(f"target {ref} not found")
            if pre is not None and not pre.matches(current.version):
                raise _not_matched(ref, current.version, pre)
            spec = build(current, patch)
            try:
                return await _store_spec(spec, current.version, response, created=False)
            except PreconditionFailed:
                if pre is not None and not pre.any_version:
                    raise
                # No If-Match (or "*"): someone wrote in between; re-read and retry.
        raise PreconditionFailed(f"target {ref} kept changing; retry the patch")

    @app.patch(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_write,
        responses=_WRITE,
        openapi_extra=_with_if_match(
            _body_schema(TargetDocument, "application/merge-patch+json", "application/json")
        ),
    )
    async def patch_target(
        namespace: Namespace, name: Name, request: Request, response: Response
    ) -> dict[str, Any]:
        """JSON merge patch (RFC 7386) of the target document; ``null`` resets a field."""
        ref = TargetRef(namespace, name)

        def build(current: StoredTarget, patch: Any) -> TargetSpec:
            doc = merge_patch(target_spec_to_dict(current.spec), patch)
            return target_spec_from_dict(doc, ref=ref)

        return await _patch(ref, request, response, build)

    @app.delete(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_write,
        status_code=204,
        responses=_WRITE,
        openapi_extra={"parameters": [_if_match_param()]},
    )
    async def delete_target(namespace: Namespace, name: Name, request: Request) -> Response:
        ref = TargetRef(namespace, name)
        if_match = await _store_if_match(ref, _if_match(request))
        await store.delete(ref, if_match=if_match)
        metrics.forget(ref)
        log.info("target_deleted", target=str(ref))
        return Response(status_code=204)

    # -- policy sub-resource -----------------------------------------------------------

    @app.get(
        "/v1/targets/{namespace}/{name}/policy",
        tags=["policies"],
        dependencies=can_read,
        responses=_READ,
    )
    async def get_policy(namespace: Namespace, name: Name, response: Response) -> dict[str, Any]:
        stored = await store.get(TargetRef(namespace, name))
        response.headers["ETag"] = _etag(stored.version)
        return stored.spec.policy.dump()

    @app.put(
        "/v1/targets/{namespace}/{name}/policy",
        tags=["policies"],
        dependencies=can_write,
        responses=_WRITE,
        openapi_extra=_with_if_match(_body_schema(Policy)),
    )
    async def put_policy(
        namespace: Namespace, name: Name, request: Request, response: Response
    ) -> dict[str, Any]:
        """Replace the policy of an existing target whole."""
        ref = TargetRef(namespace, name)

        def build(current: StoredTarget, body: Any) -> TargetSpec:
            return _with_policy(current.spec, body)

        doc = await _patch(ref, request, response, build, root="policy")
        return dict(doc["policy"])

    @app.patch(
        "/v1/targets/{namespace}/{name}/policy",
        tags=["policies"],
        dependencies=can_write,
        responses=_WRITE,
        openapi_extra=_with_if_match(
            _body_schema(Policy, "application/merge-patch+json", "application/json")
        ),
    )
    async def patch_policy(
        namespace: Namespace, name: Name, request: Request, response: Response
    ) -> dict[str, Any]:
        """JSON merge patch of the policy only."""
        ref = TargetRef(namespace, name)

        def build(current: StoredTarget, patch: Any) -> TargetSpec:
            return _with_policy(current.spec, merge_patch(current.spec.policy.dump(), patch))

        doc = await _patch(ref, request, response, build, root="policy")
        return dict(doc["policy"])

    # -- decisions ---------------------------------------------------------------------

    def _known(ref: TargetRef) -> None:
        if state.status(ref) is None:
            raise TargetUnknown(f"target {ref} is not known to the control loop")

    @app.get(
        "/v1/targets/{namespace}/{name}/decision",
        tags=["decisions"],
        dependencies=can_read,
        responses=_READ,
    )
    async def latest_decision(namespace: Namespace, name: Name) -> dict[str, Any]:
        """The latest decision with its reason and numbers."""
        ref = TargetRef(namespace, name)
        _known(ref)
        st = state.targets[ref]
        if st.last_decision is None:
            raise TargetUnknown(f"target {ref}: no decision yet")
        return st.last_decision.to_dict()

    @app.get(
        "/v1/targets/{namespace}/{name}/decisions",
        tags=["decisions"],
        dependencies=can_read,
        responses=_READ,
    )
    async def decision_history(
        namespace: Namespace,
        name: Name,
        limit: Annotated[int, Query(ge=1, le=HISTORY_LEN)] = 50,
    ) -> SafeJSONResponse:
        """Recent decisions, newest first (bounded by the loop's history length)."""
        ref = TargetRef(namespace, name)
        _known(ref)
        items = state.targets[ref].recent_decisions(limit)
        return SafeJSONResponse({"items": [d.to_dict() for d in items], "limit": limit})

    @app.post(
        "/v1/targets/{namespace}/{name}/dry-run",
        tags=["decisions"],
        dependencies=can_read,
        responses={
            **_READ,
            **_R400,
            **_R413,
            **_R429,
            409: {**_PROBLEM, "description": "no observations to replay"},
        },
        openapi_extra=_body_schema(DryRunRequest),
    )
    async def dry_run(
        namespace: Namespace,
        name: Name,
        request: Request,
        credentials: Credentials,
        limit: Annotated[int, Query(ge=1, le=OBSERVATIONS_LEN)] = OBSERVATIONS_LEN,
    ) -> Any:
        """Replay a candidate policy over the target's recent observations, oldest first,
        from a fresh decision state. Nothing is applied or stored. The replay is open-loop:
        observed replica counts are what the live policy produced. Rate-limited per client
        (429 + Retry-After); at most ``maxTicks`` observations and ``cpuBudgetSeconds`` of
        CPU are spent (``stoppedEarly`` says when the budget cut the replay short)."""
        ref = TargetRef(namespace, name)
        verified = credentials.credentials if credentials and api_settings.read_token else None
        dry_run_gate.admit(client_key(request.client.host if request.client else None, verified))
        body = await _json_body(request)
        if not isinstance(body, Mapping) or set(body) - {"policy"}:
            raise ConfigError("invalid body", ['body: expected an object {"policy": {...}}'])
        policy_doc = body.get("policy", {})
        if not isinstance(policy_doc, Mapping):
            raise ConfigError(
                "invalid body", [clip(f"policy: value {policy_doc!r} must be an object")]
            )
        try:
            policy = load_policy(policy_doc)
        except ConfigError as err:
            raise ConfigError(str(err), [f"policy.{p}" for p in err.problems]) from None
        _known(ref)
        st = state.targets[ref]
        limits = api_settings.dry_run
        observations = list(st.observations)[-min(limit, limits.max_ticks) :]
        if not observations:
            return _problem(409, f"target {ref}: no recent observations to replay")
        live = {d.t: d for d in st.history}
        content = await dry_run_gate.run_in_thread(
            _dry_run_document, ref, policy, observations, live, limits
        )
        return Response(content, media_type="application/json")

    # -- KEDA metrics-api --------------------------------------------------------------

    @app.get(
        "/v1/keda/{namespace}/{name}",
        tags=["keda"],
        dependencies=can_read,
        responses={**_READ, 409: {**_PROBLEM, "description": "target not in keda mode"}, **_R503},
    )
    async def keda_metrics_api(
        namespace: Namespace,
        name: Name,
        target_size: Annotated[
            float, Query(alias="targetSize", gt=0, le=MAX_TARGET_SIZE, allow_inf_nan=False)
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

    # -- OpenAPI: document the bodies validated by hand ----------------------------------

    def custom_openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        schema = get_openapi(
            title=app.title, version=app.version, description=app.description, routes=app.routes
        )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        for model in (TargetDocument, DryRunRequest, Policy):
            js = model.model_json_schema(by_alias=True, ref_template="#/components/schemas/{model}")
            components.update(js.pop("$defs", {}))
            components[model.__name__] = js
        app.openapi_schema = schema
        return schema

    app.openapi = custom_openapi  # type: ignore[method-assign]

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


def _dry_run_document(
    ref: TargetRef,
    policy: Policy,
    observations: list[Observation],
    live: Mapping[float, Decision],
    limits: DryRunLimits,
) -> bytes:
    """Replay and render in the worker thread: encoding 600 decisions on the event loop
    cost more loop time than the replay itself (the loop only sends the bytes)."""
    decisions = replay(policy, observations, live, limits.cpu_budget_s, yield_gil=limits.yield_gil)
    desired = [int(d["desired_replicas"]) for d in decisions]
    return render_json(
        {
            "target": str(ref),
            "observations": len(decisions),
            "stoppedEarly": len(decisions) < len(observations),
            "limits": {"maxTicks": limits.max_ticks, "cpuBudgetSeconds": limits.cpu_budget_s},
            "order": "oldest-first",
            "summary": {
                "final_desired_replicas": desired[-1],
                "max_desired_replicas": max(desired),
                "min_desired_replicas": min(desired),
                "changes": sum(1 for a, b in itertools.pairwise(desired) if a != b),
            },
            "decisions": decisions,
        }
    )


def _with_policy(spec: TargetSpec, policy_doc: Any) -> TargetSpec:
    if not isinstance(policy_doc, Mapping):
        raise ConfigError("invalid policy", ["policy: must be a JSON object"])
    try:
        policy = load_policy(policy_doc)
    except ConfigError as err:
        raise ConfigError("invalid policy", [f"policy.{p}" for p in err.problems]) from None
    return TargetSpec(
        ref=spec.ref,
        policy=policy,
        scale_target_ref=spec.scale_target_ref,
        mode=spec.mode,
        metrics_port=spec.metrics_port,
        metrics_path=spec.metrics_path,
        engine=spec.engine,
        selector=spec.selector,
    )
