"""Direct-mode actuation through the ``scale`` subresource, with optimistic concurrency.

The write carries the resourceVersion of the read the decision was based on, so a change
in between (a human, a rollout, another writer) answers 409 and surfaces as
`ConflictError`: the caller re-reads and re-decides, never re-applies a stale decision.
429/5xx/timeouts are retried with backoff; after an *ambiguous* failure (5xx, timeout)
the write may have landed, so a following 409 is resolved by re-reading: if the replicas
already equal ours, the write is reported applied once, never sent twice.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.errors import ActuationError, ConflictError, OwnershipError, PermanentError
from autoscaler.kube.gpu import request_totals
from autoscaler.kube.selectors import selector_string
from autoscaler.retry import (
    Random,
    RetryPolicy,
    Sleep,
    backoff_s,
    describe,
    is_ambiguous,
    is_retryable,
    with_retries,
)

Kind = Literal["Deployment", "StatefulSet"]
MERGE_PATCH = "application/merge-patch+json"


class ScaleInfo(NamedTuple):
    """The scale subresource as read: ``(spec, status, resourceVersion, selector)``."""

    spec_replicas: int
    status_replicas: int
    resource_version: str
    selector: str


@dataclass(frozen=True, slots=True)
class WorkloadRecord:
    """A Deployment/StatefulSet as the informer keeps it: its scale (the scale
    subresource's resourceVersion is the object's) and its pod template's GPU needs."""

    kind: str
    namespace: str
    name: str
    resource_version: str
    spec_replicas: int
    status_replicas: int
    selector: str  # spec.selector as a label selector string
    requests: tuple[tuple[str, float], ...]  # extended resources one pod requests
    node_selector: tuple[tuple[str, str], ...]

    @property
    def scale(self) -> ScaleInfo:
        return ScaleInfo(
            self.spec_replicas, self.status_replicas, self.resource_version, self.selector
        )


def workload_record(kind: str) -> Callable[[Mapping[str, Any]], WorkloadRecord]:
    """The informer's transform for ``kind`` objects."""

    def transform(obj: Mapping[str, Any]) -> WorkloadRecord:
        meta, spec = obj["metadata"], obj.get("spec") or {}
        tspec = (spec.get("template") or {}).get("spec") or {}
        return WorkloadRecord(
            kind=kind,
            namespace=str(meta.get("namespace") or ""),
            name=str(meta["name"]),
            resource_version=str(meta["resourceVersion"]),
            spec_replicas=int(spec.get("replicas", 1) or 0),
            status_replicas=int((obj.get("status") or {}).get("replicas") or 0),
            selector=selector_string(spec.get("selector")),
            requests=tuple(sorted(request_totals(tspec).items())),
            node_selector=tuple(sorted((tspec.get("nodeSelector") or {}).items())),
        )

    return transform


class ScaleResult(NamedTuple):
    info: ScaleInfo
    retries: int
    resolved_after_ambiguous: bool  # the write had landed before an error answer


