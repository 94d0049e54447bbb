"""`llm-autoscaler demo`: the whole product on one machine, no cluster, no GPU.

Pieces, all real except the GPUs: a local Kubernetes-API-compatible endpoint whose
deployment controller turns each pod into an emulated vLLM replica (cold start, then
Ready) and an emulated node provisioner; the control loop reading the pods' /metrics,
forecasting, deciding and patching the Deployments' scale subresource through
kubernetes-asyncio; the REST API, dashboard and KEDA gRPC scaler; and a load generator
replaying a ramp of long prompts (KV pressure) and then a burst of the Azure code trace
(bundled) at two fleets side by side, on equal replica limits: one run by this controller
(with a warm pool), one by the seeds' KEDA+HPA policy (see `demo.load`). A second model
sits at zero replicas behind the activator: one request is held through its cold start
and answered, and the model goes back to zero when idle (see `demo.zero`). A third
target serves one model from two variants, MIG slices and full H100s, split by cost (see
`demo.variants`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from fastapi import APIRouter

from autoscaler.api.held import held_router
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import PortInUse, check_port_free, serve_http
from autoscaler.app import http_app
from autoscaler.control.adapters import KubeCluster, PlannerAdapter
from autoscaler.control.clock import MonotonicClock
from autoscaler.control.held import HeldCounts, poke_at_zero
from autoscaler.control.loop import ControlLoop
from autoscaler.control.signals import SourceSignals
from autoscaler.control.sleepers import SleeperController
from autoscaler.control.state import ControllerState
from autoscaler.control.tasks import TaskGroup
from autoscaler.demo import variants as mix
from autoscaler.demo.cluster import NodeProvisioner, deployment, node
from autoscaler.demo.compare import Comparison, headline
from autoscaler.demo.fleets import DEMO_POLICY, FleetSpec, fleets
from autoscaler.demo.load import PHASE_NOTES, RAMP_S, STEP_S, DemoLoad, demo_load
from autoscaler.demo.runtime import EmulatedClock, EmulatorRuntime
from autoscaler.demo.view import DemoView
from autoscaler.demo.zero import POOL as ZERO_POOL
from autoscaler.demo.zero import ZERO_POLICY, ZeroModel, start_activator
from autoscaler.domain import Decision, TargetRef
from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.emulator.loadgen import LoadGenerator, LoadReport
from autoscaler.errors import ConfigError
from autoscaler.kube.cache import ClusterCache
from autoscaler.kube.capacity import GpuCapacity
from autoscaler.kube.config import api_client_for
from autoscaler.kube.events import EventRecorder
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.kube.sleep import PodSleepClient
from autoscaler.kube.warmpool import WarmPoolManager
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.names import AWAKE_LABEL
from autoscaler.policy.schema import load_policy
from autoscaler.sim.traces import Trace, load_azure_csv, scale_rate
from autoscaler.store.base import PolicyStore
from autoscaler.store.file import FilePolicyStore
from autoscaler.target import ScaleTargetRef, TargetSpec

__all__ = ["DEMO_POLICY", "DemoOptions", "DemoResult", "PortInUse", "run_demo"]

# A 6-minute window of the Azure code trace (its busiest burst) ships with the package;
# see data/README.md for source and licence.
BUNDLED_TRACE = Path(__file__).resolve().parent / "data" / "azure_code_minutes_13_19.csv.gz"
BUNDLED_TRACE_OFFSET_S = 13 * 60.0
SHUTDOWN_GRACE_S = 5.0  # real seconds to cut in-flight requests once the time is up


@dataclass(frozen=True)
class DemoOptions:
    namespace: str = "demo"
    name: str = "llama-3-8b"
    http_host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 9090
    duration_s: float = 120.0  # real seconds, the first cold start included
    speed: float = 4.0
    headless: bool = False
    load_factor: float = 1.0  # the step: the code trace's own burst rate
    cold_start_s: float = 60.0  # emulated seconds (warm node, cached image, local weights)
    node_provision_s: float = 120.0  # emulated seconds to add a GPU node (calibration median)
    gpus_per_node: int = 2
    trace: Path | None = None
    trace_start_s: float = 13 * 60.0  # seconds into the code trace: its busiest minutes
    tick_s: float = 1.0  # emulated seconds
    summary_path: Path = Path("out/demo-summary.json")
    api_token: str | None = None  # else AUTOSCALER_API_TOKEN[_FILE], else generated
    zero_name: str = "mistral-7b"  # the second model, at zero behind the activator
    zero_send_at_s: float = 30.0  # emulated seconds: when its one request is sent
    variants_name: str = "qwen-2.5-7b"  # the third target: MIG slices and full H100s


@dataclass
class DemoResult:
    decisions: list[Decision] = field(default_factory=list)
    load: dict[str, LoadReport] = field(default_factory=dict)
    max_replicas: int = 0
    summary: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    api_token: str = ""


def burst_trace(opts: DemoOptions) -> Trace:
    """The bundled burst (or ``--trace`` from ``trace_start_s``) at ``load_factor``."""
    path = opts.trace or BUNDLED_TRACE
    if not path.exists():
        raise ConfigError(f"trace: file {str(path)!r} does not exist")
    trace = load_azure_csv(path)
    start = max(opts.trace_start_s - (BUNDLED_TRACE_OFFSET_S if opts.trace is None else 0.0), 0)
    window = trace.window(start, start + opts.duration_s * opts.speed)
    return scale_rate(window, opts.load_factor, seed=7) if opts.load_factor != 1 else window


def check_ports(opts: DemoOptions) -> None:
    """Fail before starting anything when a port is taken: one line naming it."""
    check_port_free(opts.http_host, opts.http_port, "--http-port")
    check_port_free(opts.http_host, opts.grpc_port, "--grpc-port")


def api_settings(opts: DemoOptions) -> tuple[ApiSettings, bool]:
    """--api-token, else AUTOSCALER_API_TOKEN[_FILE] (as docs/api.md says), else a new
    random token; the flag says whether it was generated (then it is printed)."""
    settings = ApiSettings.from_env()
    token = opts.api_token or settings.write_token
    generated = token is None
    return replace(settings, write_token=token or secrets.token_urlsafe(18)), generated


def _deployment(opts: DemoOptions) -> dict[str, Any]:
    """One vLLM Deployment on the ``default`` pool (tests and bench_reaction use it)."""
    return deployment(opts.namespace, opts.name, "default")


def _node(name: str, gpus: int) -> dict[str, Any]:
    """A ready GPU node of the ``default`` pool (see `_deployment`)."""
    return node(name, "default", gpus)


def _target(opts: DemoOptions, fleet: FleetSpec) -> TargetSpec:
    return TargetSpec(
        ref=TargetRef(opts.namespace, fleet.name),
        policy=fleet.policy,
        scale_target_ref=ScaleTargetRef(kind="Deployment", name=fleet.name),
        mode="direct",
    )


def _zero_target(opts: DemoOptions) -> TargetSpec:
    return TargetSpec(
        ref=TargetRef(opts.namespace, opts.zero_name),
        policy=load_policy(ZERO_POLICY),
        scale_target_ref=ScaleTargetRef(kind="Deployment", name=opts.zero_name),
        mode="direct",
    )


async def _follow_store(store: PolicyStore, loop: ControlLoop) -> None:
    async for targets in store.watch():
        loop.set_targets(targets)


async def _serve_grpc(state: ControllerState, opts: DemoOptions) -> Any:
    from autoscaler.keda.server import serve_grpc

    return await serve_grpc(state, opts.http_host, opts.grpc_port)


def _dashboard(state: ControllerState, comparison: Comparison) -> APIRouter:
    from autoscaler.api.dashboard import dashboard_router

    note = (
        "t and chart times: emulated seconds (the demo runs faster than real time; its "
        "policy windows and cold starts are real-world values); 'updated': your wall clock"
    )
    return dashboard_router(state, comparison=comparison.feed, clock_note=note)


def _banner(
    url: str, grpc: str, opts: DemoOptions, token: str, generated: bool, activator: str
) -> str:
    ref = f"{opts.namespace}/{opts.name}"
    src = "generated for this run" if generated else "from --api-token / AUTOSCALER_API_TOKEN"
    return (
        f"dashboard: {url}/   REST API: {url}/docs   KEDA gRPC: {grpc}\n"
        f"activator: {activator}/v1/completions (model {opts.zero_name}, at 0 replicas)\n"
        f"API token ({src}): {token}\n"
        f"change the policy live, e.g.:\n"
        f"  curl -X PATCH -H 'Authorization: Bearer {token}' "
        f"-H 'Content-Type: application/merge-patch+json' "
        f"-d '{{\"maxReplicaCount\": 3}}' {url}/v1/targets/{ref}/policy\n"
        f'hand the target to KEDA instead: same URL without /policy, -d \'{{"mode": "keda"}}\''
    )


async def run_demo(
    opts: DemoOptions,
    out: TextIO,
    *,
    on_ready: Callable[[DemoResult], None] | None = None,
    started: float | None = None,
) -> DemoResult:
    """Run for ``duration_s`` real seconds from ``started`` (time.monotonic(); default
    now), then stop in order: load cut, loop and servers stopped, emulators closed."""
    check_ports(opts)
    deadline = (started if started is not None else time.monotonic()) + opts.duration_s
    result = DemoResult()
    settings, generated = api_settings(opts)
    result.api_token = settings.write_token or ""
    specs = fleets(opts.name)
    load = demo_load(burst_trace(opts))
    tasks = TaskGroup("demo")
    async with contextlib.AsyncExitStack() as stack:
        tmp = Path(stack.enter_context(_tempdir()))
        fleet = EmulatorFleet(speed=opts.speed)
        stack.push_async_callback(fleet.stop_all)
        clock = EmulatedClock(fleet, wall_start=time.time())
        mix_deps = mix.deployments(opts.namespace, opts.variants_name)
        mix_apps = [d["metadata"]["name"] for d in mix_deps]
        apps = frozenset({*(f.name for f in specs), opts.zero_name, *mix_apps})
        runtime = EmulatorRuntime(fleet, opts.cold_start_s, apps=apps)
        kube = LocalKubeAPI(controller=True, runtime=runtime, clock=clock.wall)
        runtime.sliced, runtime.slices = frozenset({opts.zero_name}), kube
        runtime.models[opts.zero_name] = opts.zero_name  # what the activator routes by
        runtime.sleep_mode = frozenset({opts.zero_name})  # its sleepers wake in seconds
        await kube.start()
        stack.push_async_callback(kube.close)
        provisioner = NodeProvisioner(
            kube, clock, gpus_per_node=opts.gpus_per_node, provision_s=opts.node_provision_s
        )
        stack.push_async_callback(provisioner.close)
        for f in specs:
            provisioner.add_ready(f.key, f.initial_nodes)
            kube.create("deployments", deployment(opts.namespace, f.name, f.key), group="apps")
        provisioner.add_ready(ZERO_POOL, 2)  # room for its maxReplicaCount
        zero_dep = deployment(
            opts.namespace,
            opts.zero_name,
            ZERO_POOL,
            replicas=0,
            template_labels={AWAKE_LABEL: "true"},
        )
        kube.create("deployments", zero_dep, group="apps")
        for n in mix.nodes():  # a fixed pool: no node is added, the slices run out
            kube.create("nodes", n)
        for d in mix_deps:
            kube.create("deployments", d, group="apps")
        timeline = mix.VariantTimeline(opts.namespace, opts.variants_name, kube)
        api = api_client_for(kube.url)
        stack.push_async_callback(api.close)

        store = FilePolicyStore(tmp / "policies.yaml")
        for f in specs:
            await store.put(_target(opts, f))
        await store.put(_zero_target(opts))
        await store.put(mix.target(opts.namespace, opts.variants_name))
        state = ControllerState()
        metrics = ControllerMetrics()
        cache = ClusterCache(api)
        stack.push_async_callback(cache.stop)
        recorder = EventRecorder(api, instance="demo", wall_clock=clock.wall)
        cluster = KubeCluster(
            api,
            cache=cache,
            capacity=GpuCapacity(cache),
            warm_pool=WarmPoolManager(api),
            recorder=recorder,
            clock=clock,
        )
        stack.push_async_callback(cluster.close)
        signals = SourceSignals(PodScrapeSource(ScrapeConfig(window_s=10.0, stale_after_s=5.0)))
        stack.push_async_callback(signals.close)
        # The model at zero keeps sleepers (ZERO_POLICY's `sleep`): emulated seconds for
        # their TTL, and a settle time short in real seconds (the demo runs faster).
        sleep_io = PodSleepClient(api)
        stack.push_async_callback(sleep_io.close)
        sleepers = SleeperController(
            sleep_io, events=recorder, observer=metrics, wall=clock.wall, settle_s=0.1
        )
        loop = ControlLoop(
            state,
            cluster,
            signals,
            planner_factory=PlannerAdapter,
            observer=metrics,
            clock=clock,
            tick_interval_s=opts.tick_s,
            sleepers=sleepers,
        )
        # Activators push held counts (real-time TTLs); the first held request at zero
        # pokes the loop, as in `autoscaler.app.Controller`.
        held = HeldCounts(MonotonicClock(), poke_at_zero(state, loop.poke))
        loop.held = held
        loop.set_targets(await store.list())
        comparison = Comparison(specs, opts.namespace, kube, runtime, state, clock, load.phase)
        app = http_app(state, store, settings, metrics, _dashboard(state, comparison))
        app.include_router(held_router(held, settings))
        http = await serve_http(app, opts.http_host, opts.http_port)
        stack.push_async_callback(http.stop)
        activator = await start_activator(opts.namespace, opts.zero_name, http.url, api)
        stack.push_async_callback(activator.stop)
        grpc = await _serve_grpc(state, opts)
        stack.push_async_callback(grpc.stop)
        stack.push_async_callback(tasks.stop)
        tasks.spawn("store-watch", _follow_store(store, loop))
        tasks.spawn("control-loop", loop.run())
        tasks.spawn("node-provisioner", provisioner.run([f.key for f in specs]))
        result.url = http.url
        banner = _banner(http.url, grpc.target, opts, result.api_token, generated, activator.url)
        print(banner, file=out)
        out.flush()
        if on_ready is not None:
            on_ready(result)

        view = DemoView(
            out,
            live=not opts.headless,
            titles={f.key: f.title for f in specs},
            cold_start_s=opts.cold_start_s,
        )
        stop = asyncio.Event()
        loads: dict[str, asyncio.Task[LoadReport]] = {}
        mix_load: dict[str, asyncio.Task[LoadReport]] = {}
        zero = ZeroModel(opts.namespace, opts.zero_name, kube, clock, view.note)
        with view:
            tasks.spawn("zero-client", zero.run(activator.url, opts.zero_send_at_s))
            while time.monotonic() < deadline:
                t, samples = comparison.sample()
                view.update(t, samples)
                if not loads and all(runtime.ready_urls(f.name) for f in specs):
                    loads = _start_load(specs, runtime, comparison, opts, load, stop, tasks)
                changed = timeline.sample(clock.now())
                if changed is not None:
                    view.variants(f"mig {changed[0]}/{mix.SLICES} slices, h100 {changed[1]}")
                if not mix_load and runtime.ready_urls(mix_apps[0]):
                    mix_load = _start_mix_load(mix_apps, runtime, opts, stop, tasks)
                await asyncio.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        runtime.stopping = True
        stop.set()
        result.load = await _collect(loads)
        mix_report = await _collect(mix_load)
        for f in specs:
            status = state.status(TargetRef(opts.namespace, f.name))
            if f.key == "ours" and status is not None:
                result.decisions = list(status.history)
        result.max_replicas = max((d.current_replicas for d in result.decisions), default=0)
        result.summary = summarize(result, opts, comparison.totals())
        result.summary["zero"] = zero.summary()
        timeline.sample(clock.now())
        facts = timeline.summary()
        report = mix_report.get("variants")
        facts["load"] = report.summary() if report is not None else None
        facts["line"] = mix.variants_line(facts)
        result.summary["variants"] = facts
    opts.summary_path.parent.mkdir(parents=True, exist_ok=True)
    opts.summary_path.write_text(json.dumps(result.summary, indent=2) + "\n")
    return result


TEMPDIR_PREFIX = "llm-autoscaler-demo-"
PID_FILE = "demo.pid"


def sweep_stale_tempdirs(root: Path | None = None) -> list[Path]:
    """Remove the temp directories of demos that were killed (their ``demo.pid`` names a
    process that is gone); a running demo's directory, or another user's, is kept."""
    import shutil
    import tempfile

    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{TEMPDIR_PREFIX}*"):
        try:
            if d.stat().st_uid != os.getuid():
                continue
            pid = int((d / PID_FILE).read_text().strip())
        except (OSError, ValueError):
            continue  # no pid file: not ours to judge
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(d, ignore_errors=True)
        removed.append(d)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _tempdir() -> Any:
    import tempfile

    sweep_stale_tempdirs()
    tmp = tempfile.TemporaryDirectory(prefix=TEMPDIR_PREFIX)
    (Path(tmp.name) / PID_FILE).write_text(f"{os.getpid()}\n")
    return tmp


def _start_load(
    specs: tuple[FleetSpec, ...],
    runtime: EmulatorRuntime,
    comparison: Comparison,
    opts: DemoOptions,
    load: DemoLoad,
    stop: asyncio.Event,
    tasks: TaskGroup,
) -> dict[str, asyncio.Task[LoadReport]]:
    """The same load at each fleet, from the moment both have a ready replica."""
    loads = {}
    for f in specs:
        gen = LoadGenerator(
            lambda name=f.name: runtime.ready_urls(name),  # type: ignore[misc]
            speed=opts.speed,
            balance="least-outstanding",
            max_duration_s=opts.duration_s,
            max_requests=50_000,
            request_timeout_s=120.0,
            on_result=lambda r, key=f.key: comparison.on_result(key, r),  # type: ignore[misc]
        )
        loads[f.key] = tasks.spawn(f"load-{f.key}", gen.run(load.trace, stop=stop))
    return loads


def _start_mix_load(
    apps: list[str],
    runtime: EmulatorRuntime,
    opts: DemoOptions,
    stop: asyncio.Event,
    tasks: TaskGroup,
) -> dict[str, asyncio.Task[LoadReport]]:
    """The third target's ramp at the Ready pods of both its Deployments (its Service)."""
    gen = LoadGenerator(
        lambda: [u for app in apps for u in runtime.ready_urls(app)],
        speed=opts.speed,
        balance="least-outstanding",
        max_duration_s=opts.duration_s,
        max_requests=50_000,
        request_timeout_s=120.0,
    )
    return {"variants": tasks.spawn("load-variants", gen.run(mix.trace(), stop=stop))}


