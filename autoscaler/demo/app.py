"""`llm-autoscaler demo`: the whole product on one machine, no cluster, no GPU.

Pieces, all real except the GPUs: a local Kubernetes-API-compatible endpoint whose
deployment controller turns each pod into an emulated vLLM replica (cold start, then
Ready); the control loop reading the pods' /metrics, forecasting, deciding and patching
the Deployment's scale subresource through kubernetes-asyncio; the REST API, dashboard and
KEDA gRPC scaler; and a load generator replaying a burst from a shared Azure trace.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from autoscaler.api.app import create_app
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import serve_http
from autoscaler.control.adapters import KubeCluster, PlannerAdapter
from autoscaler.control.loop import ControlLoop
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.control.tasks import TaskGroup
from autoscaler.demo.runtime import EmulatedClock, EmulatorRuntime
from autoscaler.demo.view import DemoView
from autoscaler.domain import Decision, TargetRef
from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.emulator.loadgen import LoadGenerator, LoadReport
from autoscaler.errors import ConfigError
from autoscaler.kube.cache import ClusterCache
from autoscaler.kube.capacity import GpuCapacity
from autoscaler.kube.config import api_client_for
from autoscaler.kube.events import EventRecorder
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.kube.warmpool import WarmPoolManager
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.policy.schema import load_policy
from autoscaler.sim.traces import Trace, load_azure_csv, scale_rate
from autoscaler.store.base import PolicyStore, ScaleTargetRef, TargetSpec
from autoscaler.store.file import FilePolicyStore

# A 6-minute window of the Azure code trace (its busiest burst) ships with the package;
# see data/README.md for source and licence.
BUNDLED_TRACE = Path(__file__).resolve().parent / "data" / "azure_code_minutes_13_19.csv.gz"
BUNDLED_TRACE_OFFSET_S = 13 * 60.0

# The control loop runs in emulated time (see EmulatedClock), so these are the values a
# user would run in production: windows, cooldowns and cold starts in real-world seconds.
DEMO_POLICY: dict[str, Any] = {
    "minReplicaCount": 1,
    "maxReplicaCount": 6,
    "cooldownPeriod": 300,
    "pollingInterval": 1,
    "metrics": [
        {"signal": "waiting", "type": "AverageValue", "target": 4},
        {"signal": "running", "type": "AverageValue", "target": 48},
        {"signal": "kv_cache_usage", "type": "Value", "target": 0.8},
    ],
    "behavior": {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15},
                {"type": "Pods", "value": 4, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 60,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 20}],
        },
    },
    "panic": {"windowSeconds": 6, "threshold": 2.0, "stableWindowSeconds": 60},
    "prediction": {"enabled": True, "forecaster": "auto", "coldStartPriorSeconds": 60},
    "warmPool": {"enabled": True, "minReplicas": 0, "maxReplicas": 2, "leadTimeSeconds": 120},
}


@dataclass(frozen=True)
class DemoOptions:
    namespace: str = "demo"
    name: str = "llama-3-8b"
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 9090
    duration_s: float = 120.0
    speed: float = 4.0
    headless: bool = False
    load_factor: float = 4.0
    cold_start_s: float = 60.0  # emulated seconds (warm node, cached image, local weights)
    trace: Path | None = None
    trace_start_s: float = 13 * 60.0  # seconds into the code trace: its busiest minutes
    tick_s: float = 1.0  # emulated seconds
    summary_path: Path = Path("out/demo-summary.json")


@dataclass
class DemoResult:
    decisions: list[Decision] = field(default_factory=list)
    load: LoadReport | None = None
    max_replicas: int = 0
    summary: dict[str, Any] = field(default_factory=dict)


def burst_trace(opts: DemoOptions) -> Trace:
    """The first 40% of the run is the burst, the rest is quiet for the scale-down."""
    path = opts.trace or BUNDLED_TRACE
    if not path.exists():
        raise ConfigError(f"trace: file {str(path)!r} does not exist")
    trace = load_azure_csv(path)
    start = opts.trace_start_s - (BUNDLED_TRACE_OFFSET_S if opts.trace is None else 0.0)
    burst_s = opts.duration_s * opts.speed * 0.4
    window = trace.window(max(start, 0.0), max(start, 0.0) + burst_s)
    return scale_rate(window, opts.load_factor, seed=7) if opts.load_factor != 1 else window


def _deployment(opts: DemoOptions) -> dict[str, Any]:
    labels = {"app": opts.name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": opts.name, "namespace": opts.namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11.0",
                            "ports": [{"containerPort": 8000, "name": "http"}],
                            "resources": {"limits": {"nvidia.com/gpu": "1"}},
                        }
                    ]
                },
            },
        },
    }


def _node(name: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)},
            "capacity": {"cpu": "64", "memory": "512Gi", "nvidia.com/gpu": str(gpus)},
        },
    }


async def _follow_store(store: PolicyStore, loop: ControlLoop) -> None:
    async for targets in store.watch():
        loop.set_targets(targets)


async def run_demo(
    opts: DemoOptions,
    out: TextIO,
    *,
    on_ready: Callable[[str], None] | None = None,
) -> DemoResult:
    ref = TargetRef(opts.namespace, opts.name)
    result = DemoResult()
    tasks = TaskGroup("demo")
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="llm-autoscaler-demo-")))
        fleet = EmulatorFleet(speed=opts.speed)
        stack.push_async_callback(fleet.stop_all)
        clock = EmulatedClock(fleet, wall_start=time.time())
        kube = LocalKubeAPI(
            controller=True,
            runtime=EmulatorRuntime(fleet, opts.cold_start_s, match_labels={"app": opts.name}),
            clock=clock.wall,
        )
        await kube.start()
        stack.push_async_callback(kube.close)
        kube.create("nodes", _node("gpu-node-1", 8))
        kube.create("deployments", _deployment(opts), group="apps")
        api = api_client_for(kube.url)
        stack.push_async_callback(api.close)

        store = FilePolicyStore(tmp / "policies.yaml")
        await store.put(
            TargetSpec(
                ref=ref,
                policy=load_policy(DEMO_POLICY),
                scale_target_ref=ScaleTargetRef(kind="Deployment", name=opts.name),
                mode="direct",
            )
        )
        state = ControllerState()
        metrics = ControllerMetrics()
        cache = ClusterCache(api)
        stack.push_async_callback(cache.stop)
        cluster = KubeCluster(
            api,
            cache=cache,
            capacity=GpuCapacity(cache),
            warm_pool=WarmPoolManager(api),
            recorder=EventRecorder(api, instance="demo", wall_clock=clock.wall),
            clock=clock,
        )
        stack.push_async_callback(cluster.close)
        signals = SourceSignals(PodScrapeSource(ScrapeConfig(window_s=10.0, stale_after_s=5.0)))
        stack.push_async_callback(signals.close)
        loop = ControlLoop(
            state,
            cluster,
            signals,
            planner_factory=PlannerAdapter,
            observer=metrics,
            clock=clock,
            tick_interval_s=opts.tick_s,
        )
        loop.set_targets(await store.list())
        app = create_app(state, store, ApiSettings(), metrics=metrics)
        _mount_dashboard(app, state)
        http = await serve_http(app, opts.http_host, opts.http_port)
        stack.push_async_callback(http.stop)
        grpc_stop = await _serve_grpc(state, opts)
        if grpc_stop is not None:
            stack.push_async_callback(grpc_stop)
        stack.push_async_callback(tasks.stop)
        tasks.spawn("store-watch", _follow_store(store, loop))
        tasks.spawn("control-loop", loop.run())
        if on_ready is not None:
            on_ready(http.url)
        print(
            f"dashboard: {http.url}/   REST API: {http.url}/docs   "
            f"KEDA gRPC: {opts.http_host}:{opts.grpc_port}",
            file=out,
            flush=True,
        )

        await _wait_for_ready_pod(fleet, timeout_s=max(30.0, 3 * opts.cold_start_s / opts.speed))
        loadgen = LoadGenerator(
            fleet.ready_urls,
            speed=opts.speed,
            balance="least-outstanding",
            max_duration_s=opts.duration_s,
            max_requests=50_000,
            request_timeout_s=60.0,
        )
        load_task = tasks.spawn("load", loadgen.run(burst_trace(opts)))
        view = DemoView(out, live=not opts.headless)
        started = time.monotonic()
        with view:
            while time.monotonic() - started < opts.duration_s:
                await asyncio.sleep(1.0)
                status = state.status(ref)
                if status is not None and status.last_decision is not None:
                    obs = status.observations[-1] if status.observations else None
                    view.update(clock.now(), status.last_decision, obs)
                    result.max_replicas = max(
                        result.max_replicas, status.last_decision.current_replicas
                    )
        if load_task.done() and not load_task.cancelled() and load_task.exception() is None:
            result.load = load_task.result()
        status = state.status(ref)
        result.decisions = list(status.history) if status is not None else []
        result.summary = summarize(result, opts)
    opts.summary_path.parent.mkdir(parents=True, exist_ok=True)
    opts.summary_path.write_text(json.dumps(result.summary, indent=2) + "\n")
    return result


def _mount_dashboard(app: Any, state: ControllerState) -> None:
    from autoscaler.api.dashboard import dashboard_router

    app.include_router(dashboard_router(state))


async def _serve_grpc(state: ControllerState, opts: DemoOptions) -> Callable[[], Any] | None:
    from autoscaler.keda.server import serve_grpc

    handle = await serve_grpc(state, opts.http_host, opts.grpc_port)
    return handle.stop


async def _wait_for_ready_pod(fleet: EmulatorFleet, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not fleet.ready_urls():
        if time.monotonic() > deadline:
            raise ConfigError(f"no emulated pod became ready within {timeout_s:.0f} s")
        await asyncio.sleep(0.1)


def summarize(result: DemoResult, opts: DemoOptions) -> dict[str, Any]:
    changes = [d for d in result.decisions if d.changed]
    ups = [d for d in changes if d.desired_replicas > d.current_replicas]
    downs = [d for d in changes if d.desired_replicas < d.current_replicas]
    reasons: dict[str, int] = {}
    for d in result.decisions:
        reasons[str(d.reason)] = reasons.get(str(d.reason), 0) + 1
    load = result.load.summary() if result.load is not None else None
    return {
        "target": f"{opts.namespace}/{opts.name}",
        "duration_s": opts.duration_s,
        "speed": opts.speed,
        "decisions": len(result.decisions),
        "scale_ups": len(ups),
        "scale_downs": len(downs),
        "max_replicas": result.max_replicas,
        "reasons": reasons,
        "first_scale_up": ups[0].message if ups else None,
        "first_scale_down": downs[0].message if downs else None,
        "load": load,
    }
