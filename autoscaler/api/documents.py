"""What the API documents: the request-body models, the error responses and the OpenAPI
document (bodies are validated by hand, so their schemas are added to it here).

The models are documentation only: request bodies are validated by `target_spec_from_dict`
/ `load_policy`, so every error has the same field/value/rule shape as the CRD and CLI.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from pydantic import BaseModel, ConfigDict, Field

from autoscaler.policy.document import DEFAULT_PROFILE, PROFILE_FIELD, profile_names
from autoscaler.policy.schema import Policy

NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$"

Responses = dict[int | str, dict[str, Any]]
PROBLEM: dict[str, Any] = {"description": "error", "content": {"application/json": {}}}
R400: Responses = {400: {**PROBLEM, "description": "malformed If-Match or JSON nesting"}}
R401: Responses = {401: {**PROBLEM, "description": "missing or malformed bearer token"}}
R403: Responses = {403: {**PROBLEM, "description": "token not accepted"}}
R404: Responses = {404: {**PROBLEM, "description": "no such target"}}
R412: Responses = {412: {**PROBLEM, "description": "If-Match does not match the current version"}}
R413: Responses = {413: {**PROBLEM, "description": "request body above the size limit"}}
R429: Responses = {429: {**PROBLEM, "description": "rate limited; see Retry-After"}}
R422: Responses = {422: {**PROBLEM, "description": "invalid input; `problems` lists each"}}
R503: Responses = {503: {**PROBLEM, "description": "temporarily unavailable"}}
READ: Responses = {**R401, **R403, **R404, **R422}
WRITE: Responses = {**READ, **R400, **R412, **R413, **R503}


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
    policy: Policy = Field(default_factory=Policy)  # a document: see _document_profiles


class DryRunRequest(_Doc):
    """A candidate policy to replay over the target's recent observations."""

    policy: Policy


def body_schema(model: type[BaseModel], *media_types: str) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{model.__name__}"}
    return {
        "requestBody": {
            "required": True,
            "content": {mt: {"schema": ref} for mt in media_types or ("application/json",)},
        },
    }


def if_match_param() -> dict[str, Any]:
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


def with_if_match(extra: dict[str, Any]) -> dict[str, Any]:
    return {**extra, "parameters": [if_match_param()]}


def install_openapi(app: FastAPI) -> None:
    """Document the bodies validated by hand (the routes read the raw request)."""

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
        _document_profiles(components)
        app.openapi_schema = schema
        return schema

    app.openapi = custom_openapi  # type: ignore[method-assign]


# Policy blocks merged field by field over the profile's (autoscaler.policy.document):
# their schema defaults are not what an unset field gets, so they are not shown.
_MERGED_BLOCKS = (
    "Policy",
    "Behavior",
    "ScalingRules",
    "Prediction",
    "Capacity",
    "WarmPool",
    "ColdStartGuard",
    "Panic",
    "Fallback",
)


def _document_profiles(components: dict[str, Any]) -> None:
    """A policy body is a document: ``profile`` plus the fields set over it."""
    for name in _MERGED_BLOCKS:
        for prop in components.get(name, {}).get("properties", {}).values():
            prop.pop("default", None)
    policy = components["Policy"]
    policy["description"] = (
        "A policy document: `profile` (GET /v1/profiles) and the fields set over it. "
        "Objects merge with the profile's field by field, lists and values replace it, "
        "null unsets (docs/policy.md#workload-classes-profiles)."
    )
    policy["properties"] = {
        PROFILE_FIELD: {
            "type": "string",
            "enum": list(profile_names()),
            "description": f"unset: {DEFAULT_PROFILE}",
        },
        **policy["properties"],
    }
