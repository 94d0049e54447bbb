"""A fleet for fault injection: the local Kubernetes API endpoint, >= 20 targets with
emulated vLLM pods, a few pods replaced by hostile servers, and the real control loop
(real KubeCluster, informers, pod scrape source) stepped tick by tick on a fake clock.

Each target has ``PODS`` pods; in a faulty target the last pod is hostile. Policies ask
``waiting / 4`` replicas with no scale-down stabilisation, so an idle healthy target goes
2 -> 1 at once: a faulty target that does not is holding because of its faulty pod.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from autoscaler.control.adapters import CapacityPort, KubeCluster
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalPort
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, TargetRef
from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.kube.cache import ClusterCache
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.kube.scale import ScaleClient
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.names import METRICS_PORT_ANNOTATION
from autoscaler.policy.schema import load_policy
from autoscaler.retry import RetryPolicy
from autoscaler.store.base import StoredTarget
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.support.hanging import HangingServer
from tests.support.waiting import until

TARGETS = 20
PODS = 2
REPLICAS = 2
NAMESPACE = "llm"
POLICY = {
    "minReplicaCount": 1,
    "maxReplicaCount": 10,
    "metrics": [{"signal": "waiting", "target": 4}],
    "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    "capacity": {"enforce": False},
}

Page = Callable[[int], bytes]  # scrape number -> page body


def vllm_page(waiting: float) -> bytes:
    """A minimal vLLM V1 page with ``waiting`` written as Prometheus writes floats."""
    text = "+Inf" if waiting == math.inf else "-Inf" if waiting == -math.inf else repr(waiting)
    text = "NaN" if math.isnan(waiting) else text
    return (
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="m",engine="0"}} {text}\n'
        "# TYPE vllm:num_requests_running gauge\n"
        'vllm:num_requests_running{model_name="m",engine="0"} 1.0\n'
    ).encode()


@dataclass
class HostilePod:
    """One misbehaving pod on loopback: ``page`` answers, ``hang`` never answers,
    ``close`` drops each connection unanswered (the last two are a `HangingServer`)."""

    mode: str  # "page" | "hang" | "close"
    page: Page | None = None
    port: int = 0
    _served: int = 0
    _runner: web.AppRunner | None = None
    _peer: HangingServer | None = None

    @property
    def scrapes(self) -> int:
        """Scrapes met: pages served, or connections accepted by a hanging/closing pod."""
        return self._peer.accepted if self._peer is not None else self._served

    async def start(self) -> None:
        if self.mode == "page":
            app = web.Application()
            app.router.add_get("/metrics", self._metrics)
            self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
            await self._runner.setup()
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = self._runner.addresses[0][1]
            return
        self._peer = HangingServer(close_at_once=self.mode == "close")
        await self._peer.start()
        self.port = self._peer.port

    async def _metrics(self, _: web.Request) -> web.Response:
        assert self.page is not None
        self._served += 1
        return web.Response(body=self.page(self._served), content_type="text/plain")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._peer is not None:
            await self._peer.stop()


@dataclass
class Fleet:
    kube: LocalKubeAPI
    loop: ControlLoop
    clock: FakeClock
    state: ControllerState
    refs: list[TargetRef]
    faulty: list[TargetRef]
    hostile: list[HostilePod]
    faulty_replicas: list[dict[TargetRef, int]] = field(default_factory=list)

    @property
    def healthy(self) -> list[TargetRef]:
        return [r for r in self.refs if r not in self.faulty]

    def replicas(self, ref: TargetRef) -> int:
        dep = self.kube.get("deployments", ref.namespace, ref.name, group="apps")
        assert dep is not None
        return int(dep["spec"]["replicas"])

    async def run_ticks(self, ticks: int) -> list[dict[TargetRef, Decision]]:
        """Step the loop ``ticks`` times; each tick's decisions by target, and the
        replicas of every faulty target after each tick in ``faulty_replicas``."""
        out: list[dict[TargetRef, Decision]] = []
        for _ in range(ticks):
            before = {r: len(self._history(r)) for r in self.refs}
            await self.loop.tick()
            out.append(
                {r: self._history(r)[-1] for r in self.refs if len(self._history(r)) > before[r]}
            )
            self.faulty_replicas.append({r: self.replicas(r) for r in self.faulty})
            await self.clock.advance(self.loop.tick_interval_s)
        return out

    def _history(self, ref: TargetRef) -> list[Decision]:
        st = self.state.status(ref)
        return [] if st is None else list(st.history)


def _deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "replicas": REPLICAS,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
            },
        },
    }


def _pod(name: str, app: str, port: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {"app": app},
            "annotations": {METRICS_PORT_ANNOTATION: str(port)},
        },
        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
    }


@contextlib.asynccontextmanager
async def fleet(
    hostile: Callable[[], HostilePod] | None = None,
    *,
    faulty_targets: int = 4,
    signals: Callable[[], Awaitable[SignalPort]] | None = None,
    scrape_timeout_s: float = 5.0,
    api_timeout_s: float = 5.0,
    capacity: CapacityPort | None = None,
) -> AsyncIterator[Fleet]:
    """Start the fleet; ``hostile()`` makes the last pod of the first ``faulty_targets``."""
    refs = [TargetRef(NAMESPACE, f"model-{i:02d}") for i in range(TARGETS)]
    faulty = refs[:faulty_targets] if hostile is not None else []
    clock = FakeClock()
    bad: list[HostilePod] = []
    async with EmulatorFleet() as emulators, LocalKubeAPI() as kube:
        api = api_client_for(kube.url)
        cache = ClusterCache(api)
        closers: list[Callable[[], Awaitable[None]]] = [cache.stop, api.close]
        try:
            for ref in refs:
                kube.create("deployments", _deployment(ref.name), group="apps")
                for j in range(PODS):
                    pod_name = f"{ref.name}-{j}"
                    if ref in faulty and j == PODS - 1:
                        assert hostile is not None
                        pod = hostile()
                        await pod.start()
                        bad.append(pod)
                        port = pod.port
                    else:
                        port = (await emulators.start_replica(pod_name)).port
                    kube.create("pods", _pod(pod_name, ref.name, port))
                    kube.mark_pod_ready(NAMESPACE, pod_name, ip="127.0.0.1")
            cache.start()
            await cache.wait_synced()
            retry = RetryPolicy(
                attempts=2, base_delay_s=0.01, max_delay_s=0.02, request_timeout_s=api_timeout_s
            )
            scale = ScaleClient(api, retry=retry)
            cluster = KubeCluster(api, cache=cache, scale=scale, clock=clock, capacity=capacity)
            if signals is None:
                source = PodScrapeSource(ScrapeConfig(timeout_s=scrape_timeout_s))
                reader: SignalPort = SourceSignals(source)
                closers.append(source.close)
            else:
                reader = await signals()
            state = ControllerState()
            loop = ControlLoop(state, cluster, reader, clock=clock)
            policy = load_policy({**POLICY, "capacity": {"enforce": capacity is not None}})
            loop.set_targets(
                [
                    StoredTarget(
                        TargetSpec(
                            ref=r, policy=policy, scale_target_ref=ScaleTargetRef(name=r.name)
                        ),
                        "1",
                    )
                    for r in refs
                ]
            )
            want = TARGETS * PODS
            await until(lambda: len(cache.pods.items) >= want, 10, f"{want} pods in the cache")
            yield Fleet(kube, loop, clock, state, refs, faulty, bad)
        finally:
            for pod in bad:
                await pod.stop()
            for close in reversed(closers):
                with contextlib.suppress(Exception):
                    await close()
