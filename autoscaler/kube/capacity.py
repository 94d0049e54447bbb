"""GPU capacity: how many replicas of a target the cluster can place right now.

Reads the GPU resource the pod template requests (``nvidia.com/gpu``,
``nvidia.com/mig-<profile>``, shared/time-sliced resources such as
``nvidia.com/gpu.shared``, or any other ``*/gpu*``), then per schedulable node
``allocatable - requests of scheduled, non-terminated pods``. Warm-pool pause pods hold
GPUs *for* the inference pods (they are preempted), so their requests count as free.
``max_replicas = target pods already placed + free slots + provisionable``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.errors import PermanentError
from autoscaler.kube.localapi.selectors import parse_label_selector
from autoscaler.kube.retry import describe, read_json
from autoscaler.kube.warmpool import POOL_LABELS
from autoscaler.store.base import TargetSpec

_GPU_RE = re.compile(r"^[\w.-]+/(gpu[\w.-]*|mig-[\w.-]+)$")
_SUFFIX = {"m": 1e-3, "k": 1e3, "Ki": 1024.0, "M": 1e6, "Mi": 1024.0**2, "G": 1e9, "Gi": 1024.0**3}


def quantity(value: Any) -> float:
    s = str(value)
    for suf in ("Ki", "Mi", "Gi", "m", "k", "M", "G"):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * _SUFFIX[suf]
    return float(s)


def is_gpu_resource(name: str) -> bool:
    return bool(_GPU_RE.match(name))


def template_gpu(
    pod_spec: Mapping[str, Any], resource: str | None = None
) -> tuple[str, float] | None:
    """The (resource, quantity per pod) a pod spec requests; ``None`` for a CPU-only pod."""
    totals: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            if (resource is None and is_gpu_resource(k)) or k == resource:
                totals[k] = totals.get(k, 0.0) + quantity(v)
    if not totals:
        return None
    if len(totals) > 1:
        names = ", ".join(sorted(totals))
        raise PermanentError(
            f"pod template requests several GPU resources ({names}); set "
            "capacity.gpuResource to the one to count"
        )
    name, qty = next(iter(totals.items()))
    return name, qty


def _requests(pod: Mapping[str, Any], resource: str) -> float:
    found = template_gpu(pod.get("spec") or {}, resource)
    return found[1] if found else 0.0


@dataclass(frozen=True, slots=True)
class CapacityReport:
    resource: str
    per_replica: float
    placed: int  # the target's pods already bound to a node
    free_slots: int  # more replicas that fit now (pause pods' GPUs included)
    pause_slots: int  # of which held by the warm pool
    provisionable: int
    nodes: int

    @property
    def max_replicas(self) -> int:
        return self.placed + self.free_slots + self.provisionable


def compute_capacity(
    nodes: list[Mapping[str, Any]],
    pods: list[Mapping[str, Any]],
    resource: str,
    per_replica: float,
    target_namespace: str,
    target_selector: str,
    node_selector: Mapping[str, str] | None = None,
    provisionable: int = 0,
) -> CapacityReport:
    """Pure: the report from lists of Node and Pod objects (raw API JSON)."""
    if per_replica <= 0:
        raise PermanentError(f"{resource}: per-replica request {per_replica} must be > 0")
    match = parse_label_selector(target_selector)
    free: dict[str, float] = {}
    for n in nodes:
        labels = (n.get("metadata") or {}).get("labels") or {}
        if (n.get("spec") or {}).get("unschedulable"):
            continue
        conds = (n.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") != "True" for c in conds):
            continue
        if node_selector and any(labels.get(k) != v for k, v in node_selector.items()):
            continue
        alloc = ((n.get("status") or {}).get("allocatable") or {}).get(resource)
        if alloc is not None:
            free[n["metadata"]["name"]] = quantity(alloc)
    placed = 0
    pause: dict[str, float] = {}
    for p in pods:
        node = (p.get("spec") or {}).get("nodeName")
        phase = (p.get("status") or {}).get("phase")
        if not node or phase in ("Succeeded", "Failed"):
            continue
        meta = p.get("metadata") or {}
        labels = meta.get("labels") or {}
        if meta.get("namespace") == target_namespace and match(labels):
            placed += 1
        if node not in free:
            continue
        used = _requests(p, resource)
        free[node] -= used
        if all(labels.get(k) == v for k, v in POOL_LABELS.items()):
            pause[node] = pause.get(node, 0.0) + used
    slots = sum(
        max(0, math.floor((f + pause.get(n, 0.0)) / per_replica + 1e-9)) for n, f in free.items()
    )
    without_pause = sum(max(0, math.floor(f / per_replica + 1e-9)) for f in free.values())
    return CapacityReport(
        resource=resource,
        per_replica=per_replica,
        placed=placed,
        free_slots=slots,
        pause_slots=slots - without_pause,
        provisionable=provisionable,
        nodes=len(free),
    )


class GpuCapacity:
    """`CapacityPort` for the control loop: ``max_replicas(spec, current)``."""

    def __init__(self, api: ApiClient, *, request_timeout_s: float = 10.0) -> None:
        self._apps = client.AppsV1Api(api)
        self._core = client.CoreV1Api(api)
        self._timeout = request_timeout_s
        self.last: dict[str, CapacityReport] = {}

    async def _template(self, spec: TargetSpec) -> dict[str, Any]:
        ref = spec.scale_target_ref
        ns = spec.ref.namespace
        api: Any = self._apps
        read = (
            api.read_namespaced_deployment
            if ref.kind == "Deployment"
            else api.read_namespaced_stateful_set
        )
        try:
            resp = await read(ref.name, ns, _preload_content=False, _request_timeout=self._timeout)
            obj: dict[str, Any] = await read_json(resp)
        except ApiException as err:
            raise PermanentError(f"read {ref.kind} {ns}/{ref.name}: {describe(err)}") from None
        return obj

    async def report(self, spec: TargetSpec) -> CapacityReport | None:
        """``None`` when the template requests no GPU resource (nothing to cap)."""
        obj = await self._template(spec)
        tspec = obj["spec"]["template"].get("spec") or {}
        found = template_gpu(tspec, spec.policy.capacity.gpu_resource)
        if found is None:
            return None
        resource, per_replica = found
        core: Any = self._core
        nodes_resp = await core.list_node(_preload_content=False, _request_timeout=self._timeout)
        pods_resp = await core.list_pod_for_all_namespaces(
            field_selector="status.phase!=Succeeded,status.phase!=Failed",
            _preload_content=False,
            _request_timeout=self._timeout,
        )
        nodes = (await read_json(nodes_resp)).get("items") or []
        pods = (await read_json(pods_resp)).get("items") or []
        sel = obj["spec"].get("selector") or {}
        selector = ",".join(f"{k}={v}" for k, v in sorted((sel.get("matchLabels") or {}).items()))
        if spec.selector:
            selector = ",".join(f"{k}={v}" for k, v in sorted(spec.selector.items()))
        report = compute_capacity(
            nodes,
            pods,
            resource,
            per_replica,
            spec.ref.namespace,
            selector,
            tspec.get("nodeSelector"),
            spec.policy.capacity.provisionable_replicas,
        )
        self.last[str(spec.ref)] = report
        return report

    async def max_replicas(self, spec: TargetSpec, current: int) -> int | None:
        report = await self.report(spec)
        return None if report is None else report.max_replicas
