"""Targets and their policy sub-resource: list, read, create/replace, JSON merge patch
(RFC 7386) and delete. Every write is stored (and durable) before it is acknowledged;
concurrent writers are detected with ETag / If-Match (412, RFC 9110)."""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response

from autoscaler.api.body import SafeJSONResponse
from autoscaler.api.context import ApiContext, Name, Namespace, json_body
from autoscaler.api.documents import (
    NAME_PATTERN,
    READ,
    WRITE,
    TargetDocument,
    body_schema,
    if_match_param,
    with_if_match,
)
from autoscaler.api.preconditions import IfMatch, parse_if_match
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError, TemporaryError
from autoscaler.logging import get_logger
from autoscaler.mergepatch import merge_patch
from autoscaler.policy.document import (
    DEFAULT_PROFILE,
    load_source,
    profile_document,
    profile_names,
)
from autoscaler.policy.schema import Policy
from autoscaler.store.base import NotFound, PreconditionFailed, StoredTarget
from autoscaler.target import TargetSpec, target_spec_from_dict, target_spec_to_dict
from autoscaler.target_status import role_rows

log = get_logger(__name__)
# Read-modify-writes an unconditional patch retries when another writer wins in between
# (each round one of the racing writers succeeds).
UNCONDITIONAL_ATTEMPTS = 64


def _etag(version: str) -> str:
    return f'"{version}"'


def _if_match(request: Request) -> IfMatch | None:
    return parse_if_match(request.headers.getlist("if-match"))


def _not_matched(ref: TargetRef, current: str | None, pre: IfMatch) -> PreconditionFailed:
    where = "does not exist" if current is None else f"is at version {current}"
    return PreconditionFailed(f"target {ref} {where}; If-Match {pre.describe()} does not match")


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
        # a target with variants (docs/policy.md "Variants"): per variant counts
        **({"variants": [v.to_dict() for v in st.variants]} if st.variants else {}),
        # variants with roles (docs/policy.md "Prefill/decode roles"): per role counts
        # and why a role held, could not grow or was raised
        **(
            {"roles": role_rows(st.variants), "roleNotes": list(st.role_notes)}
            if st.spec.roles is not None
            else {}
        ),
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
        doc = {
            "_spec": stored.spec,
            "doc": {
                **target_spec_to_dict(stored.spec),
                "effectivePolicy": stored.spec.effective_policy(),
            },
        }
        _DOC_CACHE[key] = doc
    rendered: dict[str, Any] = doc["doc"]
    return rendered


def _target_doc(stored: StoredTarget, state: ControllerState) -> dict[str, Any]:
    return {
        **_spec_doc(stored),
        "version": stored.version,
        "status": _status_doc(state, stored.spec.ref),
    }


def _with_policy(spec: TargetSpec, policy_doc: Any) -> TargetSpec:
    if not isinstance(policy_doc, Mapping):
        raise ConfigError("invalid policy", ["policy: must be a JSON object"])
    try:
        source = load_source(policy_doc)
    except ConfigError as err:
        raise ConfigError("invalid policy", [f"policy.{p}" for p in err.problems]) from None
    return dataclasses.replace(spec, policy=source.policy, policy_source=source)


