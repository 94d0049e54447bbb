"""Runs each pod the local API schedules as an emulated vLLM replica on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import replace
from typing import Any, Protocol

from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.emulator.server import EmulatedReplica
from autoscaler.kube.localapi.server import PodEndpoint
from autoscaler.kube.localapi.status import ApiError


class ObjectStore(Protocol):
    def create(self, plural: str, obj: dict[str, Any], group: str = "") -> dict[str, Any]: ...

    def delete(self, plural: str, namespace: str | None, name: str, group: str = "") -> None: ...


def endpoint_slice(namespace: str, pod: str, service: str, port: int) -> dict[str, Any]:
    """One Ready pod's EndpointSlice (one per pod: each emulator has its own port)."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": pod,
            "namespace": namespace,
            "labels": {"kubernetes.io/service-name": service},
        },
        "addressType": "IPv4",
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}],
        "endpoints": [
            {
                "addresses": ["127.0.0.1"],
                "conditions": {"ready": True},
                # the pod behind the address: the activator leaves sleepers out by it
                "targetRef": {"kind": "Pod", "namespace": namespace, "name": pod},
            }
        ],
    }


class EmulatorRuntime:
    """`PodRuntime`: a pod of one of the demo's vLLM Deployments (label ``app`` in
    ``apps``) becomes a new emulator, Ready once its cold start is over (its /health
    answers 200); a deleted pod drains its in-flight requests. Both fleets share one
    `EmulatorFleet`, hence one emulated clock; `app_of` says which fleet a replica is in.
    With ``apps=None`` every pod is a vLLM pod (tests, benchmarks)."""

    def __init__(
        self,
        fleet: EmulatorFleet,
        cold_start_s: float,
        apps: frozenset[str] | None = None,
        poll_s: float = 0.05,
        pre_stop_s: float = 5.0,  # emulated seconds, like a `preStop: sleep 5`
    ) -> None:
        self.fleet = fleet
        self.apps = apps
        self.cold_start_s = cold_start_s
        self.poll_s = poll_s
        self.pre_stop_s = pre_stop_s
        self.app_of: dict[str, str] = {}
        self.leaving: set[str] = set()  # deleted pods out of the endpoints, in preStop
        self.stopping = False
        # Apps whose Ready pods get an EndpointSlice (read by the activator) in ``slices``.
        self.sliced: frozenset[str] = frozenset()
        self.slices: ObjectStore | None = None
        self.models: dict[str, str] = {}  # app -> the model name its pods serve
        # Apps whose replicas run vLLM's sleep mode (/sleep, /wake_up, /is_sleeping).
        self.sleep_mode: frozenset[str] = frozenset()

    def _app(self, pod: dict[str, Any]) -> str | None:
        app = str((pod["metadata"].get("labels") or {}).get("app", ""))
        if self.apps is None:
            return app
        return app if app in self.apps else None

    async def start(self, pod: dict[str, Any]) -> PodEndpoint:
        """Pods of the vLLM Deployments become emulators; any other pod (the warm pool's
        pause pods) is Ready at once and serves nothing."""
        name = pod["metadata"]["name"]
        app = self._app(pod)
        if app is None:
            return PodEndpoint(ip="127.0.0.1")
        self.app_of[name] = app
        replica = self.fleet.replicas.get(name)  # idempotent: a pod starts one emulator
        if replica is None:
            config = replace(self.fleet.defaults, sleep_mode=app in self.sleep_mode)
            replica = await self.fleet.start_replica(
                name, cold_start_s=self.cold_start_s, model=self.models.get(app), config=config
            )
        while not replica.ready:  # noqa: ASYNC110 (the emulator exposes no ready event)
            await asyncio.sleep(self.poll_s)
        if app in self.sliced and self.slices is not None:
            ns = pod["metadata"].get("namespace", "default")
            with contextlib.suppress(ApiError):  # 409: published by an earlier start
                self.slices.create(
                    "endpointslices",
                    endpoint_slice(ns, name, app, replica.port),
                    "discovery.k8s.io",
                )
        return PodEndpoint(ip="127.0.0.1", metrics_port=replica.port)

    async def stop(self, pod: dict[str, Any]) -> None:
        """As a Service does: the pod leaves the endpoints first (the load generator
        stops picking it) while it still serves, a preStop grace passes so requests
        already routed to it arrive and are answered, then it drains its in-flight
        requests and exits (refusing new ones only from then on)."""
        name = pod["metadata"]["name"]
        replica = self.fleet.replicas.get(name)
        if replica is None or self.stopping:
            return
        self.leaving.add(name)
        if self.app_of.get(name) in self.sliced and self.slices is not None:
            with contextlib.suppress(ApiError):  # 404: already withdrawn
                ns = pod["metadata"].get("namespace", "default")
                self.slices.delete("endpointslices", ns, name, "discovery.k8s.io")
        await asyncio.sleep(max(0.5, self.fleet.clock.real_duration(self.pre_stop_s)))
        if name in self.fleet.replicas and not self.stopping:
            await self.fleet.stop_replica(name, drain=True)

    def replicas(self, app: str) -> list[EmulatedReplica]:
        return [r for n, r in self.fleet.replicas.items() if self.app_of.get(n) == app]

    def ready_urls(self, app: str) -> list[str]:
        """Base URLs of ``app``'s Ready replicas (what its Service routes to)."""
        return [r.url for r in self.replicas(app) if r.ready and r.name not in self.leaving]


class EmulatedClock:
    """The demo's `Clock`: the control loop lives in the emulators' time, so policy
    windows, cooldowns, forecasts and learned cold starts are all in emulated seconds
    (realistic values) while the demo runs ``speed`` times faster than real time."""

    def __init__(self, fleet: EmulatorFleet, wall_start: float) -> None:
        self.fleet = fleet
        self.wall_start = wall_start

    def now(self) -> float:
        return self.fleet.clock.now()

    def wall(self) -> float:
        """Emulated epoch seconds (for Kubernetes timestamps)."""
        return self.wall_start + self.fleet.clock.now()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, self.fleet.clock.real_duration(seconds)))
