"""Where each target's Ready endpoints come from.

- `SliceEndpoints` (in a cluster): one informer (list + watch, `kube.informer`) over the
  EndpointSlices of the configured Services, selected server-side by
  ``kubernetes.io/service-name in (...)``. Every slice change recomputes that Service's
  Ready addresses and hands them to the gate: no API call per request, and a pod counts
  once its kubelet readiness probe passes (``conditions.ready``), as a Service would route.
- `ProbedEndpoints` (fixed ``endpoints`` in the file, e.g. outside a cluster): each address
  is Ready while ``GET /health`` answers 200, probed every ``interval_s``.

A sleeper (vLLM sleep mode, docs/policy.md#sleepers) keeps its Ready condition and a 200
``/health``, but serves nothing: `SliceEndpoints` leaves out an address whose pod carries
the ``autoscaling.llmscaler.io/sleeping=true`` label (a second informer, over the pods with
that label only), and `ProbedEndpoints` one whose ``GET /is_sleeping`` answers true.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from autoscaler.kube.informer import Informer, Key
from autoscaler.logging import get_logger
from autoscaler.names import SLEEPING_LABEL

log = get_logger(__name__)

SERVICE_LABEL = "kubernetes.io/service-name"

SetReady = Callable[[str, list[str]], None]  # (target key, ready "host:port" list)


@dataclass(frozen=True, slots=True)
class SliceRecord:
    """The part of an EndpointSlice the activator needs."""

    namespace: str
    service: str
    ready: tuple[str, ...]  # addresses whose conditions.ready is not false
    ports: tuple[int, ...]
    pods: tuple[str | None, ...] = ()  # the pod behind each ready address (targetRef)


def slice_record(obj: Mapping[str, Any]) -> SliceRecord:
    meta = obj.get("metadata") or {}
    ready: list[str] = []
    pods: list[str | None] = []
    for ep in obj.get("endpoints") or ():
        cond = ep.get("conditions") or {}
        # EndpointSlice semantics: a nil ready condition is read as ready.
        if cond.get("ready") is False or cond.get("terminating") is True:
            continue
        ref = ep.get("targetRef") or {}
        pod = str(ref["name"]) if ref.get("kind") == "Pod" and ref.get("name") else None
        for a in ep.get("addresses") or ():
            ready.append(str(a))
            pods.append(pod)
    ports = tuple(int(p["port"]) for p in obj.get("ports") or () if p.get("port"))
    return SliceRecord(
        namespace=str(meta.get("namespace") or ""),
        service=str((meta.get("labels") or {}).get(SERVICE_LABEL, "")),
        ready=tuple(ready),
        ports=ports,
        pods=tuple(pods),
    )


def sleeper_key(obj: Mapping[str, Any]) -> tuple[str, str]:
    """The sleepers informer's transform: (namespace, pod name)."""
    meta = obj.get("metadata") or {}
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class SliceEndpoints:
    """Ready endpoints of Services from their EndpointSlices, through one informer."""

    def __init__(
        self,
        list_fn: Any,
        services: Mapping[tuple[str, str], tuple[str, int]],
        set_ready: SetReady,
        list_pods: Any = None,
    ) -> None:
        """``services``: (namespace, service) -> (target key, port); ``list_fn``: e.g.
        ``DiscoveryV1Api(api).list_endpoint_slice_for_all_namespaces``; ``list_pods``
        (e.g. ``CoreV1Api(api).list_pod_for_all_namespaces``): sleepers are left out."""
        self.services = dict(services)
        self._set_ready = set_ready
        names = sorted({svc for _, svc in services})
        self.informer: Informer[SliceRecord] = Informer(
            "endpointslices",
            list_fn,
            slice_record,
            label_selector=f"{SERVICE_LABEL} in ({','.join(names)})",
        )
        self.informer.add_handler(self._on_change)
        self.sleepers: Informer[tuple[str, str]] | None = None
        if list_pods is not None:
            self.sleepers = Informer(
                "sleeping-pods",
                list_pods,
                sleeper_key,
                label_selector=f"{SLEEPING_LABEL}=true",
            )
            self.sleepers.add_handler(self._on_sleeper)

    def _on_sleeper(
        self, key: Key, old: tuple[str, str] | None, new: tuple[str, str] | None
    ) -> None:
        namespaces = {k[0] for k in (old, new) if k is not None}
        for namespace, service in self.services:
            if namespace in namespaces:
                self.refresh(namespace, service)

    def _asleep(self, namespace: str) -> set[str]:
        if self.sleepers is None:
            return set()
        return {name for ns, name in self.sleepers.items.values() if ns == namespace}

    def _on_change(self, key: Key, old: SliceRecord | None, new: SliceRecord | None) -> None:
        for rec in (old, new):
            if rec is not None:
                self.refresh(rec.namespace, rec.service)

    def refresh(self, namespace: str, service: str) -> None:
        target = self.services.get((namespace, service))
        if target is None:
            return
        key, port = target
        asleep = self._asleep(namespace)
        ready: set[str] = set()
        for rec in self.informer.items.values():
            if rec.namespace == namespace and rec.service == service:
                use = port if not rec.ports or port in rec.ports else rec.ports[0]
                pods = rec.pods or (None,) * len(rec.ready)
                ready.update(
                    f"{_host(a)}:{use}"
                    for a, pod in zip(rec.ready, pods, strict=True)
                    if pod is None or pod not in asleep
                )
        self._set_ready(key, sorted(ready))

    def start(self) -> None:
        self.informer.start()
        if self.sleepers is not None:
            self.sleepers.start()

    async def wait_synced(self, timeout_s: float = 10.0) -> None:
        await self.informer.wait_synced(timeout_s)
        if self.sleepers is not None:
            await self.sleepers.wait_synced(timeout_s)
        for namespace, service in self.services:
            self.refresh(namespace, service)

    async def stop(self) -> None:
        await self.informer.stop()
        if self.sleepers is not None:
            await self.sleepers.stop()