def targets_router(ctx: ApiContext) -> APIRouter:
    state, store, metrics = ctx.state, ctx.store, ctx.metrics
    can_read, can_write = ctx.can_read, ctx.can_write
    router = APIRouter(default_response_class=SafeJSONResponse)

    @router.get("/v1/targets", tags=["targets"], dependencies=can_read, responses=READ)
    async def list_targets(
        namespace: Annotated[str | None, Query(pattern=NAME_PATTERN, max_length=253)] = None,
    ) -> SafeJSONResponse:
        """All targets (optionally of one namespace) with their version and status."""
        items = await store.list(namespace)
        return SafeJSONResponse({"items": [_target_doc(t, state) for t in items]})

    @router.get(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_read,
        responses=READ,
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

    @router.put(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_write,
        responses={**WRITE, 201: {"description": "created"}},
        openapi_extra=with_if_match(body_schema(TargetDocument)),
    )
    async def put_target(
        namespace: Namespace, name: Name, request: Request, response: Response
    ) -> dict[str, Any]:
        """Create or replace a target whole. 201 on create, 200 on replace."""
        ref = TargetRef(namespace, name)
        pre = _if_match(request)
        spec = target_spec_from_dict(await json_body(request), ref=ref)
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
        patch = await json_body(request, root)
        if not isinstance(patch, Mapping):
            raise ConfigError("invalid body", ["body: a merge patch must be a JSON object"])
        unconditional = pre is None or pre.any_version
        attempts = UNCONDITIONAL_ATTEMPTS if unconditional else 1
        for attempt in range(attempts):
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
                if not unconditional:
                    raise
                # No If-Match (or "*"): someone wrote in between; re-read and apply the
                # patch again (after a short random pause, so racing writers spread out).
                await asyncio.sleep(random.uniform(0.0, min(0.002 * (attempt + 1), 0.05)))
        raise TemporaryError(
            f"target {ref} kept changing: {attempts} read-modify-writes of this patch all "
            "raced with other writers",
            retry_after_s=1.0,
        )

    @router.patch(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_write,
        responses=WRITE,
        openapi_extra=with_if_match(
            body_schema(TargetDocument, "application/merge-patch+json", "application/json")
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

    @router.delete(
        "/v1/targets/{namespace}/{name}",
        tags=["targets"],
        dependencies=can_write,
        status_code=204,
        responses=WRITE,
        openapi_extra={"parameters": [if_match_param()]},
    )
    async def delete_target(namespace: Namespace, name: Name, request: Request) -> Response:
        ref = TargetRef(namespace, name)
        if_match = await _store_if_match(ref, _if_match(request))
        await store.delete(ref, if_match=if_match)
        metrics.forget(ref)
        log.info("target_deleted", target=str(ref))
        return Response(status_code=204)

    # -- policy sub-resource -----------------------------------------------------------

    @router.get(
        "/v1/targets/{namespace}/{name}/policy",
        tags=["policies"],
        dependencies=can_read,
        responses=READ,
    )
    async def get_policy(namespace: Namespace, name: Name, response: Response) -> dict[str, Any]:
        """The policy document as written (``profile`` and the fields set over it): what
        PUT replaces and PATCH merges into. ``/policy/effective`` shows what it resolves to."""
        stored = await store.get(TargetRef(namespace, name))
        response.headers["ETag"] = _etag(stored.version)
        return stored.spec.policy_document()

    @router.get(
        "/v1/targets/{namespace}/{name}/policy/effective",
        tags=["policies"],
        dependencies=can_read,
        responses=READ,
    )
    async def get_effective_policy(
        namespace: Namespace, name: Name, response: Response
    ) -> dict[str, Any]:
        """Read-only: the profile in use and every field of the policy the target runs
        (the profile's document with the written fields merged over it)."""
        stored = await store.get(TargetRef(namespace, name))
        response.headers["ETag"] = _etag(stored.version)
        return stored.spec.effective_policy()

    @router.get("/v1/profiles", tags=["policies"], dependencies=can_read, responses=READ)
    async def list_profiles() -> dict[str, Any]:
        """The profiles a policy document may select with ``profile``, each as its whole
        policy document, and the one an omitted ``profile`` means."""
        return {
            "default": DEFAULT_PROFILE,
            "items": [{"name": n, "policy": dict(profile_document(n))} for n in profile_names()],
        }

    @router.put(
        "/v1/targets/{namespace}/{name}/policy",
        tags=["policies"],
        dependencies=can_write,
        responses=WRITE,
        openapi_extra=with_if_match(body_schema(Policy)),
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

    @router.patch(
        "/v1/targets/{namespace}/{name}/policy",
        tags=["policies"],
        dependencies=can_write,
        responses=WRITE,
        openapi_extra=with_if_match(
            body_schema(Policy, "application/merge-patch+json", "application/json")
        ),
    )
    async def patch_policy(
        namespace: Namespace, name: Name, request: Request, response: Response
    ) -> dict[str, Any]:
        """JSON merge patch of the policy only."""
        ref = TargetRef(namespace, name)

        def build(current: StoredTarget, patch: Any) -> TargetSpec:
            return _with_policy(current.spec, merge_patch(current.spec.policy_document(), patch))

        doc = await _patch(ref, request, response, build, root="policy")
        return dict(doc["policy"])

    return router
