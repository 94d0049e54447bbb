"""The composition root: the controller process `llm-autoscaler run` starts, as one object.

Composition only (no decisions here): a policy store (the LLMAutoscaler CRD in a
cluster, a file locally), Kubernetes adapters, a metrics source, leader election, the
control loop, the REST API and the KEDA gRPC scaler. `start`/`stop` are explicit so tests
can run two controllers against one API endpoint. It sits above every layer it wires
(control, api, keda, kube, metrics, store), so none of them imports another's wiring;
`http_app` is the HTTP side the demo composes too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, FastAPI
from prometheus_client import Gauge

from autoscaler.api.app import create_app
from autoscaler.api.held import held_router
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import HttpServerHandle, serve_http
from autoscaler.control.adapters import KubeCluster, PlannerAdapter, StatusWriterPort
from autoscaler.control.held import HeldCounts, poke_at_zero
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import AlwaysLeader, LeaderPort, SignalPort
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.control.tasks import TaskGroup
from autoscaler.domain import TargetRef
from autoscaler.errors import AutoscalerError
from autoscaler.keda.server import GrpcServerHandle, GrpcTls, serve_grpc
from autoscaler.kube.cache import ClusterCache
from autoscaler.kube.capacity import GpuCapacity
from autoscaler.kube.config import KubeClients
from autoscaler.kube.events import EventRecorder
from autoscaler.kube.leader import LeaderElector, LeaseConfig
from autoscaler.kube.sharding import ShardConfig, ShardManager, ShardStatus
from autoscaler.kube.warmpool import WarmPoolManager
from autoscaler.logging import get_logger
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.prometheus import (
    RECORDED_QUERIES,
    VLLM_QUERIES,
    PrometheusSource,
    WorkloadPods,
)
from autoscaler.metrics.scrape_workers import ScrapeWorkers, WorkerConfig
from autoscaler.settings import Settings
from autoscaler.store.base import PolicyStore
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.store.file import FilePolicyStore

log = get_logger(__name__)


def _identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def _lease_namespace(settings: Settings) -> str:
    """``--lease-namespace`` / AUTOSCALER_LEASE_NAMESPACE, else the pod's own namespace."""
    return (
        settings.lease_namespace
        or os.environ.get("POD_NAMESPACE")
        or settings.namespace
        or "default"
    )


def http_app(
    state: ControllerState,
    store: PolicyStore,
    settings: ApiSettings,
    metrics: ControllerMetrics,
    dashboard: APIRouter | None = None,
) -> FastAPI:
    """The REST API, health, /metrics and the dashboard (``dashboard``: another one, e.g.
    the demo's with its comparison feed; default: the controller's)."""
    app = create_app(state, store, settings, metrics=metrics)
    if dashboard is None:
        from autoscaler.api.dashboard import dashboard_router

        dashboard = dashboard_router(state)
    app.include_router(dashboard)
    return app


