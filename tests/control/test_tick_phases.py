"""Tick phases: a fleet's targets spread over the tick interval, each on its own phase.

Fake clock, in-memory ports. What must hold: every target still decides once per polling
interval, on a phase that does not move (not after a slow tick either, and never twice to
catch up); the reads of a tick are spread instead of one burst; the decision lag (due ->
decided) is what the /metrics histogram shows; Prometheus mode refuses phases.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter, defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from autoscaler.api.metrics import ControllerMetrics
from autoscaler.app import Controller
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.policy.schema import validate_policy
from autoscaler.settings import Settings
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.control.test_pod_scrape_wiring import (
    cluster,  # noqa: F401 - a fixture
    replicas,
)
from tests.support.cluster_ports import NoWrites
from tests.support.waiting import until
from tests.support.workloads import controller_settings

EPS = 1e-6


@dataclass
class Cluster(NoWrites):
    """Steady at 2 replicas; ``observe`` takes ``slow_s`` of fake time while ``slow``."""

    clock: FakeClock
    slow_s: float = 0.0
    slow_until: float = -1.0

    async def observe(self, spec: TargetSpec) -> TargetView:
        if self.clock.now() < self.slow_until:
            await self.clock.sleep(self.slow_s)
        return TargetView(2, 2, "1")


@dataclass
class Signals:
    reads: dict[TargetRef, list[float]] = field(default_factory=lambda: defaultdict(list))

    async def read(self, spec: TargetSpec, view: TargetView, now: float) -> SignalReading:
        self.reads[spec.ref].append(now)
        return SignalReading(signals={"waiting": 4.0}, pods_read=view.ready_replicas)


def fleet(n: int, polling_interval_s: float = 1.0) -> list[StoredTarget]:
    policy = validate_policy(
        {
            "maxReplicaCount": 20,
            "pollingInterval": polling_interval_s,
            "metrics": [{"signal": "waiting", "target": 4}],
        }
    )
    refs = [TargetRef("fleet", f"t{i}") for i in range(n)]
    return [StoredTarget(TargetSpec(ref=ref, policy=policy), "1") for ref in refs]


@asynccontextmanager
async def running(loop: ControlLoop) -> AsyncIterator[None]:
    """The loop's task while the block runs; cancelled and awaited after (none leaks)."""
    task = asyncio.get_running_loop().create_task(loop.run())
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def run_for(
    n: int, phases: int, seconds: float, *, start: float = 100.0, **slow: Any
) -> tuple[Signals, ControllerMetrics, ControlLoop]:
    clock = FakeClock(start)
    signals, metrics = Signals(), ControllerMetrics()
    loop = ControlLoop(
        ControllerState(),
        Cluster(clock, **slow),
        signals,
        clock=clock,
        observer=metrics,
        tick_phases=phases,
    )
    loop.set_targets(fleet(n))
    async with running(loop):
        await clock.advance(0)
        step = 1.0 / phases / 4
        for _ in range(round(seconds / step)):  # small steps: every sub-tick runs on time
            await clock.advance(step)
    return signals, metrics, loop


def bursts(signals: Signals) -> Counter[float]:
    """How many targets were read at each instant."""
    return Counter(round(t, 6) for times in signals.reads.values() for t in times)


async def test_one_phase_reads_the_whole_fleet_at_once_each_tick() -> None:
    signals, _, _ = await run_for(100, phases=1, seconds=4.0)
    sizes = bursts(signals)
    assert set(sizes.values()) == {100}  # the classic tick: one burst of every target


async def test_phases_spread_the_fleets_reads_over_the_interval() -> None:
    signals, _, _ = await run_for(200, phases=10, seconds=4.0)
    sizes = bursts(signals)
    per_second = Counter(round(t % 1.0, 6) for t in sizes)
    assert len(per_second) == 10  # ten distinct instants in each second
    assert max(sizes.values()) <= 40  # no burst near the whole fleet (200 / 10 = 20 each)
    assert sum(sizes.values()) == sum(len(v) for v in signals.reads.values())


async def test_every_target_decides_once_per_interval_on_a_phase_that_does_not_move() -> None:
    signals, _, _ = await run_for(50, phases=8, seconds=6.0)
    for ref, times in signals.reads.items():
        assert len(times) >= 5, ref
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert all(abs(g - 1.0) < EPS for g in gaps), (ref, gaps)
        assert times[0] < 100.0 + 1.0 + EPS  # the first read within one interval


async def test_a_target_keeps_its_phase_and_is_not_read_twice_after_a_slow_tick() -> None:
    # for ~2 s every observe takes 0.6 s of fake time: sub-ticks run late and overlap
    signals, _, _ = await run_for(40, phases=4, seconds=8.0, slow_s=0.6, slow_until=102.0)
    for ref, times in signals.reads.items():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert min(gaps) >= 0.5 - EPS, (ref, gaps)  # never re-read at once to catch up
        late = [t for t in times if t > 104.0]
        phases = {round((t - 100.0) % 1.0, 6) for t in late}
        assert len(phases) == 1, (ref, late)  # back on one phase once it is fast again
        assert [b - a for a, b in itertools.pairwise(late)] == pytest.approx(
            [1.0] * (len(late) - 1)
        )


