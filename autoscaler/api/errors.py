"""How failures become answers: one exception handler per error type, all answering
``{"detail": ..., "problems": [...]}`` with clipped, JSON-safe text."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from autoscaler.api.body import BodyTooDeep, SafeJSONResponse, clip, clip_problems
from autoscaler.api.preconditions import MalformedIfMatch
from autoscaler.errors import ConfigError
from autoscaler.keda.value import NoDataYet, TargetUnknown, WrongMode
from autoscaler.store.base import NotFound, PreconditionFailed
from autoscaler.store.file import PolicyFileInvalid


def problem(status_code: int, detail: str, **extra: Any) -> SafeJSONResponse:
    return SafeJSONResponse({"detail": detail, **extra}, status_code=status_code)


def install_exception_handlers(app: FastAPI) -> None:
    @app.exception_handler(PolicyFileInvalid)
    async def _file_invalid(_: Request, err: PolicyFileInvalid) -> SafeJSONResponse:
        return problem(503, str(err), problems=clip_problems(err.problems))

    @app.exception_handler(ConfigError)
    async def _config_error(_: Request, err: ConfigError) -> SafeJSONResponse:
        return problem(422, "invalid input", problems=clip_problems(err.problems))

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
