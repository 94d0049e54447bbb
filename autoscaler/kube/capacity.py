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
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.errors import PermanentError
from autoscaler.kube.gpu import gpu_of, is_pool_pod, quantity, template_gpu
from autoscaler.kube.pods import PodRecord, TargetPods
from autoscaler.kube.scale import WorkloadRecord
from autoscaler.kube.selectors import parse_label_selector
from autoscaler.target import TargetSpec

__all__ = [
    "CapacityReport",
    "GpuCapacity",
    "GpuLedger",
    "NodeRecord",
    "compute_capacity",
    "template_gpu",
]


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
        if is_pool_pod(labels):
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


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """The fields of a Node capacity uses (the informer's transform keeps only these)."""

    name: str
    labels: Mapping[str, str]
    schedulable: bool  # not cordoned and not NotReady
    allocatable: tuple[tuple[str, float], ...]  # extended resources only


def node_record(node: Mapping[str, Any]) -> NodeRecord:
    meta = node.get("metadata") or {}
    status = node.get("status") or {}
    conds = status.get("conditions") or []
    not_ready = any(c.get("type") == "Ready" and c.get("status") != "True" for c in conds)
    alloc = {
        k: quantity(v)
        for k, v in (status.get("allocatable") or {}).items()
        if k not in ("cpu", "memory", "pods", "ephemeral-storage")
        and not k.startswith("hugepages-")
    }
    return NodeRecord(
        name=str(meta["name"]),
        labels=dict(meta.get("labels") or {}),
        schedulable=not (node.get("spec") or {}).get("unschedulable") and not not_ready,
        allocatable=tuple(sorted(alloc.items())),
    )


SlotKey = tuple[str, float, tuple[tuple[str, str], ...]]


class GpuLedger:
    """GPU requests per node, kept incrementally from the node and pod informers.

    Each pod event moves its requests off its old node and onto its new one; free slots
    for a (resource, per-replica request, nodeSelector) are computed at most once per
    change of the ledger (``generation``) and shared by every target asking the same.
    """

    def __init__(self) -> None:
        self.nodes: dict[str, NodeRecord] = {}
        self._used: dict[str, dict[str, float]] = defaultdict(dict)
        self._pause: dict[str, dict[str, float]] = defaultdict(dict)
        self.generation = 0
        self._slots: dict[SlotKey, tuple[int, tuple[int, int, int]]] = {}

    def on_node(self, key: tuple[str, str], old: NodeRecord | None, new: NodeRecord | None) -> None:
        if new is None:
            self.nodes.pop(key[1], None)
        else:
            self.nodes[key[1]] = new
        self.generation += 1

    def on_pod(self, key: tuple[str, str], old: PodRecord | None, new: PodRecord | None) -> None:
        changed = False
        for rec, sign in ((old, -1.0), (new, 1.0)):
            if rec is None or not rec.placed or not rec.requests:
                continue
            assert rec.node is not None
            for res, qty in rec.requests:
                self._add(self._used, rec.node, res, sign * qty)
                if rec.pool:
                    self._add(self._pause, rec.node, res, sign * qty)
            changed = True
        if changed:
            self.generation += 1

    @staticmethod
    def _add(table: dict[str, dict[str, float]], node: str, res: str, qty: float) -> None:
        per = table[node]
        total = per.get(res, 0.0) + qty
        if abs(total) < 1e-9:
            per.pop(res, None)
            if not per:
                del table[node]
        else:
            per[res] = total

    def slots(
        self, resource: str, per_replica: float, node_selector: Mapping[str, str] | None
    ) -> tuple[int, int, int]:
        """``(free_slots, pause_slots, nodes)`` for replicas requesting ``per_replica``."""
        if per_replica <= 0:
            raise PermanentError(f"{resource}: per-replica request {per_replica} must be > 0")
        key: SlotKey = (resource, per_replica, tuple(sorted((node_selector or {}).items())))
        cached = self._slots.get(key)
        if cached is not None and cached[0] == self.generation:
            return cached[1]
        slots = without_pause = nodes = 0
        for name, n in self.nodes.items():
            if not n.schedulable:
                continue
            if node_selector and any(n.labels.get(k) != v for k, v in node_selector.items()):
                continue
            alloc = dict(n.allocatable).get(resource)
            if alloc is None:
                continue
            nodes += 1
            free = alloc - self._used.get(name, {}).get(resource, 0.0)
            pause = self._pause.get(name, {}).get(resource, 0.0)
            slots += max(0, math.floor((free + pause) / per_replica + 1e-9))
            without_pause += max(0, math.floor(free / per_replica + 1e-9))
        result = (slots, slots - without_pause, nodes)
        self._slots[key] = (self.generation, result)
        return result


class CapacityCache(Protocol):
    """What `GpuCapacity` reads (`autoscaler.kube.cache.ClusterCache`)."""

    @property
    def gpus(self) -> GpuLedger: ...

    def workload(self, kind: str, namespace: str, name: str) -> WorkloadRecord | None: ...

    def target_pods(self, spec: TargetSpec, work: WorkloadRecord) -> TargetPods: ...


class GpuCapacity:
    """`CapacityPort` for the control loop, answered from the informer cache (no API call):
    ``max_replicas(spec, current)``."""

    def __init__(self, cache: CapacityCache) -> None:
        self._cache = cache
        self.last: dict[str, CapacityReport] = {}

    async def report(self, spec: TargetSpec) -> CapacityReport | None:
        """``None`` when the template requests no GPU resource (nothing to cap)."""
        ref = spec.scale_target_ref
        work = self._cache.workload(ref.kind, spec.ref.namespace, ref.name)
        if work is None:
            raise PermanentError(f"{ref.kind} {spec.ref.namespace}/{ref.name}: not found")
        found = gpu_of(dict(work.requests), spec.policy.capacity.gpu_resource)
        if found is None:
            return None
        resource, per_replica = found
        view = self._cache.target_pods(spec, work)
        free, pause, nodes = self._cache.gpus.slots(
            resource, per_replica, dict(work.node_selector) or None
        )
        report = CapacityReport(
            resource=resource,
            per_replica=per_replica,
            placed=view.snapshot().placed,
            free_slots=free,
            pause_slots=pause,
            provisionable=spec.policy.capacity.provisionable_replicas,
            nodes=nodes,
        )
        self.last[str(spec.ref)] = report
        return report

    async def max_replicas(self, spec: TargetSpec, current: int) -> int | None:
        report = await self.report(spec)
        return None if report is None else report.max_replicas
