"""Supervision: one target's exception never stops another; a loop error restarts the
ticking with backoff and turns /readyz to 503 until ticks resume; /healthz reflects the
age of the last completed tick. Fake clock, in-memory ports, the real API app."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import httpx

from autoscaler.api.app import create_app
from autoscaler.api.metrics import ControllerMetrics
from autoscaler.api.security import ApiSettings
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import HEALTHZ_STALE_TICKS, ControllerState
from autoscaler.domain import TargetRef
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import StoredTarget
from autoscaler.store.file import FilePolicyStore
from autoscaler.target import TargetSpec
from tests.support.cluster_ports import NoWrites

REFS = [TargetRef("demo", f"t{i}") for i in range(4)]
POLICY = load_policy({"maxReplicaCount": 20, "metrics": [{"signal": "waiting", "target": 4}]})


@dataclass
class FlakyCluster(NoWrites):
    """Raises the given exception from ``observe`` for the named targets."""

    broken: dict[str, BaseException] = field(default_factory=dict)

    async def observe(self, spec: TargetSpec) -> TargetView:
        err = self.broken.get(spec.ref.name)
        if err is not None:
            raise err
        return TargetView(2, 2, "1")


class Signals:
    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        return SignalReading(signals={"waiting": 8.0}, pods_read=view.ready_replicas)


class FailingTicks(ControllerMetrics):
    """An observer whose tick hook raises ``fail`` times: an error outside any target."""

    def __init__(self, fail: int) -> None:
        super().__init__()
        self.fail = fail

    def observe_tick(self, duration_s: float) -> None:
        if self.fail > 0:
            self.fail -= 1
            raise RuntimeError("observer bug")
        super().observe_tick(duration_s)


def make(
    cluster: FlakyCluster, observer: ControllerMetrics | None = None
) -> tuple[ControlLoop, ControllerState, FakeClock]:
    state, clock = ControllerState(), FakeClock()
    loop = ControlLoop(state, cluster, Signals(), clock=clock, observer=observer)
    loop.set_targets([StoredTarget(TargetSpec(ref=r, policy=POLICY), "1") for r in REFS])
    return loop, state, clock


async def test_one_target_raising_any_exception_never_stops_the_others() -> None:
    metrics = ControllerMetrics()
    cluster = FlakyCluster(
        {"t0": RuntimeError("bug"), "t1": TimeoutError()}  # raw aiohttp/asyncio timeout
    )
    loop, state, clock = make(cluster, metrics)
    for _ in range(3):
        decisions = await loop.tick()
        assert sorted(d.t for d in decisions) == [clock.now()] * 2  # t2 and t3 decided
        await clock.advance(1.0)
    st0 = state.status(REFS[0])
    assert st0 is not None and st0.condition == "ReconcileFailed: RuntimeError: bug"
    assert state.loop.reconcile_errors == 6
    errors = metrics.registry.get_sample_value(
        "llm_autoscaler_reconcile_errors_total", {"namespace": "demo", "name": "t1"}
    )
    assert errors == 3.0
    cluster.broken.clear()  # recovered: the condition clears, every target decides
    assert len(await loop.tick()) == 4
    assert st0.condition is None


async def test_a_raw_timeout_from_a_client_does_not_kill_the_running_loop() -> None:
    cluster = FlakyCluster({"t0": aiohttp.ServerTimeoutError("read timeout")})
    loop, state, clock = make(cluster)
    task = asyncio.create_task(loop.run())
    try:
        await clock.advance(0)
        await clock.advance(5.0)
        assert not task.done() and state.ticks == 6
        assert state.loop.error is None
        healthy = state.status(REFS[3])
        assert healthy is not None and len(healthy.history) == 6
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_loop_error_restarts_with_exponential_backoff_and_readyz_until_ticks_resume(
    tmp_path: Path,
) -> None:
    observer = FailingTicks(fail=3)
    loop, state, clock = make(FlakyCluster(), observer)
    app = create_app(state, FilePolicyStore(tmp_path / "p.yaml"), ApiSettings())
    task = asyncio.create_task(loop.run())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        try:
            await clock.advance(0)  # tick 1 fails -> backoff 1 s
            ready = await c.get("/readyz")
            assert ready.status_code == 503 and "observer bug" in ready.text
            assert state.loop.restarts == 1
            await clock.advance(1.0)  # tick 2 fails -> backoff 2 s
            assert state.loop.restarts == 2
            await clock.advance(1.0)  # still backing off
            assert state.loop.restarts == 2
            await clock.advance(1.0)  # tick 3 fails -> backoff 4 s
            assert state.loop.restarts == 3
            await clock.advance(3.0)
            assert state.loop.restarts == 3 and (await c.get("/readyz")).status_code == 503
            await clock.advance(1.0)  # tick 4 completes: ready again
            assert state.loop.error is None and (await c.get("/readyz")).status_code == 200
            assert not task.done()
            restarts = observer.registry.get_sample_value("llm_autoscaler_loop_restarts_total")
            assert restarts == 3.0
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


async def test_healthz_answers_503_once_the_last_tick_is_older_than_the_limit(
    tmp_path: Path,
) -> None:
    loop, state, clock = make(FlakyCluster())
    app = create_app(state, FilePolicyStore(tmp_path / "p.yaml"), ApiSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        assert (await c.get("/healthz")).status_code == 200  # no loop running: nothing stale
        task = asyncio.create_task(loop.run())
        try:
            await clock.advance(0)
            await clock.advance(2.0)
            assert (await c.get("/healthz")).status_code == 200
        finally:
            task.cancel()  # the loop dies: no more ticks
            await asyncio.gather(task, return_exceptions=True)
        await clock.advance(HEALTHZ_STALE_TICKS - 0.5)
        assert (await c.get("/healthz")).status_code == 200
        await clock.advance(1.0)
        stale = await c.get("/healthz")
        assert stale.status_code == 503 and "last completed tick" in stale.json()["problems"][0]


async def test_a_removed_target_is_forgotten_by_the_scrape_source_and_the_metrics() -> None:
    from autoscaler.control.signals import SourceSignals
    from autoscaler.metrics.pod_scrape import PodScrapeSource
    from autoscaler.metrics.source import PodEndpoint
    from tests.metrics.vllm_pods import FakeVllm, start_pods

    pod = FakeVllm()
    pod.set(waiting=1, running=1, kv=0.1)
    runner, [url] = await start_pods([pod])

    @dataclass
    class OnePod(FlakyCluster):
        async def observe(self, spec: TargetSpec) -> TargetView:
            return TargetView(1, 1, "1", pods=(PodEndpoint(f"{spec.ref.name}-0", url),))

    source = PodScrapeSource()
    metrics = ControllerMetrics()
    state, clock = ControllerState(), FakeClock()
    loop = ControlLoop(state, OnePod(), SourceSignals(source), clock=clock, observer=metrics)
    loop.set_targets([StoredTarget(TargetSpec(ref=r, policy=POLICY), "1") for r in REFS])
    try:
        await loop.tick()
        assert str(REFS[0]) in source._histories
        loop.set_targets([StoredTarget(TargetSpec(ref=r, policy=POLICY), "1") for r in REFS[1:]])
    finally:
        await source.close()
        await runner.cleanup()
    assert str(REFS[0]) not in source._histories and str(REFS[1]) in source._histories
    labels = {"namespace": "demo", "name": "t0"}
    assert metrics.registry.get_sample_value("llm_autoscaler_desired_replicas", labels) is None
