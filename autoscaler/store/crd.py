"""`PolicyStore` over the LLMAutoscaler custom resource (in-cluster source of truth).

Versions are resourceVersions: a write with ``if_match`` sends it and a 409 from the API
server becomes `PreconditionFailed` (HTTP 412 at the REST API). Objects that fail
validation are left out of `list`/`watch` and kept in `invalid` with the reason, so one bad
object never stops the others from being scaled; `report_invalid` puts the reason in the
object's status (``Ready=False``) and a Warning Event on it.

A REST write replaces the spec only: labels, annotations, finalizers and owner references
already on the object are kept (the replace body carries the stored metadata). The status
records ``observedGeneration``: the ``metadata.generation`` of the spec it describes.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import hashlib
import json
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.domain import Decision, TargetRef
from autoscaler.errors import AutoscalerError, ConfigError, PermanentError, TemporaryError
from autoscaler.logging import get_logger
from autoscaler.names import CRD_GROUP, CRD_PLURAL, CRD_VERSION
from autoscaler.policy.status import PAUSED_ANNOTATION, PolicyStatus
from autoscaler.retry import (
    RetryPolicy,
    Sleep,
    backoff_s,
    describe,
    retry_after_s,
    with_retries,
)
from autoscaler.store.base import AlreadyExists, NotFound, PreconditionFailed, StoredTarget
from autoscaler.store.errors import ClusterForbidden, ClusterRejected, ClusterUnavailable
from autoscaler.target import TargetSpec, object_to_spec, spec_to_object
from autoscaler.target_status import Condition, VariantStatus, status_body

log = get_logger(__name__)
RESOURCE = f"{CRD_PLURAL}.{CRD_GROUP}"
MERGE_PATCH = "application/merge-patch+json"
WATCH_FAILURES_NOT_READY = 3
# What `report_invalid` calls to write a Warning Event: (involvedObject, reason, message).
EmitEvent = Callable[[dict[str, str], str, str], Awaitable[bool]]


def _causes(err: ApiException) -> list[str]:
    """The API server's reasons for refusing a document (a Status body's
    ``details.causes``, each ``field: message``), else its message."""
    try:
        body = json.loads(err.body or "")
    except (TypeError, ValueError):
        body = None
    problems: list[str] = []
    if isinstance(body, dict):
        details = body.get("details")
        causes = details.get("causes") if isinstance(details, dict) else None
        for cause in causes or ():
            if not isinstance(cause, dict):
                continue
            field = str(cause.get("field") or "spec").removeprefix("spec.")
            problems.append(f"{field}: {cause.get('message') or cause.get('reason')}")
        if not problems and body.get("message"):
            problems.append(str(body["message"]))
    return problems or [describe(err)]


def cluster_error(
    what: str, verb: str, namespace: str | None, err: ApiException
) -> AutoscalerError:
    """An API server's refusal as the error that says whose problem it is: 400/422 the
    document's (`ClusterRejected`, with the server's causes), 401/403 the controller's
    RBAC (`ClusterForbidden`), anything else the cluster's (`ClusterUnavailable`)."""
    if err.status in (400, 422):
        return ClusterRejected(f"{what}: the API server refused the document", _causes(err))
    if err.status in (401, 403):
        return ClusterForbidden(verb, RESOURCE, namespace, describe(err))
    return ClusterUnavailable(f"{what}: {describe(err)}", retry_after_s=retry_after_s(err))


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


PAUSE_PREFIX = PAUSED_ANNOTATION  # .../paused and .../paused-replicas: part of the spec


def _pause_annotations(obj: dict[str, Any]) -> dict[str, Any]:
    """The annotations that are part of a target (pause), unlike every other one."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k.startswith(PAUSE_PREFIX)}


def _digest(spec: Any) -> bytes:
    """What tells one spec from another: 16 bytes of a hash of its canonical JSON. The
    spec itself (~5.3 KB per LLMAutoscaler decoded from the API's JSON, 5 MB at 1,000
    targets) was kept for the comparison alone."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=repr)
    return hashlib.blake2b(text.encode(), digest_size=16).digest()