async def test_a_target_with_a_longer_polling_interval_is_read_at_that_interval() -> None:
    clock = FakeClock(0.0)
    signals = Signals()
    loop = ControlLoop(ControllerState(), Cluster(clock), signals, clock=clock, tick_phases=5)
    loop.set_targets(fleet(10, polling_interval_s=3.0))
    async with running(loop):
        await clock.advance(0)
        for _ in range(200):
            await clock.advance(0.05)
    for times in signals.reads.values():
        gaps = [b - a for a, b in itertools.pairwise(times)]
        assert gaps == pytest.approx([3.0] * len(gaps)) and len(times) >= 3


async def test_the_phase_of_a_target_is_the_same_in_every_loop() -> None:
    a, _, _ = await run_for(30, phases=6, seconds=3.0, start=100.0)
    b, _, _ = await run_for(30, phases=6, seconds=3.0, start=100.0)
    assert {r: t[-1] % 1.0 for r, t in a.reads.items()} == pytest.approx(
        {r: t[-1] % 1.0 for r, t in b.reads.items()}
    )


def lag_histogram(metrics: ControllerMetrics) -> tuple[float, float]:
    count = metrics.registry.get_sample_value("llm_autoscaler_decision_lag_seconds_count")
    total = metrics.registry.get_sample_value("llm_autoscaler_decision_lag_seconds_sum")
    assert count is not None and total is not None
    return count, total


async def test_decision_lag_is_the_time_from_due_to_decided() -> None:
    # on time: due at the tick, decided in it (no fake time passes in a reconcile)
    signals, metrics, _ = await run_for(20, phases=4, seconds=3.0)
    count, total = lag_histogram(metrics)
    assert count == sum(len(t) for t in signals.reads.values()) and total == pytest.approx(0.0)
    # every observe takes 0.25 s: each decision is 0.25 s after its target was due
    _, metrics, _ = await run_for(1, phases=1, seconds=3.0, slow_s=0.25, slow_until=1e9)
    count, total = lag_histogram(metrics)
    assert count >= 2 and total == pytest.approx(0.25 * count)


def test_phases_are_refused_with_prometheus_naming_both_fields() -> None:
    with pytest.raises(ValidationError) as err:
        Settings(tick_phases=4, prometheus_url="http://127.0.0.1:9090")
    text = str(err.value)
    assert "tick_phases=4" in text and "prometheus_url" in text


@pytest.mark.parametrize("bad", [0, -1, 101])
def test_phases_out_of_range_are_refused(bad: int) -> None:
    with pytest.raises(ValidationError) as err:
        Settings(tick_phases=bad)
    assert "tick_phases" in str(err.value)


def test_the_loop_refuses_a_phase_count_below_one() -> None:
    with pytest.raises(ValueError, match="tick_phases=0"):
        ControlLoop(ControllerState(), None, None, tick_phases=0)  # type: ignore[arg-type]


async def test_the_controller_runs_its_loop_on_phases_and_scales(
    cluster: LocalKubeAPI,  # noqa: F811 - the fixture imported above
) -> None:
    """The real composition (local API, a served vLLM page): phases from the settings,
    and the target is scaled from its scrapes as with one phase."""
    api = api_client_for(cluster.url)
    ctl = Controller(controller_settings(leader_election=False, tick_phases=4), api, identity="a")
    await ctl.start()
    try:
        assert ctl.loop is not None and ctl.loop.tick_phases == 4
        await until(lambda: replicas(cluster) == 4, 20, "2 pods x 20 waiting / 10 each")
    finally:
        await ctl.stop()
        await api.close()


def test_the_tick_phases_flag_and_env_var_go_through_the_same_validation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autoscaler.cli import main

    monkeypatch.delenv("AUTOSCALER_PROMETHEUS_URL", raising=False)
    assert Settings.load().tick_phases == 10  # default: spread over the interval
    assert main(["run", "--tick-phases", "0", "--kubeconfig", "/nonexistent"]) == 1
    assert "tick_phases: 0: Input should be greater than or equal to 1" in (capsys.readouterr().err)
    monkeypatch.setenv("AUTOSCALER_TICK_PHASES", "10")
    assert Settings.load().tick_phases == 10
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS_URL", "http://prom:9090")
    assert main(["run", "--kubeconfig", "/nonexistent"]) == 1
    assert "tick_phases=10 spreads pod scrapes" in capsys.readouterr().err


def test_prometheus_mode_with_the_default_phases_runs_one_phase_without_error() -> None:
    prom = Settings(prometheus_url="http://127.0.0.1:9090")
    assert prom.tick_phases == 10 and prom.effective_tick_phases == 1
    assert Settings().effective_tick_phases == 10
