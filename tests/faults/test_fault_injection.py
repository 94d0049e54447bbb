"""Fault injection: 20 targets on the local API endpoint with emulated vLLM pods, the
real control loop stepped on a fake clock, while one fault at a time is injected.

For every fault: every target decides on every tick (decisions counted per tick, no
wall-clock assertion), no faulty pod ever lowers its target's replicas, and the healthy
targets act on their own readings (idle: they scale 2 -> 1 at once)."""

from __future__ import annotations

import functools
import math
import tracemalloc
from collections.abc import Callable

import aiohttp

from autoscaler.control.ports import SignalPort
from autoscaler.control.signals import SourceSignals
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.target import TargetSpec
from tests.faults.harness import (
    REPLICAS,
    TARGETS,
    Fleet,
    HostilePod,
    fleet,
    vllm_page,
)
from tests.support.hanging import HangingServer

TICKS = 3


def _page(waiting: float) -> Callable[[], HostilePod]:
    return lambda: HostilePod("page", page=lambda _: vllm_page(waiting))


def _garbage() -> HostilePod:
    return HostilePod("page", page=lambda n: b"<html>502 Bad Gateway</html>\n\x00\xff" * n)


@functools.cache
def _many_series_page() -> bytes:
    """150k series of a wanted family in ~6 MB (under the 8 MB page limit)."""
    body = "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 1\n' for i in range(150_000))
    return ("# TYPE vllm:num_requests_waiting gauge\n" + body).encode()


def _too_many_series() -> HostilePod:
    """More series than the parser reads per page (issue 13 item 4): refused, not parsed."""
    page = _many_series_page()
    assert len(page) < 8 * 1024 * 1024
    return HostilePod("page", page=lambda _: page)


FAULTS: dict[str, Callable[[], HostilePod]] = {
    "pod answering +Inf": _page(math.inf),
    "pod answering -Inf": _page(-math.inf),
    "pod answering NaN": _page(math.nan),
    "pod answering a negative queue": _page(-1e9),
    "pod hanging": lambda: HostilePod("hang"),
    "pod closing the connection": lambda: HostilePod("close"),
    "garbage page": _garbage,
    "page with 150k series": _too_many_series,
}


def assert_contained(f: Fleet, ticks: list[dict[TargetRef, Decision]]) -> None:
    """Every target decided every tick; no faulty target lost a replica; healthy ones
    scaled down on their idle readings."""
    for n, decided in enumerate(ticks):
        assert set(decided) == set(f.refs), f"tick {n}: {TARGETS - len(decided)} targets missed"
    for after in f.faulty_replicas:
        assert all(after[r] >= REPLICAS for r in f.faulty), after
    for ref in f.healthy:
        assert f.replicas(ref) == 1, f"{ref} did not act on its readings"


async def test_every_target_decides_every_tick_and_no_faulty_pod_scales_down() -> None:
    """One fleet, one faulty target per fault kind (the last pod of each is hostile)."""
    kinds = sorted(FAULTS)
    made: list[str] = []

    def hostile() -> HostilePod:
        made.append(kinds[len(made)])
        return FAULTS[made[-1]]()

    # A hanging pod costs each tick the scrape timeout in real time: keep it short, yet
    # long enough that a loaded machine does not fail the healthy pods' scrapes.
    async with fleet(hostile, faulty_targets=len(kinds), scrape_timeout_s=2.0) as f:
        ticks = await f.run_ticks(TICKS)
        assert_contained(f, ticks)
        for ref, kind in zip(f.faulty, made, strict=True):
            d = ticks[-1][ref]
            assert d.desired_replicas >= d.current_replicas, kind
            held = Reason.HOLD_PARTIAL_DATA in d.limits or d.reason == Reason.HOLD_MISSING_DATA
            assert held, f"{kind}: {d.reason} {d.limits}"
        assert all(p.scrapes >= 1 for p in f.hostile)  # every fault was really met
        rejected = {r: ticks[-1][r].numbers for r in f.faulty}
        for ref, kind in zip(f.faulty, made, strict=True):
            if kind.startswith("pod answering"):
                assert any(k.startswith("pods_rejected.") for k in rejected[ref]), kind


def assert_every_target_decided(f: Fleet, ticks: list[dict[TargetRef, Decision]]) -> None:
    for n, decided in enumerate(ticks):
        assert set(decided) == set(f.refs), f"tick {n}: {TARGETS - len(decided)} targets missed"


