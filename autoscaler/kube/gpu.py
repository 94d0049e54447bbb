"""GPU vocabulary shared by capacity and the warm pool: resource quantities, which
resources are GPUs, what a pod (template) requests, and the warm pool's pause-pod labels.

One module both use, so `capacity` and `warmpool` never import each other.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from autoscaler.errors import PermanentError
from autoscaler.names import COMPONENT

POOL_LABELS: Mapping[str, str] = {
    "app.kubernetes.io/managed-by": COMPONENT,
    "app.kubernetes.io/component": "warm-pool",
}
_GPU_RE = re.compile(r"^[\w.-]+/(gpu[\w.-]*|mig-[\w.-]+)$")
_SUFFIX = {"m": 1e-3, "k": 1e3, "Ki": 1024.0, "M": 1e6, "Mi": 1024.0**2, "G": 1e9, "Gi": 1024.0**3}
# Requests that can never be the counted accelerator (kept out of compact pod records).
_BASIC = frozenset({"cpu", "memory", "ephemeral-storage"})


def quantity(value: Any) -> float:
    s = str(value)
    for suf in ("Ki", "Mi", "Gi", "m", "k", "M", "G"):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * _SUFFIX[suf]
    return float(s)


def is_gpu_resource(name: str) -> bool:
    return bool(_GPU_RE.match(name))


def is_pool_pod(labels: Mapping[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in POOL_LABELS.items())


def request_totals(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """Per extended resource, what a pod spec requests (limits overridden by requests per
    container, summed over containers); cpu/memory/storage left out."""
    totals: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            if k not in _BASIC and not k.startswith("hugepages-"):
                totals[k] = totals.get(k, 0.0) + quantity(v)
    return totals


def gpu_of(totals: Mapping[str, float], resource: str | None = None) -> tuple[str, float] | None:
    """The (resource, quantity per pod) among ``totals``; ``None`` for a CPU-only pod."""
    found = {
        k: v
        for k, v in totals.items()
        if k == resource or (resource is None and is_gpu_resource(k))
    }
    if not found:
        return None
    if len(found) > 1:
        names = ", ".join(sorted(found))
        raise PermanentError(
            f"pod template requests several GPU resources ({names}); set "
            "capacity.gpuResource to the one to count"
        )
    return next(iter(found.items()))


def template_gpu(
    pod_spec: Mapping[str, Any], resource: str | None = None
) -> tuple[str, float] | None:
    """The (resource, quantity per pod) a pod spec requests; ``None`` for a CPU-only pod."""
    return gpu_of(request_totals(pod_spec), resource)
