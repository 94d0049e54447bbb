"""Warm pool: per GPU resource, a Deployment of pause pods holding GPUs at low priority.

Inference pods preempt them, so a scale-up lands on a warm node with the image cached;
the controller sizes the pool from the forecast within the node-provisioning lead time and
patches its replicas and its PriorityClass (``low`` off-peak: yields GPUs to batch work;
``peak`` before a predicted peak: keeps them against batch work). Both classes stay below
the inference pods' priority and use ``preemptionPolicy: Never`` (pause pods never evict).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.errors import PermanentError
from autoscaler.kube.gpu import POOL_LABELS, template_gpu
from autoscaler.retry import describe, read_json
from autoscaler.target import TargetSpec

PAUSE_IMAGE = "registry.k8s.io/pause:3.9"
RESOURCE_LABEL = "autoscaling.llmscaler.io/gpu-resource"
LOW_PRIORITY_VALUE = -10
PEAK_PRIORITY_VALUE = -1
MERGE_PATCH = "application/merge-patch+json"


def pool_name(resource: str) -> str:
    """``nvidia.com/mig-3g.40gb`` -> ``llm-warm-pool-nvidia-com-mig-3g-40gb``."""
    return "llm-warm-pool-" + re.sub(r"[^a-z0-9]+", "-", resource.lower()).strip("-")


def pool_size(
    forecast_replicas: int, desired_replicas: int, min_replicas: int, max_replicas: int
) -> int:
    """Warm slots = replicas the forecast needs within the lead time beyond what is asked
    for now, clamped to the pool's bounds."""
    return max(min_replicas, min(max_replicas, forecast_replicas - desired_replicas))


@dataclass(frozen=True, slots=True)
class PoolState:
    name: str
    replicas: int
    priority_class_name: str
    created: bool
    patched: bool


def pool_deployment(
    namespace: str,
    resource: str,
    per_pod: float,
    replicas: int,
    priority_class_name: str,
    node_selector: Mapping[str, str] | None = None,
    tolerations: list[Any] | None = None,
) -> dict[str, Any]:
    name = pool_name(resource)
    labels = {**POOL_LABELS, RESOURCE_LABEL: name.removeprefix("llm-warm-pool-"), "app": name}
    qty = str(int(per_pod)) if float(per_pod).is_integer() else str(per_pod)
    spec: dict[str, Any] = {
        "priorityClassName": priority_class_name,
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "containers": [
            {
                "name": "pause",
                "image": PAUSE_IMAGE,
                "resources": {"requests": {resource: qty}, "limits": {resource: qty}},
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 65535,
                    "allowPrivilegeEscalation": False,
                    "readOnlyRootFilesystem": True,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
    }
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    if tolerations:
        spec["tolerations"] = list(tolerations)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name, **POOL_LABELS}},
            "template": {"metadata": {"labels": labels}, "spec": spec},
        },
    }


class WarmPoolManager:
    """Creates the PriorityClasses and the pool Deployments; patches only what changed."""

    def __init__(self, api: ApiClient, *, request_timeout_s: float = 10.0) -> None:
        self._apps: Any = client.AppsV1Api(api)
        self._sched: Any = client.SchedulingV1Api(api)
        self._kw = {"_request_timeout": request_timeout_s}
        self._classes_ready: set[str] = set()
        self._templates: dict[str, tuple[str, float, dict[str, Any]]] = {}

    async def ensure_priority_classes(
        self, low_name: str = "llm-warm-pool-low", peak_name: str = "llm-warm-pool-peak"
    ) -> list[str]:
        """Create missing classes; returns the names created."""
        created: list[str] = []
        for name, value, what in (
            (low_name, LOW_PRIORITY_VALUE, "off-peak: yields GPUs to batch work"),
            (peak_name, PEAK_PRIORITY_VALUE, "before a predicted peak"),
        ):
            if name in self._classes_ready:
                continue
            try:
                await self._sched.read_priority_class(name, **self._kw)
            except ApiException as err:
                if err.status != 404:
                    raise PermanentError(f"read PriorityClass {name}: {describe(err)}") from None
                body = {
                    "apiVersion": "scheduling.k8s.io/v1",
                    "kind": "PriorityClass",
                    "metadata": {"name": name, "labels": dict(POOL_LABELS)},
                    "value": value,
                    "preemptionPolicy": "Never",
                    "globalDefault": False,
                    "description": f"llm-autoscaler warm-pool pause pods ({what})",
                }
                try:
                    await self._sched.create_priority_class(body, **self._kw)
                    created.append(name)
                except ApiException as err2:
                    if err2.status != 409:
                        raise PermanentError(
                            f"create PriorityClass {name}: {describe(err2)}"
                        ) from None
            self._classes_ready.add(name)
        return created

    async def apply(
        self,
        namespace: str,
        resource: str,
        per_pod: float,
        replicas: int,
        priority_class_name: str,
        node_selector: Mapping[str, str] | None = None,
        tolerations: list[Any] | None = None,
    ) -> PoolState:
        name = pool_name(resource)
        try:
            resp = await self._apps.read_namespaced_deployment(
                name, namespace, _preload_content=False, **self._kw
            )
            current: dict[str, Any] = await read_json(resp)
        except ApiException as err:
            if err.status != 404:
                raise PermanentError(
                    f"read warm pool {namespace}/{name}: {describe(err)}"
                ) from None
            body = pool_deployment(
                namespace,
                resource,
                per_pod,
                replicas,
                priority_class_name,
                node_selector,
                tolerations,
            )
            await self._apps.create_namespaced_deployment(namespace, body, **self._kw)
            return PoolState(name, replicas, priority_class_name, created=True, patched=False)
        patch: dict[str, Any] = {}
        if current["spec"].get("replicas") != replicas:
            patch["spec"] = {"replicas": replicas}
        tspec = current["spec"]["template"].get("spec") or {}
        if tspec.get("priorityClassName") != priority_class_name:
            patch.setdefault("spec", {})["template"] = {
                "spec": {"priorityClassName": priority_class_name}
            }
        if patch:
            await self._apps.patch_namespaced_deployment(
                name, namespace, patch, _content_type=MERGE_PATCH, **self._kw
            )
        return PoolState(name, replicas, priority_class_name, created=False, patched=bool(patch))

    async def resize(self, spec: TargetSpec, replicas: int, peak: bool) -> None:
        """`WarmPoolPort`: size the pool for ``spec``'s GPU resource (no-op without GPU)."""
        wp = spec.policy.warm_pool
        if not wp.enabled:
            return
        ref = spec.scale_target_ref
        read = (
            self._apps.read_namespaced_deployment
            if ref.kind == "Deployment"
            else self._apps.read_namespaced_stateful_set
        )
        resp = await read(ref.name, spec.ref.namespace, _preload_content=False, **self._kw)
        obj = await read_json(resp)
        tspec = obj["spec"]["template"].get("spec") or {}
        found = template_gpu(tspec, spec.policy.capacity.gpu_resource)
        if found is None:
            return
        await self.ensure_priority_classes(wp.priority_class_name, wp.peak_priority_class_name)
        size = max(wp.min_replicas, min(wp.max_replicas, replicas))
        await self.apply(
            spec.ref.namespace,
            found[0],
            found[1],
            size,
            wp.peak_priority_class_name if peak else wp.priority_class_name,
            tspec.get("nodeSelector"),
            tspec.get("tolerations"),
        )
