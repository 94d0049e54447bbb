"""A kubelet stand-in for the real-Kubernetes tier: it owns one Node and runs its pods as
emulated vLLM servers on loopback.

The real scheduler binds pods to the Node (allocatable ``nvidia.com/gpu``); this watches
pods bound there, starts an `EmulatedReplica` on a 127.x.y.z address of the pod's own
(``status.podIP``, so every pod serves ``/metrics`` on the same port like in a cluster), and
patches the pod Running and Ready. Like a kubelet it owns that status: it heartbeats the
Node and puts a running pod's status back when someone else changed it (the node-lifecycle
controller marks pods NotReady when it misses heartbeats, e.g. across an API-server
restart). A pod marked for deletion is stopped and then removed with grace period 0, as a
kubelet does once its containers have exited.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.emulator.clock import EmuClock
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig

MERGE_PATCH = "application/merge-patch+json"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _ready(pod: Mapping[str, Any]) -> bool:
    conds = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _port(pod: Mapping[str, Any], default: int) -> int:
    for c in pod["spec"].get("containers") or []:
        for p in c.get("ports") or []:
            return int(p["containerPort"])
    return default


class FakeKubelet:
    """Use as ``async with FakeKubelet(api, node) as kubelet``; ``kubelet.replicas`` maps
    ``namespace/name`` of each running pod to its emulated server."""

    def __init__(
        self,
        api: ApiClient,
        node: str = "gpu-node-1",
        *,
        gpus: int = 8,
        subnet: int = 10,
        default_port: int = 8000,
        config: ReplicaConfig | None = None,
        taint: Mapping[str, str] | None = None,
        resources: Mapping[str, str] | None = None,
    ) -> None:
        self.api = api
        self.core: Any = client.CoreV1Api(api)
        self.node = node
        self.gpus = gpus
        self.default_port = default_port
        self.taint = taint
        # extended resources the Node offers (default: ``gpus`` x nvidia.com/gpu), e.g.
        # {"nvidia.com/mig-2g.20gb": "3"} for a node of MIG slices
        self.resources = dict(resources) if resources else {"nvidia.com/gpu": str(gpus)}
        self.config = config or ReplicaConfig(cold_start_s=0.0)
        self.clock = EmuClock(1.0)
        self.replicas: dict[str, EmulatedReplica] = {}
        hosts = itertools.product(range(256), range(2, 255))
        self._ips = (f"127.{subnet}.{b}.{c}" for b, c in hosts)
        self._task: asyncio.Task[None] | None = None
        self._beat: asyncio.Task[None] | None = None
        self._ip_of: dict[str, str] = {}
        self._reported: set[str] = set()  # pods whose Running/Ready status is written
        self._busy: set[str] = set()

    async def __aenter__(self) -> FakeKubelet:
        await self.register_node()
        self._task = asyncio.create_task(self._run(), name=f"fake-kubelet-{self.node}")
        self._beat = asyncio.create_task(self._heartbeat(), name=f"heartbeat-{self.node}")
        return self

    async def __aexit__(self, *_: object) -> None:
        for task in (self._task, self._beat):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        for rep in list(self.replicas.values()):
            await rep.stop(drain=False)
        self.replicas.clear()
        with contextlib.suppress(ApiException):
            await self.core.delete_node(self.node)

    async def _heartbeat(self, period_s: float = 5.0) -> None:
        while True:
            await asyncio.sleep(period_s)
            with contextlib.suppress(ApiException, aiohttp.ClientError, OSError, TimeoutError):
                await self.register_node(create=False)

    async def register_node(self, *, create: bool = True) -> None:
        resources = {"cpu": "64", "memory": "512Gi", "pods": "110"}
        resources.update(self.resources)
        body = {
            "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node}},
            "spec": {"taints": [dict(self.taint)]} if self.taint else {},
        }
        if create:
            with contextlib.suppress(ApiException):
                await self.core.create_node(body)
        now = _now()
        status = {
            "status": {
                "capacity": resources,
                "allocatable": resources,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake kubelet",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
            }
        }
        await self.core.patch_node_status(self.node, status, _content_type=MERGE_PATCH)

    def ready_pods(self) -> list[str]:
        return sorted(k for k, r in self.replicas.items() if r.ready and k in self._reported)

    # ---------------------------------------------------------------- loop
    async def _run(self) -> None:
        selector = f"spec.nodeName={self.node}"
        while True:
            try:
                resp = await self.core.list_pod_for_all_namespaces(
                    field_selector=selector, _preload_content=False
                )
                listed = json.loads(await resp.read())
                for pod in listed["items"]:
                    await self._handle("ADDED", pod)
                w = watch.Watch()
                async with w:
                    stream = w.stream(
                        self.core.list_pod_for_all_namespaces,
                        field_selector=selector,
                        resource_version=listed["metadata"]["resourceVersion"],
                        timeout_seconds=60,
                    )
                    async for event in stream:
                        await self._handle(event["type"], event["raw_object"])
            except asyncio.CancelledError:
                raise
            except (ApiException, aiohttp.ClientError, OSError, TimeoutError, ValueError):
                await asyncio.sleep(0.3)  # API server restarting: list again

    async def _handle(self, kind: str, pod: Mapping[str, Any]) -> None:
        meta = pod.get("metadata") or {}
        key = f"{meta.get('namespace')}/{meta.get('name')}"
        if kind == "DELETED" or meta.get("deletionTimestamp") or meta.get("deletion_timestamp"):
            await self._kill(key, meta, deleted=kind == "DELETED")
            return
        if key in self._busy:
            return
        if key in self.replicas:
            if not _ready(pod):  # our pod, its status changed by someone else: put it back
                await self._patch_status(key, pod)
            return
        self._busy.add(key)
        try:
            await self._start(key, pod)
        finally:
            self._busy.discard(key)

    async def _start(self, key: str, pod: Mapping[str, Any]) -> None:
        ip = next(self._ips)
        rep = EmulatedReplica(key, self.config, self.clock)
        await rep.start(_port(pod, self.default_port), host=ip)
        self.replicas[key] = rep
        self._ip_of[key] = ip
        await self._patch_status(key, pod)

    async def _patch_status(self, key: str, pod: Mapping[str, Any]) -> None:
        meta = pod["metadata"]
        ip = self._ip_of[key]
        now = _now()
        names = [c["name"] for c in pod["spec"].get("containers") or []]
        status = {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": ip,
            "podIPs": [{"ip": ip}],
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now}
                for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
            ],
            "containerStatuses": [
                {
                    "name": n,
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "image": "emulated-vllm",
                    "imageID": "emulated-vllm",
                    "state": {"running": {"startedAt": now}},
                }
                for n in names
            ],
        }
        try:
            await self.core.patch_namespaced_pod_status(
                meta["name"], meta["namespace"], {"status": status}, _content_type=MERGE_PATCH
            )
        except ApiException as err:
            if err.status == 404:  # deleted meanwhile
                await self._kill(key, meta, deleted=True)
            return  # otherwise the next event for this pod tries again
        self._reported.add(key)

    async def _kill(self, key: str, meta: Mapping[str, Any], *, deleted: bool) -> None:
        self._reported.discard(key)
        rep = self.replicas.pop(key, None)
        if rep is not None:
            await rep.stop(drain=False)
        if not deleted:
            with contextlib.suppress(ApiException):
                await self.core.delete_namespaced_pod(
                    meta["name"], meta["namespace"], grace_period_seconds=0
                )
