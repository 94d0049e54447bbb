"""How failures become answers: one exception handler per error type, all answering
``{"detail": ..., "problems": [...]}`` with clipped, JSON-safe text."""

from __future__ import annotations

import math
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from autoscaler.api.body import (
    BodyTooDeep,
    SafeJSONResponse,
    UnsupportedMediaType,
    clip,
    clip_problems,
)
from autoscaler.api.preconditions import MalformedIfMatch
from autoscaler.errors import AutoscalerError, ConfigError, TemporaryError
from autoscaler.keda.value import NoDataYet, TargetUnknown, WrongMode
from autoscaler.logging import get_logger
from autoscaler.store.base import NotFound, PreconditionFailed
from autoscaler.store.errors import ClusterForbidden, ClusterRejected
from autoscaler.store.file import PolicyFileInvalid

log = get_logger(__name__)


def problem(status_code: int, detail: str, **extra: Any) -> SafeJSONResponse:
    return SafeJSONResponse({"detail": detail, **extra}, status_code=status_code)


def install_exception_handlers(app: FastAPI) -> None:
    @app.exception_handler(PolicyFileInvalid)
    async def _file_invalid(_: Request, err: PolicyFileInvalid) -> SafeJSONResponse:
        return problem(503, str(err), problems=clip_problems(err.problems))

    @app.exception_handler(ConfigError)
    async def _config_error(_: Request, err: ConfigError) -> SafeJSONResponse:
        return problem(422, "invalid input", problems=clip_problems(err.problems))

    @app.exception_handler(ClusterRejected)
    async def _cluster_rejected(_: Request, err: ClusterRejected) -> SafeJSONResponse:
        return problem(
            422,
            "invalid input: the Kubernetes API server refused the document",
            problems=clip_problems(err.problems),
        )

    @app.exception_handler(ClusterForbidden)
    async def _cluster_forbidden(_: Request, err: ClusterForbidden) -> SafeJSONResponse:
        log.warning("api_cluster_forbidden", verb=err.verb, resource=err.resource)
        return problem(503, clip(str(err)), verb=err.verb, resource=err.resource)

    @app.exception_handler(TemporaryError)
    async def _cluster_unavailable(_: Request, err: TemporaryError) -> SafeJSONResponse:
        seconds = max(1, math.ceil(err.retry_after_s or 1.0))
        return SafeJSONResponse(
            {"detail": clip(f"{err}; retry after {seconds} s")},
            status_code=503,
            headers={"Retry-After": str(seconds)},
        )

    @app.exception_handler(AutoscalerError)
    async def _upstream_error(_: Request, err: AutoscalerError) -> SafeJSONResponse:
        # Any other failure the store reports is the cluster's or the file's, never the
        # client's: 502 with the reason, not 500.
        log.warning("api_store_error", error=clip(str(err)))
        return problem(502, clip(str(err)))

    @app.exception_handler(UnsupportedMediaType)
    async def _media_type(_: Request, err: UnsupportedMediaType) -> SafeJSONResponse:
        return problem(415, str(err))

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, err: RequestValidationError) -> SafeJSONResponse:
        problems = []
        for e in err.errors():
            loc = ".".join(str(p) for p in e.get("loc", ()))
            problems.append(f"{loc}: {e.get('msg')} (value {clip(repr(e.get('input')))})")
        return problem(422, "invalid input", problems=jsonable_encoder(clip_problems(problems)))

    @app.exception_handler(BodyTooDeep)
    @app.exception_handler(RecursionError)
    async def _too_deep(_: Request, err: Exception) -> SafeJSONResponse:
        # RecursionError: belt and braces should any nesting get past parse_json's bound.
        detail = str(err) if isinstance(err, BodyTooDeep) else "input nested too deeply"
        return problem(400, detail)

    @app.exception_handler(MalformedIfMatch)
    async def _bad_if_match(_: Request, err: MalformedIfMatch) -> SafeJSONResponse:
        return problem(400, str(err))

    @app.exception_handler(NotFound)
    @app.exception_handler(TargetUnknown)
    async def _not_found(_: Request, err: Exception) -> SafeJSONResponse:
        return problem(404, str(err))

    @app.exception_handler(PreconditionFailed)
    async def _precondition(_: Request, err: PreconditionFailed) -> SafeJSONResponse:
        return problem(412, clip(str(err)))  # may quote a client's If-Match

    @app.exception_handler(WrongMode)
    async def _wrong_mode(_: Request, err: WrongMode) -> SafeJSONResponse:
        return problem(409, str(err))

    @app.exception_handler(NoDataYet)
    async def _no_data(_: Request, err: NoDataYet) -> SafeJSONResponse:
        return SafeJSONResponse({"detail": str(err)}, status_code=503, headers={"Retry-After": "1"})

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, err: StarletteHTTPException) -> SafeJSONResponse:
        return SafeJSONResponse(
            {"detail": err.detail}, status_code=err.status_code, headers=err.headers
        )
