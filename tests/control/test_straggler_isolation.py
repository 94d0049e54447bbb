"""Isolation per target: a pod that hangs after its headers or trickles its body slows
only its own target (issue: "One hanging pod slows every target").

Real loopback sockets and the real scrape path (`PodScrapeSource` behind
`SourceSignals`); the loop runs on real time for a fraction of a second (the scrape
deadline is a real-time deadline), so the assertions are on decision counts, not timings.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest

from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import TargetView
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, TargetRef
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint
from autoscaler.policy.schema import validate_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.metrics.vllm_pods import FakeVllm, start_pods
from tests.support.cluster_ports import NoWrites

INTERVAL_S = 0.1  # polling interval and tick
SCRAPE_TIMEOUT_S = 0.4  # the per-read deadline: connect, headers and body
RUN_S = 0.8


class _Trickle(asyncio.Protocol):
    """Answers a request with the headers of a 100,000-byte page, then one body byte
    every 20 ms."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.timer: asyncio.TimerHandle | None = None

    def data_received(self, data: bytes) -> None:
        if b"\r\n\r\n" in data and self.timer is None:
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
            self._drip()

    def _drip(self) -> None:
        if not self.transport.is_closing():
            self.transport.write(b"#")
            self.timer = asyncio.get_running_loop().call_later(0.02, self._drip)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()


class _HangAfterHeaders(asyncio.Protocol):
    """Answers a request with the headers of a 1,000-byte page and never the body."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if b"\r\n\r\n" in data:
            self.transport.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")


@dataclass
class Cluster(NoWrites):
    pods: dict[TargetRef, tuple[PodEndpoint, ...]]

    async def observe(self, spec: TargetSpec) -> TargetView:
        pods = self.pods[spec.ref]
        return TargetView(len(pods), len(pods), "1", pods=pods)


@dataclass
class Decisions:
    """The loop's observer: decisions per target."""

    count: Counter[TargetRef] = field(default_factory=Counter)

    def observe_decision(self, ref: TargetRef, decision: Decision) -> None:
        self.count[ref] += 1

    def observe_tick(self, duration_s: float) -> None: ...

    def observe_decision_lag(self, lag_s: float) -> None: ...

    def observe_scrape_error(self, ref: TargetRef) -> None: ...

    def observe_rejected(self, ref: TargetRef, reason: str, count: int) -> None: ...

    def observe_reconcile_error(self, ref: TargetRef) -> None: ...

    def observe_scale_failure(self, ref: TargetRef, reason: str) -> None: ...

    def observe_loop_restart(self) -> None: ...


HEALTHY = [TargetRef("fleet", f"healthy-{i}") for i in range(3)]
TRICKLE, HANG = TargetRef("fleet", "trickle"), TargetRef("fleet", "hang")


@asynccontextmanager
async def fleet() -> AsyncIterator[dict[TargetRef, tuple[PodEndpoint, ...]]]:
    """Three healthy targets of two pods each, one target whose second pod trickles and
    one whose second pod hangs after its headers."""
    healthy = [FakeVllm() for _ in range(2 * len(HEALTHY) + 2)]
    for pod in healthy:
        pod.set(waiting=4, running=10, kv=0.3)
    runner, urls = await start_pods(healthy)
    loop = asyncio.get_running_loop()
    servers = [
        await loop.create_server(protocol, "127.0.0.1", 0)
        for protocol in (_Trickle, _HangAfterHeaders)
    ]
    ports = [server.sockets[0].getsockname()[1] for server in servers]
    bad = [f"http://127.0.0.1:{port}/metrics" for port in ports]
    good = iter(urls)
    pods: dict[TargetRef, tuple[PodEndpoint, ...]] = {}
    for ref in [*HEALTHY, TRICKLE, HANG]:
        second = next(good) if ref in HEALTHY else bad[0 if ref == TRICKLE else 1]
        pods[ref] = (PodEndpoint(f"{ref.name}-0", next(good)), PodEndpoint(f"{ref.name}-1", second))
    try:
        yield pods
    finally:
        for server in servers:
            server.close()
        await runner.cleanup()


async def run_loop(straggler_wait_s: float | None) -> Counter[TargetRef]:
    """Decisions per target over `RUN_S` seconds of real time."""
    policy = validate_policy(
        {
            "maxReplicaCount": 8,
            "pollingInterval": INTERVAL_S,
            "metrics": [{"signal": "waiting", "target": 4}],
        }
    )
    async with fleet() as pods:
        source = PodScrapeSource(ScrapeConfig(timeout_s=SCRAPE_TIMEOUT_S))
        observer = Decisions()
        loop = ControlLoop(
            ControllerState(),
            Cluster(pods),
            SourceSignals(source),
            observer=observer,
            tick_interval_s=INTERVAL_S,
            straggler_wait_s=straggler_wait_s,
        )
        loop.set_targets(StoredTarget(TargetSpec(ref=r, policy=policy), "1") for r in pods)
        task = asyncio.create_task(loop.run())
        try:
            await asyncio.sleep(RUN_S)
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await source.close()
        return observer.count


async def test_a_trickling_or_hung_pod_slows_only_its_own_target() -> None:
    count = await run_loop(straggler_wait_s=INTERVAL_S)
    ticks = RUN_S / INTERVAL_S  # 8 polling intervals
    for ref in HEALTHY:  # >= 0.9 decisions per interval, less the first and last tick
        assert count[ref] >= 0.9 * ticks - 2, count
    for ref in (TRICKLE, HANG):  # each read waits out its pod's whole deadline
        assert 1 <= count[ref] <= RUN_S / SCRAPE_TIMEOUT_S, count


async def test_waiting_for_every_target_lets_one_hung_pod_hold_back_the_fleet() -> None:
    """The same fleet on a loop that waits for its slowest target (no straggler bound):
    every target is decided only once per scrape deadline; what the bound prevents."""
    count = await run_loop(straggler_wait_s=None)
    for ref in HEALTHY:
        assert count[ref] <= RUN_S / SCRAPE_TIMEOUT_S + 1, count