class CrdPolicyStore:
    """Targets as LLMAutoscaler objects in one namespace (or all, ``namespace=None``)."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str | None = None,
        *,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
        wall_clock: Callable[[], float] = time.time,
        watch_timeout_s: int = 240,
    ) -> None:
        self._api = client.CustomObjectsApi(api)
        self.namespace = namespace
        self._retry = retry or RetryPolicy()
        self._sleep, self._rand, self._wall = sleep, rand, wall_clock
        self._watch_timeout_s = watch_timeout_s
        self.invalid: dict[TargetRef, str] = {}
        # per target: the conditions last written (what the next status keeps the
        # transition times of), not the whole status
        self._status: dict[TargetRef, dict[str, Any]] = {}
        # per target: a digest of the spec last parsed, and what it parsed to
        self._parsed: dict[TargetRef, tuple[bytes, TargetSpec | ConfigError]] = {}
        self._watch_error: str | None = None  # the policy watch's last failure, until it recovers
        self.generations: dict[TargetRef, int] = {}  # metadata.generation last seen
        self._uids: dict[TargetRef, str] = {}
        self._reported: dict[TargetRef, str] = {}  # invalid reason already in status/Event
        self._recovered: set[TargetRef] = set()  # reported invalid, valid again

    # ------------------------------------------------------------------ helpers
    def _kw(self, **extra: Any) -> dict[str, Any]:
        return {"_request_timeout": self._retry.request_timeout_s, **extra}

    async def _call(self, what: str, op: Callable[[], Any]) -> Any:
        return await with_retries(
            op,
            what=what,
            policy=self._retry,
            sleep=self._sleep,
            rand=self._rand,
            exhausted=ClusterUnavailable,
        )

    def _stored(self, obj: dict[str, Any]) -> StoredTarget:
        return StoredTarget(spec=object_to_spec(obj), version=obj["metadata"]["resourceVersion"])

    def _spec_of(self, ref: TargetRef, obj: dict[str, Any]) -> TargetSpec:
        """`object_to_spec`, validated once per distinct spec (a fleet re-validating every
        object on every status write costs targets x targets per round of writes)."""
        pause = _pause_annotations(obj)
        digest = _digest([obj.get("spec"), pause] if pause else obj.get("spec"))
        cached = self._parsed.get(ref)
        if cached is not None and cached[0] == digest:
            if isinstance(cached[1], ConfigError):
                raise cached[1]
            return cached[1]
        try:
            spec = object_to_spec(obj)
        except ConfigError as err:
            self._parsed[ref] = (digest, err)
            raise
        self._parsed[ref] = (digest, spec)
        return spec

    def _accept(self, items: Sequence[dict[str, Any]]) -> builtins.list[StoredTarget]:
        out: builtins.list[StoredTarget] = []
        for obj in items:
            meta = obj["metadata"]
            ref = TargetRef(meta.get("namespace", ""), meta["name"])
            if isinstance(meta.get("generation"), int):
                self.generations[ref] = meta["generation"]
            if meta.get("uid"):
                self._uids[ref] = str(meta["uid"])
            try:
                spec = self._spec_of(ref, obj)
                out.append(StoredTarget(spec=spec, version=obj["metadata"]["resourceVersion"]))
                self.invalid.pop(ref, None)
                if self._reported.pop(ref, None) is not None:
                    self._recovered.add(ref)
            except ConfigError as err:
                if self.invalid.get(ref) != str(err):
                    log.warning("invalid LLMAutoscaler ignored", target=str(ref), error=str(err))
                self.invalid[ref] = str(err)
        seen = {(o["metadata"].get("namespace", ""), o["metadata"]["name"]) for o in items}
        for gone in [r for r in self._parsed if (r.namespace, r.name) not in seen]:
            del self._parsed[gone]
        return sorted(out, key=lambda s: (s.spec.ref.namespace, s.spec.ref.name))

    async def _list_raw(self, namespace: str | None) -> dict[str, Any]:
        ns = namespace if namespace is not None else self.namespace
        if ns is None:
            op = lambda: self._api.list_cluster_custom_object(  # noqa: E731
                CRD_GROUP, CRD_VERSION, CRD_PLURAL, **self._kw()
            )
        else:
            op = lambda: self._api.list_namespaced_custom_object(  # noqa: E731
                CRD_GROUP, CRD_VERSION, ns, CRD_PLURAL, **self._kw()
            )
        try:
            result: dict[str, Any] = await self._call("list LLMAutoscalers", op)
        except ApiException as err:
            raise cluster_error("list LLMAutoscalers", "list", ns, err) from None
        return result

    def health(self) -> str | None:
        """Why the store is not following the API server right now (None: it is), from
        memory: `/readyz` asks this on every probe."""
        return self._watch_error

    # -------------------------------------------------------------- PolicyStore
    async def list(self, namespace: str | None = None) -> builtins.list[StoredTarget]:
        return self._accept((await self._list_raw(namespace)).get("items") or [])

    async def get(self, ref: TargetRef) -> StoredTarget:
        return self._stored(await self._get_raw(ref))

    async def _get_raw(self, ref: TargetRef) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = await self._call(
                f"get LLMAutoscaler {ref}",
                lambda: self._api.get_namespaced_custom_object(
                    CRD_GROUP, CRD_VERSION, ref.namespace, CRD_PLURAL, ref.name, **self._kw()
                ),
            )
        except ApiException as err:
            if err.status == 404:
                raise NotFound(f"LLMAutoscaler {ref} not found") from None
            raise cluster_error(f"get LLMAutoscaler {ref}", "get", ref.namespace, err) from None
        return obj

    async def put(self, spec: TargetSpec, if_match: str | None = None) -> StoredTarget:
        body = spec_to_object(spec)
        ref = spec.ref
        if if_match is not None:
            return await self._put_if_match(ref, body, if_match)
        for _ in range(3):
            try:
                return self._stored(await self._create(ref, body))
            except AlreadyExists:
                pass
            try:
                current = await self._get_raw(ref)
                rv = current["metadata"]["resourceVersion"]
                return await self._replace(ref, body, rv, current)
            except (PreconditionFailed, NotFound):
                continue  # someone wrote or deleted in between: try again
        raise ClusterUnavailable(
            f"put LLMAutoscaler {ref}: kept racing with other writers", retry_after_s=1.0
        )

    async def _put_if_match(
        self, ref: TargetRef, body: dict[str, Any], if_match: str
    ) -> StoredTarget:
        """RFC 9110 If-Match: ``"*"`` is "exists" (never sent as a resourceVersion, the API
        server would refuse it); a version is compared here (the stored metadata is read
        anyway, to be kept) and again by the API server."""
        try:
            if if_match != "*":
                current = await self._get_raw(ref)
                if current["metadata"]["resourceVersion"] != if_match:
                    raise PreconditionFailed(
                        f"LLMAutoscaler {ref}: version {if_match} is stale (changed since read)"
                    )
                return await self._replace(ref, body, if_match, current)
            for _ in range(3):
                current = await self._get_raw(ref)
                try:
                    rv = current["metadata"]["resourceVersion"]
                    return await self._replace(ref, body, rv, current)
                except PreconditionFailed:
                    continue  # written in between: it still exists, so try again
        except NotFound:
            raise PreconditionFailed(
                f"LLMAutoscaler {ref} does not exist (If-Match {if_match!r})"
            ) from None
        raise ClusterUnavailable(
            f"put LLMAutoscaler {ref}: kept racing with other writers", retry_after_s=1.0
        )

    async def _create(self, ref: TargetRef, body: dict[str, Any]) -> dict[str, Any]:
        try:
            obj: dict[str, Any] = await self._call(
                f"create LLMAutoscaler {ref}",
                lambda: self._api.create_namespaced_custom_object(
                    CRD_GROUP, CRD_VERSION, ref.namespace, CRD_PLURAL, body, **self._kw()
                ),
            )
        except ApiException as err:
            if err.status == 409:
                raise AlreadyExists(f"LLMAutoscaler {ref} already exists") from None
            raise cluster_error(
                f"create LLMAutoscaler {ref}", "create", ref.namespace, err
            ) from None
        return obj

    async def _replace(
        self, ref: TargetRef, body: dict[str, Any], version: str, current: dict[str, Any]
    ) -> StoredTarget:
        """Replace the spec; the stored metadata (labels, annotations...) goes back as is."""
        meta = {k: v for k, v in current["metadata"].items() if k != "managedFields"}
        body = {**body, "metadata": {**meta, "resourceVersion": version}}
        try:
            obj = await self._call(
                f"replace LLMAutoscaler {ref}",
                lambda: self._api.replace_namespaced_custom_object(
                    CRD_GROUP, CRD_VERSION, ref.namespace, CRD_PLURAL, ref.name, body, **self._kw()
                ),
            )
        except ApiException as err:
            if err.status == 409:
                raise PreconditionFailed(
                    f"LLMAutoscaler {ref}: version {version} is stale (changed since read)"
                ) from None
            if err.status == 404:
                raise NotFound(f"LLMAutoscaler {ref} not found") from None
            raise cluster_error(
                f"replace LLMAutoscaler {ref}", "update", ref.namespace, err
            ) from None
        return self._stored(obj)

    async def delete(self, ref: TargetRef, if_match: str | None = None) -> None:
        # "*" means "exists": no resourceVersion precondition, and 404 becomes 412 below.
        version = if_match if if_match not in (None, "*") else None
        options = client.V1DeleteOptions(
            preconditions=client.V1Preconditions(resource_version=version) if version else None
        )
        try:
            await self._call(
                f"delete LLMAutoscaler {ref}",
                lambda: self._api.delete_namespaced_custom_object(
                    CRD_GROUP,
                    CRD_VERSION,
                    ref.namespace,
                    CRD_PLURAL,
                    ref.name,
                    body=options,
                    **self._kw(),
                ),
            )
        except ApiException as err:
            if err.status == 404 and if_match is not None:
                raise PreconditionFailed(
                    f"LLMAutoscaler {ref} does not exist (If-Match {if_match!r})"
                ) from None
            if err.status == 404:
                raise NotFound(f"LLMAutoscaler {ref} not found") from None
            if err.status == 409:
                raise PreconditionFailed(
                    f"LLMAutoscaler {ref}: version {if_match} is stale (changed since read)"
                ) from None
            raise cluster_error(
                f"delete LLMAutoscaler {ref}", "delete", ref.namespace, err
            ) from None

    async def watch(self) -> AsyncIterator[builtins.list[StoredTarget]]:
        """Yields the full (valid) target list at start and after every change."""
        objects: dict[tuple[str, str], dict[str, Any]] = {}
        rv: str | None = None
        failures = 0
        while True:
            try:
                if rv is None:
                    raw = await self._list_raw(None)
                    objects = {  # without status: only spec and metadata make a target
                        (o["metadata"]["namespace"], o["metadata"]["name"]): {
                            k: v for k, v in o.items() if k != "status"
                        }
                        for o in raw.get("items") or []
                    }
                    rv = raw["metadata"]["resourceVersion"]
                    self._watch_error = None
                    yield self._accept(list(objects.values()))
                w = watch.Watch()
                # Client-side bound: connect within the request timeout; a stream silent
                # past the server's own timeout is a dead connection.
                wt = (self._retry.request_timeout_s, self._watch_timeout_s + 30)
                try:
                    if self.namespace is None:
                        stream = w.stream(
                            self._api.list_cluster_custom_object,
                            CRD_GROUP,
                            CRD_VERSION,
                            CRD_PLURAL,
                            resource_version=rv,
                            allow_watch_bookmarks=True,
                            timeout_seconds=self._watch_timeout_s,
                            _request_timeout=wt,
                        )
                    else:
                        stream = w.stream(
                            self._api.list_namespaced_custom_object,
                            CRD_GROUP,
                            CRD_VERSION,
                            self.namespace,
                            CRD_PLURAL,
                            resource_version=rv,
                            allow_watch_bookmarks=True,
                            timeout_seconds=self._watch_timeout_s,
                            _request_timeout=wt,
                        )
                    async for event in stream:
                        obj = event.get("raw_object") if isinstance(event, dict) else None
                        if not isinstance(obj, dict) or "metadata" not in obj:
                            # kubernetes-asyncio hands back a non-JSON line as a raw string
                            # (e.g. an error page while the API server answers 429).
                            log.warning("malformed watch event skipped", line=str(event)[:200])
                            continue
                        rv = obj["metadata"]["resourceVersion"]
                        self._watch_error = None  # following again
                        if event["type"] == "BOOKMARK":
                            continue
                        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
                        if event["type"] == "DELETED":
                            objects.pop(key, None)
                        else:
                            prev = objects.get(key)
                            objects[key] = {k: v for k, v in obj.items() if k != "status"}
                            if (
                                prev is not None
                                and prev.get("spec") == obj.get("spec")
                                and _pause_annotations(prev) == _pause_annotations(obj)
                            ):
                                continue  # a status write (ours): the targets did not change
                        yield self._accept(list(objects.values()))
                finally:
                    await w.close()
                failures = 0
                self._watch_error = None
            except ApiException as err:
                if err.status == 410:
                    rv = None
                    continue
                failures += 1
                self._watch_failed(failures, describe(err))
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))
            except (TimeoutError, aiohttp.ClientError, TemporaryError) as err:
                failures += 1
                self._watch_failed(failures, describe(err))
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))
            except Exception as err:
                # A malformed answer (kubernetes-asyncio raises a bare Exception for JSON
                # without type/object): log it and resume; the policy watch never ends.
                failures += 1
                log.warning("policy watch error; resuming", error=repr(err))
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))

    def _watch_failed(self, failures: int, why: str) -> None:
        """Not ready after WATCH_FAILURES_NOT_READY failures in a row (one dropped
        connection is routine; a run of them means the targets are no longer followed)."""
        if failures >= WATCH_FAILURES_NOT_READY:
            self._watch_error = f"policy watch failing ({failures} attempts in a row): {why}"

    # ----------------------------------------------------------------- status
    async def write_status(
        self,
        ref: TargetRef,
        decision: Decision | None,
        *,
        conditions: Sequence[Condition] = (),
        observed_generation: int | None = None,
        policy: PolicyStatus | None = None,
        variants: Sequence[VariantStatus] | None = (),
    ) -> None:
        """Merge-patch the status subresource with the last decision, conditions, the
        per-variant counts of a target with variants and the policy in use
        (``profile``, ``policyHash``); ``observedGeneration`` defaults to
        the generation of the spec last read. A decision's status supersedes a pending
        "valid again" write of `report_invalid` (whose one condition would replace the
        decision's conditions, ``OverridesProfile`` included, until the next change)."""
        if decision is not None:
            self._recovered.discard(ref)
        if observed_generation is None:
            observed_generation = self.generations.get(ref)
        status = status_body(
            decision,
            now_rfc3339=_rfc3339(self._wall()),
            conditions=conditions,
            previous=self._status.get(ref),
            observed_generation=observed_generation,
            policy=policy,
            variants=variants,
        )
        body = {"status": status}
        try:
            await self._call(
                f"patch LLMAutoscaler {ref} status",
                lambda: self._api.patch_namespaced_custom_object_status(
                    CRD_GROUP,
                    CRD_VERSION,
                    ref.namespace,
                    CRD_PLURAL,
                    ref.name,
                    body,
                    **self._kw(_content_type=MERGE_PATCH),
                ),
            )
        except ApiException as err:
            if err.status == 404:
                raise NotFound(f"LLMAutoscaler {ref} not found") from None
            raise PermanentError(f"patch LLMAutoscaler {ref} status: {describe(err)}") from None
        self._status[ref] = {
            "conditions": [
                {k: c[k] for k in ("type", "status", "lastTransitionTime") if k in c}
                for c in status.get("conditions") or ()
            ]
        }

    def generation_of(self, ref: TargetRef) -> int | None:
        """The ``metadata.generation`` of the spec last read (None: not seen)."""
        return self.generations.get(ref)

    async def report_invalid(self, emit: EmitEvent | None = None) -> int:
        """Put each new validation failure in its object's status (``Ready=False``,
        reason ``InvalidSpec``, the message naming field, value and rule) and a Warning
        Event; an object valid again gets ``Ready=True``. Only what changed since the last
        call is written, so calling this every tick costs nothing when nothing changed.
        Returns the number of objects written."""
        written = 0
        for ref, message in list(self.invalid.items()):
            if self._reported.get(ref) == message:
                continue
            cond = Condition("Ready", "False", "InvalidSpec", message)
            try:
                await self.write_status(ref, None, conditions=(cond,))
            except NotFound:
                self.invalid.pop(ref, None)  # deleted since
                continue
            except PermanentError as err:
                log.warning(
                    "invalid LLMAutoscaler: status not written", target=str(ref), error=str(err)
                )
                continue
            if emit is not None:
                involved = {
                    "apiVersion": f"{CRD_GROUP}/{CRD_VERSION}",
                    "kind": "LLMAutoscaler",
                    "name": ref.name,
                    "namespace": ref.namespace,
                }
                if ref in self._uids:
                    involved["uid"] = self._uids[ref]
                await emit(involved, "InvalidSpec", message)
            self._reported[ref] = message
            written += 1
        for ref in list(self._recovered):
            cond = Condition("Ready", "True", "Valid", "spec accepted")
            with contextlib.suppress(PermanentError):
                await self.write_status(ref, None, conditions=(cond,))
            self._recovered.discard(ref)
            written += 1
        return written
