"""PrometheusSource when Prometheus misbehaves: hanging, answering out of range, answering
garbage. Real loopback sockets; the loop runs on a fake clock."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest
from aiohttp import web

from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import TargetView
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.domain import Reason, TargetRef
from autoscaler.metrics.prometheus import PrometheusSource
from autoscaler.metrics.source import PodEndpoint
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import TargetSpec
from tests.support.cluster_ports import NoWrites
from tests.support.hanging import HangingServer
from tests.support.waiting import until

PODS = [PodEndpoint(f"p{i}", "unused") for i in range(3)]


async def _fake_prometheus(answers: dict[str, object]) -> tuple[web.AppRunner, str]:
    """Answers each query with the JSON given for its first word (e.g. ``sum``)."""

    async def query(request: web.Request) -> web.Response:
        promql = (await request.post())["query"]
        assert isinstance(promql, str)
        doc = answers.get(promql.split("(")[0], {"status": "success", "data": {}})
        if isinstance(doc, bytes):
            return web.Response(body=doc)
        return web.json_response(doc)

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def _vector(value: str) -> dict[str, object]:
    result = [{"metric": {}, "value": [1.0, value]}]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


@pytest.fixture
async def prometheus() -> AsyncIterator[dict[str, object]]:
    answers: dict[str, object] = {}
    runner, url = await _fake_prometheus(answers)
    answers["_url"] = url
    yield answers
    await runner.cleanup()


@pytest.mark.parametrize(("value", "reason"), [("+Inf", "not-finite"), ("-3", "negative")])
async def test_an_answer_out_of_range_is_dropped_and_the_target_counts_as_unread(
    prometheus: dict[str, object], value: str, reason: str
) -> None:
    prometheus["sum"] = _vector(value)  # waiting, running and the rates
    source = PrometheusSource(str(prometheus["_url"]), {"t": ""}, {"waiting": "sum(x)"})
    try:
        reading = await source.read("t", PODS, now=0.0)
    finally:
        await source.close()
    assert reading.signals == {} and reading.pods_read == 0 and reading.pods_expected == 3
    assert reading.rejected == {reason: 1} and "waiting" in reading.errors[0]


async def test_garbage_or_failed_answers_are_errors_and_nan_is_missing(
    prometheus: dict[str, object],
) -> None:
    prometheus["sum"] = b"<html>proxy error</html>"
    prometheus["max"] = {"status": "error", "errorType": "bad_data", "error": "parse error"}
    prometheus["avg"] = _vector("NaN")
    prometheus["min"] = _vector("0.5")
    queries = {"waiting": "sum(x)", "running": "max(x)", "kv_cache_usage": "avg(x)"}
    source = PrometheusSource(
        str(prometheus["_url"]), {"t": ""}, {**queries, "kv_cache_usage_max": "min(x)"}
    )
    try:
        reading = await source.read("t", PODS, now=0.0)
    finally:
        await source.close()
    assert reading.signals == {"kv_cache_usage_max": 0.5} and reading.pods_read == 3
    assert len(reading.errors) == 2
    assert any("not JSON" in e for e in reading.errors)
    assert any("parse error" in e for e in reading.errors)


async def test_a_hanging_prometheus_never_blocks_the_default_executor() -> None:
    async with HangingServer() as hung:
        source = PrometheusSource(hung.url, {f"t{i}": "" for i in range(4)}, timeout_s=30.0)
        reads = asyncio.gather(*(source.read(f"t{i}", PODS, now=0.0) for i in range(4)))
        try:
            # 48 queries in flight on 32 connections (the source's bound)
            await until(lambda: hung.accepted >= 32, 30.0, "32 hung connections")
            # Threads blocked on the hung server would queue this behind them.
            assert await asyncio.to_thread(lambda: 42) == 42
            assert not reads.done()
        finally:
            reads.cancel()
            await asyncio.gather(reads, return_exceptions=True)
            await source.close()


@dataclass
class Cluster(NoWrites):
    async def observe(self, spec: TargetSpec) -> TargetView:
        return TargetView(3, 3, "1", pods=tuple(PODS))

    async def scale(self, spec: TargetSpec, replicas: int, resource_version: str) -> None:
        raise AssertionError("must hold")


async def test_the_loop_keeps_ticking_and_holds_while_prometheus_hangs() -> None:
    policy = load_policy({"minReplicaCount": 1, "metrics": [{"signal": "waiting", "target": 4}]})
    refs = [TargetRef("ns", f"t{i}") for i in range(3)]
    async with HangingServer() as hung:
        source = PrometheusSource(hung.url, lambda key: "", timeout_s=0.05)
        clock = FakeClock()
        loop = ControlLoop(ControllerState(), Cluster(), SourceSignals(source), clock=clock)
        loop.set_targets([StoredTarget(TargetSpec(ref=r, policy=policy), "1") for r in refs])
        try:
            for _ in range(3):
                decisions = await loop.tick()
                assert len(decisions) == 3  # every target decided this tick
                assert all(d.reason == Reason.HOLD_MISSING_DATA for d in decisions)
                assert all(d.desired_replicas == 3 for d in decisions)
                await clock.advance(1.0)
        finally:
            await source.close()
    assert hung.accepted > 0


def test_vector_and_scalar_answers_read_as_one_number() -> None:
    from autoscaler.metrics.prometheus import _value

    assert _value("w", _vector("2.5")).value == 2.5
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [1, "7"]}}
    assert _value("w", scalar).value == 7.0
    series = [{"value": [1, "1"]}] * 2
    two = {"status": "success", "data": {"resultType": "vector", "result": series}}
    assert _value("w", two).error == "w: 2 series, expected 1"
    empty = _value("w", {"data": {"resultType": "vector", "result": []}})
    assert empty.value is None and empty.error is None  # no series: missing, not an error