@dataclass
class Controller:
    settings: Settings
    api: Any  # kubernetes_asyncio ApiClient
    identity: str = field(default_factory=_identity)
    state: ControllerState = field(default_factory=ControllerState)
    metrics: ControllerMetrics = field(default_factory=ControllerMetrics)
    http: HttpServerHandle | None = None
    grpc: GrpcServerHandle | None = None
    elector: LeaderElector | None = None
    shards: ShardManager | None = None  # instead of `elector` when settings.shards > 1
    loop: ControlLoop | None = None
    store: PolicyStore | None = None
    cache: ClusterCache | None = None
    cluster: KubeCluster | None = None
    held: HeldCounts | None = None  # requests held at the activators (control/held.py)
    _tasks: TaskGroup = field(default_factory=lambda: TaskGroup("controller"))
    _shards_held: Gauge | None = None
    _closers: list[Any] = field(default_factory=list)

    def _store(self) -> tuple[PolicyStore, StatusWriterPort | None]:
        if self.settings.policy_file:
            return FilePolicyStore(self.settings.policy_file), None
        crd = CrdPolicyStore(self.api, self.settings.namespace)
        return crd, crd

    def _signals(self) -> SignalPort:
        s = self.settings
        if s.prometheus_url:
            state = self.state

            def selector(key: str) -> str | WorkloadPods:
                # O(1): the batch asks for every target's selector each tick
                namespace, _, name = key.partition("/")
                st = state.targets.get(TargetRef(namespace, name))
                if st is None:
                    return 'namespace="",pod=""'
                return WorkloadPods(namespace, st.spec.scale_target_ref.name)

            queries = RECORDED_QUERIES if s.prometheus_recorded_rules else VLLM_QUERIES
            return SourceSignals(PrometheusSource(s.prometheus_url, selector, queries))
        config = ScrapeConfig(
            timeout_s=s.scrape_timeout_s,
            max_concurrency=s.scrape_concurrency,
            filter_families=s.scrape_filter_families,
        )
        if s.scrape_workers:
            return SourceSignals(ScrapeWorkers(config, WorkerConfig(workers=s.scrape_workers)))
        return SourceSignals(PodScrapeSource(config))

    def _on_leader_change(self, leader: bool) -> None:
        self.state.is_leader = leader
        self.metrics.is_leader.set(1.0 if leader else 0.0)
        log.info("leadership changed", identity=self.identity, leader=leader)

    def _on_shards_change(self, status: ShardStatus) -> None:
        leader = bool(status.writable)
        if leader != self.state.is_leader:
            log.info("leadership changed", identity=self.identity, leader=leader)
        self.state.is_leader = leader
        self.state.leadership = status.as_dict()
        self.metrics.is_leader.set(1.0 if leader else 0.0)
        if self._shards_held is None:  # registered only when sharded (golden /metrics)
            self._shards_held = Gauge(
                "llm_autoscaler_shards_held",
                "Shard Leases this instance holds (settings.shards > 1).",
                registry=self.metrics.registry,
            )
        self._shards_held.set(len(status.held))
        log.info(
            "shards changed",
            identity=self.identity,
            held=list(status.held),
            writable=len(status.writable),
            members=len(status.members),
            blocked=status.blocked,
        )

    def _reports_invalid(self) -> bool:
        """Who writes validation failures: the leader, or the holder of shard 0."""
        if self.shards is not None:
            return self.shards.writable(0)
        return self.state.is_leader

    async def start(self) -> None:
        s = self.settings
        store, status = self._store()
        self.store = store
        # One pool per role: the informers' watches and leader election never wait for a
        # connection behind scale/status/Event writes or each other.
        clients = KubeClients.split(self.api)
        self._closers.append(clients.close)
        leader: LeaderPort = AlwaysLeader()
        timings = {
            "lease_duration_s": s.lease_duration_s,
            "renew_deadline_s": s.lease_duration_s * 2 / 3,
            "retry_period_s": max(s.lease_duration_s / 7.5, 0.1),
        }
        if s.leader_election and s.shards > 1:
            self.shards = ShardManager(
                clients.lease,
                ShardConfig(
                    namespace=_lease_namespace(s),
                    shards=s.shards,
                    prefix=s.shard_lease_prefix,
                    legacy_lease=s.lease_name,
                    **timings,
                ),
                self.identity,
                watch_api=clients.watch,
            )
            self.shards.start()
            self._closers.append(self.shards.stop)
            leader = self.shards
            self._on_shards_change(self.shards.status())
        elif s.leader_election:
            self.elector = LeaderElector(
                clients.lease,
                LeaseConfig(namespace=_lease_namespace(s), name=s.lease_name, **timings),
                self.identity,
            )
            leader = self.elector
        else:
            self._on_leader_change(True)
        cache = ClusterCache(clients.watch)
        self.cache = cache
        cache.start()
        self._closers.append(cache.stop)
        recorder = EventRecorder(self.api, instance=self.identity)
        cluster = KubeCluster(
            self.api,
            cache=cache,
            capacity=GpuCapacity(cache),
            warm_pool=WarmPoolManager(self.api),
            recorder=recorder,
            status=status,
        )
        self.cluster = cluster
        self._closers.append(cluster.close)
        signals = self._signals()
        if isinstance(signals, SourceSignals):
            self._closers.append(signals.close)
        self.loop = ControlLoop(
            self.state,
            cluster,
            signals,
            planner_factory=PlannerAdapter,
            leader=leader,
            observer=self.metrics,
            tick_interval_s=s.tick_interval_s,
            tick_phases=s.tick_phases,
            # Process-wide advisory or keda: never write replicas (KEDA's HPA owns them).
            dry_run=s.mode in ("advisory", "keda"),
            decides=(
                self.shards.can_write
                if self.shards is not None and s.shard_scope == "held"
                else None
            ),
        )
        self.loop.set_targets(await store.list(s.namespace))
        # Activators push held counts; the first for a target at zero pokes the loop.
        self.held = HeldCounts(self.loop.clock, poke_at_zero(self.state, self.loop.poke))
        self.loop.held = self.held
        api_settings = ApiSettings.from_env(s)
        app = http_app(self.state, store, api_settings, self.metrics)
        app.include_router(held_router(self.held, api_settings))
        self.http = await serve_http(app, s.http.host, s.http.port)
        self.grpc = await serve_grpc(
            self.state, s.grpc.host, s.grpc.port, tls=GrpcTls.from_settings(s.grpc)
        )
        if self.elector is not None:
            self._tasks.spawn("leader-election", self.elector.run(self._on_leader_change))
        if self.shards is not None:
            self._tasks.spawn("shard-leases", self.shards.run(self._on_shards_change))
        self._tasks.spawn("policy-watch", self._follow(store))
        if isinstance(store, CrdPolicyStore):
            self._tasks.spawn("invalid-report", self._report_invalid(store, recorder))
        self._tasks.spawn("control-loop", self.loop.run())
        log.info(
            "controller started",
            identity=self.identity,
            http=self.http.url,
            grpc_port=self.grpc.port,
            mode=s.mode,
        )

    async def _follow(self, store: PolicyStore) -> None:
        assert self.loop is not None
        async for targets in store.watch():
            self.loop.set_targets(targets)  # forgets removed targets everywhere, cluster too

    async def _report_invalid(self, store: CrdPolicyStore, recorder: EventRecorder) -> None:
        """The leader puts validation failures in status and a Warning Event (no API call
        while nothing changed)."""

        async def warn(involved: dict[str, str], reason: str, message: str) -> bool:
            return await recorder.emit_on(involved, reason, message, warning=True)

        while True:
            if self._reports_invalid():
                try:
                    await store.report_invalid(warn)
                except AutoscalerError as err:
                    log.warning("reporting invalid LLMAutoscalers failed", error=str(err))
            await asyncio.sleep(self.settings.tick_interval_s)

    async def stop(self) -> None:
        """Stop writing first (loop, lease), then stop serving."""
        await self._tasks.stop()
        if self.elector is not None:
            with contextlib.suppress(Exception):
                await self.elector.release()
        if self.shards is not None:
            with contextlib.suppress(Exception):
                await self.shards.release_all()
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                await close()
        if self.grpc is not None:
            await self.grpc.stop()
        if self.http is not None:
            await self.http.stop()
