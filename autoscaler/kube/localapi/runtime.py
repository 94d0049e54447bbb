"""What runs a scheduled pod (`PodRuntime`; `DelayRuntime` by default) and pod resource
requests as the scheduler sums them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from autoscaler.kube.localapi.status import Obj


@dataclass(frozen=True, slots=True)
class PodEndpoint:
    """Where a started pod answers: its IP and, on 127.0.0.1, its own metrics port."""

    ip: str
    metrics_port: int | None = None


class PodRuntime(Protocol):
    """What runs a pod once scheduled. ``start`` returns when the pod is Ready."""

    async def start(self, pod: Obj) -> PodEndpoint: ...

    async def stop(self, pod: Obj) -> None: ...


class DelayRuntime:
    """Pods become Ready ``ready_after_s`` after being scheduled (``None``: never, the test
    marks them Ready with `LocalKubeAPI.mark_pod_ready`)."""

    def __init__(self, ready_after_s: float | None = 0.0) -> None:
        self.ready_after_s = ready_after_s
        self._n = 0

    async def start(self, pod: Obj) -> PodEndpoint:
        if self.ready_after_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.ready_after_s or 0.0)
        self._n += 1
        return PodEndpoint(ip=f"10.244.{self._n // 250}.{self._n % 250 + 1}")

    async def stop(self, pod: Obj) -> None:
        return None


def _qty(value: Any) -> float:
    """Kubernetes quantity to a float (enough for GPU counts, cpu and memory)."""
    s = str(value)
    suffixes = {
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 1024.0,
        "Mi": 1024.0**2,
        "Gi": 1024.0**3,
        "Ti": 1024.0**4,
    }
    for suf in ("Ki", "Mi", "Gi", "Ti", "m", "k", "M", "G", "T"):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * suffixes[suf]
    return float(s)


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """Sum of container requests (limits stand in for extended resources)."""
    out: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            out[k] = out.get(k, 0.0) + _qty(v)
    return out
