"""Pod discovery for one target: list + watch with resourceVersion, never missing a pod.

A dropped watch resumes from the last resourceVersion seen (events in the gap are
replayed by the API server); ``410 Gone`` (history compacted) re-lists. From the pods it
keeps: the Ready pods' metrics URLs (``status.podIP:<port><path>``), how many pods are on
the way (created, not terminating, not yet Ready) and cold-start samples (creation ->
Ready ``lastTransitionTime``) as a distribution for the forecaster's horizon.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
import structlog
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.kube.names import METRICS_PORT_ANNOTATION
from autoscaler.kube.retry import RetryPolicy, Sleep, backoff_s, read_json

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class PodInfo:
    name: str
    uid: str
    ready: bool
    terminating: bool
    phase: str
    ip: str | None
    metrics_url: str | None


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """What the control loop reads each tick (a copy; the watcher keeps running)."""

    synced: bool
    ready_urls: tuple[str, ...]
    ready: int
    pending: int  # created, not terminating, not yet Ready: capacity on the way
    terminating: int
    cold_start_samples_s: tuple[float, ...]
    pods: tuple[PodInfo, ...]


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _ready_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c  # type: ignore[no-any-return]
    return None


def pod_info(pod: Mapping[str, Any], port: int, path: str) -> PodInfo:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    cond = _ready_condition(pod)
    terminating = bool(meta.get("deletionTimestamp"))
    phase = str(status.get("phase") or "Pending")
    ready = cond is not None and cond.get("status") == "True" and phase == "Running"
    ip = status.get("podIP") or None
    override = (meta.get("annotations") or {}).get(METRICS_PORT_ANNOTATION)
    use_port = int(override) if override else port
    url = f"http://{ip}:{use_port}{path}" if ip and ready and not terminating else None
    return PodInfo(
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        ready=ready and not terminating,
        terminating=terminating,
        phase=phase,
        ip=ip,
        metrics_url=url,
    )


def cold_start_s(pod: Mapping[str, Any]) -> float | None:
    """Creation -> Ready, or None when unknown or polluted by a container restart."""
    cond = _ready_condition(pod)
    if cond is None or cond.get("status") != "True":
        return None
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if any(int(s.get("restartCount") or 0) > 0 for s in statuses):
        return None
    created = _ts((pod.get("metadata") or {}).get("creationTimestamp"))
    ready_at = _ts(cond.get("lastTransitionTime"))
    if created is None or ready_at is None or ready_at < created:
        return None
    return ready_at - created


class PodWatcher:
    """Watches one target's pods; `snapshot()` is cheap and never blocks."""

    def __init__(
        self,
        api: ApiClient,
        namespace: str,
        label_selector: str,
        *,
        metrics_port: int = 8000,
        metrics_path: str = "/metrics",
        max_samples: int = 10_000,
        watch_timeout_s: int = 240,
        retry: RetryPolicy | None = None,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if not label_selector:
            raise ValueError("label_selector: empty selector would match every pod")
        self._core = client.CoreV1Api(api)
        self.namespace, self.selector = namespace, label_selector
        self.port, self.path = metrics_port, metrics_path
        self._watch_timeout_s = watch_timeout_s
        self._retry = retry or RetryPolicy()
        self._sleep, self._rand = sleep, rand
        self._pods: dict[str, dict[str, Any]] = {}
        self._sampled: set[str] = set()
        self._samples: deque[float] = deque(maxlen=max_samples)
        self._changed = asyncio.Condition()
        self._synced = False
        self._task: asyncio.Task[None] | None = None
        self.relists = 0
        self.reconnects = 0
        self.resource_version: str | None = None

    # ------------------------------------------------------------------ reading
    def snapshot(self) -> PodSnapshot:
        infos = sorted(
            (pod_info(p, self.port, self.path) for p in self._pods.values()), key=lambda i: i.name
        )
        ready = [i for i in infos if i.ready]
        return PodSnapshot(
            synced=self._synced,
            ready_urls=tuple(i.metrics_url for i in ready if i.metrics_url),
            ready=len(ready),
            pending=sum(1 for i in infos if not i.ready and not i.terminating),
            terminating=sum(1 for i in infos if i.terminating),
            cold_start_samples_s=tuple(self._samples),
            pods=tuple(infos),
        )

    async def wait_until(
        self, predicate: Callable[[PodSnapshot], bool], timeout_s: float = 5.0
    ) -> PodSnapshot:
        """Wait for a snapshot satisfying ``predicate`` (raises TimeoutError)."""
        async with asyncio.timeout(timeout_s), self._changed:
            while not predicate(snap := self.snapshot()):
                await self._changed.wait()
        return snap

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion; forever (cancel to stop)."""
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._relist()
                await self._watch_once()
                self.reconnects += 1
                failures = 0
            except ApiException as err:
                if err.status == 410:
                    log.info("pod watch expired, re-listing", selector=self.selector)
                    self.resource_version = None
                    continue
                failures += 1
                log.warning("pod watch failed", selector=self.selector, status=err.status)
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))
            except (TimeoutError, aiohttp.ClientError) as err:
                failures += 1
                log.warning("pod watch failed", selector=self.selector, error=str(err))
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))
            except Exception:  # a malformed answer must not end discovery for good
                failures += 1
                log.exception("pod watch error; re-listing", selector=self.selector)
                self.resource_version = None
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))

    async def _relist(self) -> None:
        # Raw JSON (the stubs type the preloaded model): the watch hands us raw dicts too.
        kw: dict[str, Any] = {
            "label_selector": self.selector,
            "_preload_content": False,
            "_request_timeout": self._retry.request_timeout_s,
        }
        resp: Any = await self._core.list_namespaced_pod(self.namespace, **kw)
        body = await read_json(resp)
        self._pods = {p["metadata"]["uid"]: p for p in body.get("items") or []}
        for pod in self._pods.values():
            self._sample(pod)
        self.resource_version = body["metadata"]["resourceVersion"]
        self.relists += 1
        self._synced = True
        await self._notify()

    async def _watch_once(self) -> None:
        w = watch.Watch()
        try:
            stream = w.stream(
                self._core.list_namespaced_pod,
                self.namespace,
                label_selector=self.selector,
                resource_version=self.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=self._watch_timeout_s,
            )
            async for event in stream:
                raw = event["raw_object"]
                kind = event["type"]
                self.resource_version = raw["metadata"]["resourceVersion"]
                if kind == "BOOKMARK":
                    continue
                uid = raw["metadata"]["uid"]
                if kind == "DELETED":
                    self._pods.pop(uid, None)
                else:
                    self._pods[uid] = raw
                    self._sample(raw)
                await self._notify()
        finally:
            await w.close()

    def _sample(self, pod: Mapping[str, Any]) -> None:
        uid = pod["metadata"]["uid"]
        if uid in self._sampled:
            return
        seconds = cold_start_s(pod)
        if seconds is not None:
            self._sampled.add(uid)
            self._samples.append(seconds)

    async def _notify(self) -> None:
        async with self._changed:
            self._changed.notify_all()