class ScaleClient:
    def __init__(
        self,
        api: ApiClient,
        *,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Random = random.random,
    ) -> None:
        self._apps = client.AppsV1Api(api)
        self._hpa = client.AutoscalingV2Api(api)
        self._custom = client.CustomObjectsApi(api)
        self._retry = retry or RetryPolicy()
        self._sleep, self._rand = sleep, rand

    async def get_scale(self, kind: Kind, namespace: str, name: str) -> ScaleInfo:
        timeout = self._retry.request_timeout_s
        if kind == "Deployment":
            op = lambda: self._apps.read_namespaced_deployment_scale(  # noqa: E731
                name, namespace, _request_timeout=timeout
            )
        elif kind == "StatefulSet":
            op = lambda: self._apps.read_namespaced_stateful_set_scale(  # noqa: E731
                name, namespace, _request_timeout=timeout
            )
        else:
            raise PermanentError(
                f"scaleTargetRef.kind: value {kind!r} must be Deployment or StatefulSet"
            )
        try:
            scale = await with_retries(
                op,
                what=f"read {kind} {namespace}/{name} scale",
                policy=self._retry,
                sleep=self._sleep,
                rand=self._rand,
            )
        except ApiException as err:
            raise _permanent(f"read {kind} {namespace}/{name} scale", err) from None
        return _info(scale)

    async def set_replicas(
        self, kind: Kind, namespace: str, name: str, replicas: int, resource_version: str
    ) -> ScaleResult:
        """Write ``replicas`` only if the object is still at ``resource_version``."""
        if replicas < 0:
            raise PermanentError(f"replicas: value {replicas} must be >= 0")
        what = f"scale {kind} {namespace}/{name} to {replicas}"
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": resource_version},
            "spec": {"replicas": replicas},
        }
        timeout = self._retry.request_timeout_s
        ambiguous = False
        retries = 0
        for attempt in range(self._retry.attempts):
            try:
                scale = await self._patch_scale(kind, namespace, name, body, timeout)
                return ScaleResult(_info(scale), retries, False)
            except (ApiException, TimeoutError, OSError) as err:
                if isinstance(err, ApiException) and err.status == 409:
                    return await self._resolve_conflict(
                        kind, namespace, name, replicas, resource_version, ambiguous, retries
                    )
                if isinstance(err, ApiException) and not is_retryable(err):
                    raise _permanent(what, err) from None
                if not isinstance(err, ApiException) and not is_retryable(err):
                    raise
                ambiguous = ambiguous or is_ambiguous(err)
                retries += 1
                if attempt + 1 >= self._retry.attempts:
                    raise ActuationError(
                        f"{what}: gave up after {self._retry.attempts} attempts: {describe(err)}"
                    ) from None
                await self._sleep(backoff_s(attempt, self._retry, self._rand))
        raise ActuationError(f"{what}: no attempt made")  # pragma: no cover (attempts >= 1)

    async def _patch_scale(
        self, kind: Kind, namespace: str, name: str, body: dict[str, Any], timeout_s: float
    ) -> Any:
        # The stubs omit the generated client's private kwargs; they are accepted at runtime.
        kw: dict[str, Any] = {"_content_type": MERGE_PATCH, "_request_timeout": timeout_s}
        if kind == "Deployment":
            return await self._apps.patch_namespaced_deployment_scale(name, namespace, body, **kw)
        return await self._apps.patch_namespaced_stateful_set_scale(name, namespace, body, **kw)

    async def _resolve_conflict(
        self,
        kind: Kind,
        namespace: str,
        name: str,
        replicas: int,
        resource_version: str,
        ambiguous: bool,
        retries: int,
    ) -> ScaleResult:
        current = await self.get_scale(kind, namespace, name)
        if ambiguous and current.spec_replicas == replicas:
            return ScaleResult(current, retries, True)
        raise ConflictError(
            f"{kind} {namespace}/{name} changed since it was read (resourceVersion "
            f"{resource_version} -> {current.resource_version}, replicas now "
            f"{current.spec_replicas}); re-read and re-decide"
        )

    async def list_owners(self, namespace: str) -> dict[tuple[str, str], str]:
        """``{(kind, name): why}`` for every object an HPA or a KEDA ScaledObject scales in
        ``namespace`` (two list calls, whatever the number of targets there)."""
        timeout = self._retry.request_timeout_s

        async def hpas() -> Any:
            return await self._hpa.list_namespaced_horizontal_pod_autoscaler(
                namespace, _request_timeout=timeout
            )

        async def scaled_objects() -> Any:
            return await self._custom.list_namespaced_custom_object(
                "keda.sh", "v1alpha1", namespace, "scaledobjects", _request_timeout=timeout
            )

        owners: dict[tuple[str, str], str] = {}
        try:
            so_list = await with_retries(
                scaled_objects,
                what="list ScaledObjects",
                policy=self._retry,
                sleep=self._sleep,
                rand=self._rand,
            )
        except ApiException as err:
            if err.status != 404:  # 404: KEDA's CRD is not installed
                raise _permanent(f"list ScaledObjects in {namespace}", err) from None
            so_list = {"items": []}
        try:
            hpa_list = await with_retries(
                hpas,
                what="list HorizontalPodAutoscalers",
                policy=self._retry,
                sleep=self._sleep,
                rand=self._rand,
            )
        except ApiException as err:
            raise _permanent(f"list HorizontalPodAutoscalers in {namespace}", err) from None
        for hpa in reversed(hpa_list.items or []):
            ref = hpa.spec.scale_target_ref
            owners[(ref.kind, ref.name)] = (
                f"{ref.kind} {namespace}/{ref.name} is scaled by HorizontalPodAutoscaler "
                f"{namespace}/{hpa.metadata.name}; refusing to write replicas in direct "
                "mode (delete the HPA, or use mode keda or advisory)"
            )
        for so in reversed(so_list.get("items") or []):
            ref = (so.get("spec") or {}).get("scaleTargetRef") or {}
            kind, name = str(ref.get("kind", "Deployment")), str(ref.get("name"))
            owners[(kind, name)] = (
                f"{kind} {namespace}/{name} is scaled by KEDA ScaledObject "
                f"{namespace}/{so['metadata']['name']}; refusing to write replicas in "
                "direct mode (remove the ScaledObject, or use mode keda or advisory)"
            )
        return owners

    async def check_ownership(self, kind: Kind, namespace: str, name: str) -> None:
        """Raise `OwnershipError` when an HPA or a KEDA ScaledObject targets this object."""
        why = (await self.list_owners(namespace)).get((kind, name))
        if why is not None:
            raise OwnershipError(why)


def _info(scale: Any) -> ScaleInfo:
    return ScaleInfo(
        spec_replicas=int(scale.spec.replicas or 0),
        status_replicas=int(scale.status.replicas or 0),
        resource_version=str(scale.metadata.resource_version),
        selector=str(scale.status.selector or ""),
    )


def _permanent(what: str, err: ApiException) -> PermanentError:
    return PermanentError(f"{what}: {describe(err)}")