async def test_api_errors_on_scale_writes_leave_every_target_deciding() -> None:
    async with fleet() as f:
        f.kube.inject("/scale", 500, times=10_000, method="PATCH")
        ticks = await f.run_ticks(TICKS)
        assert_every_target_decided(f, ticks)
        assert all(f.replicas(r) == REPLICAS for r in f.refs)  # nothing half-applied
        assert all(d.desired_replicas == 1 for d in ticks[-1].values())  # still deciding
        assert f.state.loop.error is None


async def test_api_timeouts_on_scale_writes_leave_every_target_deciding() -> None:
    async with fleet(api_timeout_s=0.2) as f:
        f.kube.inject("/scale", None, delay_s=30.0, times=10_000, method="PATCH")
        ticks = await f.run_ticks(2)
        assert_every_target_decided(f, ticks)
        assert all(f.replicas(r) == REPLICAS for r in f.refs)
        assert f.state.loop.error is None


async def test_dropped_and_garbled_watches_leave_every_target_deciding() -> None:
    async with fleet() as f:
        f.kube.drop_watches("/pods", times=5)
        f.kube.garble_watches("/deployments", "<html>502</html>", times=5)
        ticks = await f.run_ticks(TICKS)
        assert_every_target_decided(f, ticks)
        assert all(f.replicas(r) == 1 for r in f.refs)  # idle: every target acted


async def test_a_hanging_prometheus_leaves_every_target_deciding_and_holding() -> None:
    async with HangingServer() as hung:
        prometheus = PrometheusSource(hung.url, lambda key: "", timeout_s=0.05)

        async def signals() -> SignalPort:
            return SourceSignals(prometheus)

        try:
            async with fleet(signals=signals) as f:
                ticks = await f.run_ticks(TICKS)
                assert_every_target_decided(f, ticks)
                assert all(d.reason == Reason.HOLD_MISSING_DATA for d in ticks[-1].values())
                assert all(f.replicas(r) == REPLICAS for r in f.refs)
        finally:
            await prometheus.close()
        assert hung.accepted > 0


def _new_label_every_scrape(size: int) -> Callable[[], HostilePod]:
    """A pod that sends a new ``size``-byte label value on every scrape (issue 13 item 3)."""

    def page(n: int) -> bytes:
        value = f"{n:08d}" + "x" * size
        line = f'vllm:num_requests_waiting{{model_name="{value}",engine="0"}} 1\n'
        return ("# TYPE vllm:num_requests_waiting gauge\n" + line).encode() + vllm_page(1)[39:]

    return lambda: HostilePod("page", page=page)


async def test_memory_stays_bounded_while_pods_send_new_huge_labels_every_scrape() -> None:
    size = 1024 * 1024
    async with fleet(_new_label_every_scrape(size), faulty_targets=4) as f:
        await f.run_ticks(2)  # warm-up: connections, caches, histories
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            ticks = await f.run_ticks(5)
            after, _ = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert_every_target_decided(f, ticks)
        grown = after - before
        sent = sum(p.scrapes for p in f.hostile) * size
        # 4 pods x 7 scrapes x 1 MB of never-seen label values went through the parser;
        # what stays is bounded by the parser's byte budget, not by what was sent.
        assert sent >= 24 * 1024 * 1024
        assert grown < 12 * 1024 * 1024, f"grew {grown / 2**20:.1f} MiB of {sent / 2**20} sent"


class RawTimeoutCapacity:
    """GPU capacity whose client times out raw (aiohttp) for the first four targets."""

    def __init__(self) -> None:
        self.calls = 0

    async def max_replicas(self, spec: TargetSpec, current: int) -> int | None:
        self.calls += 1
        if spec.ref.name < "model-04":
            raise aiohttp.ServerTimeoutError("Timeout on reading data from socket")
        return None


async def test_a_raw_client_timeout_in_some_targets_never_stops_the_others() -> None:
    capacity = RawTimeoutCapacity()
    async with fleet(capacity=capacity) as f:
        ticks = await f.run_ticks(TICKS)
        failing = f.refs[:4]
        for decided in ticks:
            assert set(decided) == set(f.refs) - set(failing)
        for ref in failing:
            st = f.state.status(ref)
            assert st is not None and st.condition is not None
            assert st.condition.startswith("ReconcileFailed: ServerTimeoutError")
        assert f.state.loop.reconcile_errors == 4 * TICKS and f.state.loop.error is None
        assert all(f.replicas(r) == REPLICAS for r in failing)
        assert all(f.replicas(r) == 1 for r in f.refs[4:])