async def _collect(loads: dict[str, asyncio.Task[LoadReport]]) -> dict[str, LoadReport]:
    """The load reports once the time is up (in-flight requests are cut, not lost)."""
    if not loads:
        return {}
    await asyncio.wait(loads.values(), timeout=SHUTDOWN_GRACE_S)
    out = {}
    for key, task in loads.items():
        if task.done() and not task.cancelled() and task.exception() is None:
            out[key] = task.result()
    return out


def summarize(result: DemoResult, opts: DemoOptions, fleets: dict[str, Any]) -> dict[str, Any]:
    changes = [d for d in result.decisions if d.changed]
    ups = [d for d in changes if d.desired_replicas > d.current_replicas]
    downs = [d for d in changes if d.desired_replicas < d.current_replicas]
    reasons: dict[str, int] = {}
    for d in result.decisions:
        reasons[str(d.reason)] = reasons.get(str(d.reason), 0) + 1
    load = {k: r.summary() for k, r in result.load.items()}
    for key, totals in fleets.items():
        if key not in load:  # the generator's report did not arrive in time: what ended
            seen = totals.pop("outcomes", {})
            load[key] = {"ok": seen.get("ok", 0), "failed": seen.get("failed", 0), "partial": True}
        totals.pop("outcomes", None)
        totals["load"] = load.get(key)
    return {
        "target": f"{opts.namespace}/{opts.name}",
        "duration_s": opts.duration_s,
        "speed": opts.speed,
        "times": (
            "duration_s and every load block (request latencies, TTFT, ITL: measured by the "
            "load generator's clock) are real seconds; decision, cold-start and node times "
            "are emulated seconds"
        ),
        "decisions": len(result.decisions),
        "scale_ups": len(ups),
        "scale_downs": len(downs),
        "max_replicas": result.max_replicas,
        "reasons": reasons,
        "first_scale_up": ups[0].message if ups else None,
        "first_scale_down": downs[0].message if downs else None,
        "load": load.get("ours"),
        "load_phases": {
            "time": "emulated seconds from the first moment both fleets have a ready replica",
            "ramp": {"from_s": 0.0, "to_s": RAMP_S, "what": PHASE_NOTES["ramp"]},
            "step": {"from_s": RAMP_S, "to_s": RAMP_S + STEP_S, "what": PHASE_NOTES["step"]},
        },
        "headline": headline(fleets),
        "fleets": fleets,
    }