def _host(address: str) -> str:
    return f"[{address}]" if ":" in address else address


class ProbedEndpoints:
    """Fixed endpoints, Ready while ``GET /health`` answers 200."""

    def __init__(
        self,
        targets: Mapping[str, Sequence[str]],
        set_ready: SetReady,
        *,
        interval_s: float = 1.0,
        timeout_s: float = 1.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.targets = {k: tuple(v) for k, v in targets.items()}
        self._set_ready = set_ready
        self.interval_s = interval_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._own = session is None
        self._task: asyncio.Task[None] | None = None
        self._last: dict[str, list[str]] = {}

    async def _ok(self, ep: str) -> bool:
        """``/health`` 200 and not asleep (``/is_sleeping``: 404 without sleep mode)."""
        assert self._session is not None
        try:
            async with self._session.get(f"http://{ep}/health", timeout=self._timeout) as r:
                if r.status != 200:
                    return False
            async with self._session.get(f"http://{ep}/is_sleeping", timeout=self._timeout) as r:
                if r.status != 200:
                    return True
                body = await r.json(content_type=None)
                return not (isinstance(body, dict) and body.get("is_sleeping") is True)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return False

    async def probe_once(self) -> None:
        for key, eps in self.targets.items():
            oks = await asyncio.gather(*(self._ok(ep) for ep in eps))
            ready = [ep for ep, ok in zip(eps, oks, strict=True) if ok]
            if ready != self._last.get(key):
                self._last[key] = ready
                log.info("endpoints changed", target=key, ready=len(ready))
                self._set_ready(key, ready)

    async def _run(self) -> None:
        while True:
            await self.probe_once()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="endpoint-probe")

    async def wait_synced(self, timeout_s: float = 10.0) -> None:
        return None

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._own and self._session is not None:
            await self._session.close()
