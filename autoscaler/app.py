"""The composition root: the controller process `llm-autoscaler run` starts, as one object.

Composition only (no decisions here): a policy store (the LLMAutoscaler CRD in a
cluster, a file locally), Kubernetes adapters, a metrics source, leadership (the shard
Leases of `kube.sharding`; one shard is leader election), the
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
from autoscaler.api.connections import ConnectionLimits, connection_cap, raise_fd_limit
from autoscaler.api.held import held_router
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import HttpServerHandle, serve_http
from autoscaler.control.adapters import KubeCluster, PlannerAdapter, StatusWriterPort
from autoscaler.control.held import HeldCounts, poke_at_zero
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import AlwaysLeader, LeaderPort, SignalPort
from autoscaler.control.roles import split_role_ref
from autoscaler.control.signals import SourceSignals, workload_pods
from autoscaler.control.sleepers import SleeperController
from autoscaler.control.state import ControllerState
from autoscaler.control.tasks import TaskGroup
from autoscaler.domain import TargetRef
from autoscaler.errors import AutoscalerError
from autoscaler.keda.server import GrpcServerHandle, GrpcTls, serve_grpc
from autoscaler.kube.cache import ClusterCache
from autoscaler.kube.capacity import GpuCapacity
from autoscaler.kube.config import KubeClients
from autoscaler.kube.events import EventRecorder
from autoscaler.kube.sharding import ShardConfig, ShardManager, ShardStatus
from autoscaler.kube.sleep import PodSleepClient
from autoscaler.kube.warmpool import WarmPoolManager
from autoscaler.logging import get_logger
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.prometheus import (
    RECORDED_QUERIES,
    VLLM_QUERIES,
    PrometheusSource,
    WorkloadPods,
)
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
    leases: ShardManager | None = None  # None: leader_election false (always the writer)
    loop: ControlLoop | None = None
    store: PolicyStore | None = None
    cache: ClusterCache | None = None
    cluster: KubeCluster | None = None
    held: HeldCounts | None = None  # requests held at the activators (control/held.py)
    _tasks: TaskGroup = field(default_factory=lambda: TaskGroup("controller"))
    _shards_held: Gauge | None = None
    _shard_held: Gauge | None = None
    _recorder: EventRecorder | None = None
    _held: tuple[int, ...] = ()
    _stopping: bool = False
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
                # O(1): the batch asks for every target's selector each tick. A role's
                # key (`<name>//<role>`) reads that role's variants' pods only.
                namespace, _, name = key.partition("/")
                ref, role = split_role_ref(TargetRef(namespace, name))
                st = state.targets.get(ref)
                if st is None:
                    return 'namespace="",pod=""'
                return workload_pods(st.spec, role)

            queries = RECORDED_QUERIES if s.prometheus_recorded_rules else VLLM_QUERIES
            return SourceSignals(PrometheusSource(s.prometheus_url, selector, queries))
        config = ScrapeConfig(
            timeout_s=s.scrape_timeout_s,
            max_concurrency=s.scrape_concurrency,
            filter_families=s.scrape_filter_families,
        )
        return SourceSignals(PodScrapeSource(config))

    def _on_leader_change(self, leader: bool) -> None:
        self.state.is_leader = leader
        self.metrics.is_leader.set(1.0 if leader else 0.0)
        log.info("leadership changed", identity=self.identity, leader=leader)

    def _on_shards_change(self, status: ShardStatus) -> None:
        """Status (/readyz, /v1), metrics, a log line and an Event on each Lease taken or
        given up say which shards this replica holds."""
        leader = bool(status.writable)
        if leader != self.state.is_leader:
            log.info("leadership changed", identity=self.identity, leader=leader)
        self.state.is_leader = leader
        self.state.leadership = status.as_dict()
        self.metrics.is_leader.set(1.0 if leader else 0.0)
        if self._shards_held is None:
            self._shards_held = Gauge(
                "llm_autoscaler_shards_held",
                "Shard Leases this instance holds (one shard: the leader Lease).",
                registry=self.metrics.registry,
            )
            self._shard_held = Gauge(
                "llm_autoscaler_shard_held",
                "1 for each shard whose Lease this instance holds, by shard number.",
                ["shard"],
                registry=self.metrics.registry,
            )
        assert self._shard_held is not None
        self._shards_held.set(len(status.held))
        taken = sorted(set(status.held) - set(self._held))
        gone = sorted(set(self._held) - set(status.held))
        for k in taken:
            self._shard_held.labels(shard=str(k)).set(1.0)
        for k in gone:
            self._shard_held.remove(str(k))
        self._held = status.held
        log.info(
            "shards changed",
            identity=self.identity,
            held=list(status.held),
            writable=len(status.writable),
            members=len(status.members),
            blocked=status.blocked,
        )
        if self.leases is not None and (taken or gone) and not self._stopping:
            self._tasks.spawn("lease-events", self._lease_events(taken, gone))

    async def _lease_events(self, taken: list[int], gone: list[int]) -> None:
        """client-go's leader-election Events, on each Lease: "<identity> became leader",
        "<identity> stopped leading" (``kubectl describe lease`` shows them)."""
        if self._recorder is None or self.leases is None:
            return
        cfg = self.leases.config
        for ks, verb in ((taken, "became leader"), (gone, "stopped leading")):
            for k in ks:
                involved = {
                    "apiVersion": "coordination.k8s.io/v1",
                    "kind": "Lease",
                    "name": cfg.shard_lease(k),
                    "namespace": cfg.namespace,
                }
                shard = "" if cfg.shards == 1 else f" of shard {k}/{cfg.shards}"
                await self._recorder.emit_on(
                    involved, "LeaderElection", f"{self.identity} {verb}{shard}", warning=False
                )

    def _hold_cap(self, ref: TargetRef) -> int | None:
        st = self.state.targets.get(ref)
        return None if st is None else st.spec.policy.scale_to_zero.hold_cap

    def _on_cold_start_answered(self, ref: TargetRef, held: int, after_s: float) -> None:
        """A target scaled from zero answered its first held request (control/held.py)."""
        self.metrics.observe_cold_start_answered(ref, after_s)
        st = self.state.targets.get(ref)
        if st is None or self._recorder is None or self._stopping or self.loop is None:
            return
        if not self.loop.leader.can_write(ref):
            return
        message = f"scaled from zero for {held} held requests; first answered after {after_s:.1f} s"
        log.info("scaled from zero", target=str(ref), held=held, first_answered_s=after_s)
        self._tasks.spawn(
            "cold-start-event",
            self._recorder.emit(st.spec, "ScaledFromZero", message, warning=False),
        )

    def _reports_invalid(self) -> bool:
        """Who writes validation failures: the holder of shard 0 (the leader)."""
        if self.leases is not None:
            return self.leases.writable(0)
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
        if s.leader_election:
            self.leases = ShardManager(
                clients.lease,
                ShardConfig(
                    namespace=_lease_namespace(s),
                    shards=s.shards,
                    prefix=s.shard_lease_prefix,
                    leader_lease=s.lease_name,
                    lease_duration_s=s.lease_duration_s,
                    renew_deadline_s=s.lease_duration_s * 2 / 3,
                    retry_period_s=max(s.lease_duration_s / 7.5, 0.1),
                ),
                self.identity,
                watch_api=clients.watch,
            )
            self.leases.start()
            self._closers.append(self.leases.stop)
            leader = self.leases
            self._on_shards_change(self.leases.status())
        else:
            self._on_leader_change(True)
        cache = ClusterCache(clients.watch)
        self.cache = cache
        cache.start()
        self._closers.append(cache.stop)
        recorder = EventRecorder(self.api, instance=self.identity)
        self._recorder = recorder
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
        sleep_io = PodSleepClient(self.api)
        self._closers.append(sleep_io.close)
        sleepers = SleeperController(sleep_io, events=recorder, observer=self.metrics)
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
            tick_phases=s.effective_tick_phases,
            # a target whose pod hangs or trickles delays only its own decision
            straggler_wait_s=s.tick_interval_s / s.effective_tick_phases,
            sleepers=sleepers,
            # Process-wide advisory or keda: never write replicas (KEDA's HPA owns them).
            dry_run=s.mode in ("advisory", "keda"),
            decides=(
                self.leases.can_write
                if self.leases is not None and s.shard_scope == "held"
                else None
            ),
        )
        self.loop.set_targets(await store.list(s.namespace))
        # Activators push held counts; the first for a target at zero pokes the loop.
        self.held = HeldCounts(
            self.loop.clock,
            poke_at_zero(self.state, self.loop.poke),
            on_answered=self._on_cold_start_answered,
        )
        self.loop.held = self.held
        api_settings = ApiSettings.from_env(s)
        app = http_app(self.state, store, api_settings, self.metrics)
        app.include_router(held_router(self.held, api_settings, self._hold_cap))
        soft, _ = raise_fd_limit()
        self.http = await serve_http(
            app,
            s.http.host,
            s.http.port,
            limits=ConnectionLimits(
                header_timeout_s=s.http.header_timeout_s,
                max_connections=connection_cap(s.http.max_connections, soft),
            ),
            on_close=self.metrics.observe_connection_closed,
        )
        self.grpc = await serve_grpc(
            self.state,
            s.grpc.host,
            s.grpc.port,
            tls=GrpcTls.from_settings(s.grpc),
            on_stream=self.metrics.observe_keda_stream,
        )
        if self.leases is not None:
            self._tasks.spawn("leases", self.leases.run(self._on_shards_change))
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
        self._stopping = True
        await self._tasks.stop()
        if self.leases is not None:
            with contextlib.suppress(Exception):
                await self.leases.release_all()
        for close in reversed(self._closers):
            with contextlib.suppress(Exception):
                await close()
        if self.grpc is not None:
            await self.grpc.stop()
        if self.http is not None:
            await self.http.stop()
