"""The benchmark's world: emulated vLLM pods behind the local Kubernetes API, real
Prometheus servers scraping them, and hooks that time each scale write and each tick."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from autoscaler.control.adapters import KubeCluster
from autoscaler.control.loop import ControlLoop
from autoscaler.demo.app import DemoOptions, _deployment, _node
from autoscaler.demo.runtime import EmulatorRuntime
from autoscaler.domain import Decision, TargetRef
from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.target import TargetSpec
from tests.support.prometheus import FileSdPrometheus, write_sd

REF = TargetRef("demo", "llama-3-8b")
SELECTOR = 'job="vllm"'
# KEDA's Prometheus trigger sends exactly one query (the seeds' ScaledObject).
KEDA_QUERIES: Mapping[str, str] = {"waiting": 'sum(vllm:num_requests_waiting{job="vllm"})'}
WAITING_TARGET = 8
# A held queue: 300 requests x (2048 prompt + 2048 output) keep >90 waiting for >40 s of
# emulated time at speed 1 (KV-bound), longer than the slowest chain's worst case.
JUMP_REQUESTS = 300
JUMP_PROMPT_TOKENS = 2048
JUMP_OUTPUT_TOKENS = 2048
EMULATOR_SPEED = 1.0
COLD_START_S = 2.0  # emulated; pods added by a scale-up are deleted again by the reset


@dataclass(frozen=True, slots=True)
class ScaleWrite:
    t_monotonic: float
    replicas_from: int
    replicas_to: int


class TimedKubeAPI(LocalKubeAPI):
    """The local API, plus the monotonic time at which each scale write is applied."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale_writes: list[ScaleWrite] = []
        self.on_scale_write: Callable[[ScaleWrite], None] | None = None

    def _scale(
        self, request: web.Request, rt: Any, current: dict[str, Any], body: Any
    ) -> tuple[dict[str, Any], int]:
        before = int((current.get("spec") or {}).get("replicas", 0))
        t = time.monotonic()  # the request is parsed; applying it takes microseconds
        scale, status = super()._scale(request, rt, current, body)
        after = int(scale["spec"]["replicas"])
        if request.method != "GET" and status == 200 and after != before:
            write = ScaleWrite(t, before, after)
            self.scale_writes.append(write)
            if self.on_scale_write is not None:
                self.on_scale_write(write)
        return scale, status


class TimedLoop(ControlLoop):
    """The control loop, plus the monotonic start time of each tick."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tick_starts: list[float] = []

    async def tick(self) -> list[Decision]:
        self.tick_starts.append(self.clock.now())
        return await super().tick()


class BenchError(RuntimeError):
    pass


async def until(pred: Callable[[], bool], deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() > end:
            raise BenchError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.02)


@dataclass
class World:
    """Everything the chains share; `start` builds it, `close` tears it all down."""

    tmp: Path
    fleet: EmulatorFleet = field(init=False)
    kube: TimedKubeAPI = field(init=False)
    cluster: KubeCluster = field(init=False)
    proms: dict[float, FileSdPrometheus] = field(default_factory=dict)
    _api: Any = None
    _sd_task: asyncio.Task[None] | None = None

    async def start(self, scrape_intervals: set[float]) -> None:
        sd = self.tmp / "targets.json"
        write_sd(sd, [])
        self.fleet = EmulatorFleet(speed=EMULATOR_SPEED)
        runtime = EmulatorRuntime(self.fleet, cold_start_s=COLD_START_S)
        self.kube = TimedKubeAPI(controller=True, runtime=runtime)
        await self.kube.start()
        self.kube.create("nodes", _node("gpu-node-1", 8))
        self.kube.create("deployments", _deployment(DemoOptions()), group="apps")
        for interval in sorted(scrape_intervals):
            prom = FileSdPrometheus(sd, interval)
            prom.start()
            self.proms[interval] = prom
        self._sd_task = asyncio.create_task(self._follow_pods(sd))
        self._api = api_client_for(self.kube.url)
        self.cluster = KubeCluster(self._api)
        await until(lambda: bool(self.fleet.ready_urls()), 30, "the first pod to be Ready")
        for prom in self.proms.values():
            await prom.wait_for(f"vllm:num_requests_waiting{{{SELECTOR}}}", deadline_s=60)

    async def _follow_pods(self, sd: Path) -> None:
        while True:
            write_sd(sd, self.fleet.ready_urls())
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self._sd_task is not None:
            self._sd_task.cancel()
            await asyncio.gather(self._sd_task, return_exceptions=True)
        await self.cluster.close()
        if self._api is not None:
            await self._api.close()
        for prom in self.proms.values():
            prom.stop()
        await self.kube.close()
        await self.fleet.stop_all()

    def pods(self) -> list[dict[str, Any]]:
        return self.kube.list_objects("pods", REF.namespace)

    def ready_pod(self) -> str:
        names = [r.name for r in self.fleet.replicas.values() if r.ready]
        if len(names) != 1:
            raise BenchError(f"expected one Ready replica, found {names}")
        return names[0]

    async def reset(self, spec: TargetSpec, prom: FileSdPrometheus | None) -> None:
        """One Ready replica, no queue anywhere, and every reader seeing exactly that."""
        for rep in self.fleet.replicas.values():
            rep.engine.abort_all()  # a pod restart: the held queue is gone
        dep = self.kube.get("deployments", REF.namespace, REF.name, group="apps")
        assert dep is not None
        if int(dep["spec"]["replicas"]) != 1:
            dep["spec"]["replicas"] = 1
            self.kube.update("deployments", dep, group="apps")
        await until(
            lambda: (
                len(self.pods()) == 1
                and len(self.fleet.replicas) == 1
                and next(iter(self.fleet.replicas.values())).ready
            ),
            30,
            "one Ready pod (and one emulator) after the reset",
        )
        end = time.monotonic() + 30
        while True:  # the loop's own view: the pod watcher has caught up
            view = await self.cluster.observe(spec)
            if view.spec_replicas == 1 and len(view.pods) == 1 and view.pending_replicas == 0:
                break
            if time.monotonic() > end:
                raise BenchError(f"the cluster view did not settle: {view}")
            await asyncio.sleep(0.05)
        if prom is not None:  # Prometheus must have scraped the empty queue
            end = time.monotonic() + 3 * prom.scrape_interval_s + 30
            while True:
                res = await asyncio.to_thread(prom.query, KEDA_QUERIES["waiting"])
                if res and float(res[0]["value"][1]) == 0.0:
                    break
                if time.monotonic() > end:
                    raise BenchError(f"Prometheus still shows a queue: {res}")
                await asyncio.sleep(0.1)
