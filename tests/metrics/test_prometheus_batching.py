"""How `PrometheusSource` batches `WorkloadPods` targets within a tick, against a real
HTTP server answering grouped queries as Prometheus does (same JSON shape)."""

from __future__ import annotations

import asyncio
import urllib.parse
from collections.abc import AsyncIterator

import pytest

from autoscaler.metrics.prometheus import (
    TARGET_LABEL,
    VLLM_QUERIES,
    PrometheusSource,
    WorkloadPods,
    _form_body,
    _grouped_values,
    _reading,
)
from autoscaler.metrics.source import PodEndpoint, TargetReading
from tests.support.fake_prometheus import WAITING, FakePrometheus, serve_fake_prometheus

PODS = [PodEndpoint("p", "unused")]


@pytest.fixture
async def prom() -> AsyncIterator[FakePrometheus]:
    async with serve_fake_prometheus() as fake:
        yield fake


def _targets(*names: str) -> dict[str, WorkloadPods]:
    return {f"ns/{n}": WorkloadPods("ns", n) for n in names}


async def _tick(source: PrometheusSource, keys: list[str], now: float) -> list[TargetReading]:
    return list(await asyncio.gather(*(source.read(k, PODS, now) for k in keys)))


async def test_reads_spread_over_a_tick_share_one_batch_and_each_tick_fetches_again(
    prom: FakePrometheus,
) -> None:
    source = PrometheusSource(prom.url, _targets("a", "b", "c"))
    n = len(source.grouped_queries)
    await _tick(source, ["ns/a", "ns/b", "ns/c"], now=0.0)
    assert len(prom.queries) == n
    for tick in (1, 2):  # one read after the other, as observes finish apart
        for i, key in enumerate(["ns/c", "ns/a", "ns/b"]):
            reading = await source.read(key, PODS, now=tick + 0.1 * i)
            assert reading.signals["waiting"] == WAITING[key[-1]]
        assert len(prom.queries) == n * (tick + 1)
    # a key reads a batch once: its next read is a new tick even within batch_max_age_s
    await _tick(source, ["ns/a", "ns/b"], now=3.0)
    await _tick(source, ["ns/a", "ns/b"], now=3.2)
    assert len(prom.queries) == n * 5
    await source.close()


async def test_failed_grouped_query_leaves_that_signal_unread_for_every_target(
    prom: FakePrometheus,
) -> None:
    prom.fail = "num_requests_running"
    source = PrometheusSource(prom.url, _targets("a", "b"))
    for reading in await _tick(source, ["ns/a", "ns/b"], now=0.0):
        assert "running" not in reading.signals and reading.signals["waiting"] > 0
        assert [e for e in reading.errors if e.startswith("running: ")] != []
        assert reading.pods_read == 1  # other signals answered
    prom.fail = "vllm"  # every query fails: nothing read for any target
    for reading in await _tick(source, ["ns/a", "ns/b"], now=1.0):
        assert reading.signals == {} and reading.pods_read == 0
        assert len(reading.errors) == len(VLLM_QUERIES)
    await source.close()


async def test_target_without_series_reads_missing_not_zero(prom: FakePrometheus) -> None:
    source = PrometheusSource(prom.url, _targets("a", "gone"))
    a, gone = await _tick(source, ["ns/a", "ns/gone"], now=0.0)
    assert a.signals["waiting"] == 0.3
    assert gone.signals == {} and gone.errors == ()
    await source.close()


async def test_target_first_seen_after_the_batch_started_gets_its_own_then_joins(
    prom: FakePrometheus,
) -> None:
    source = PrometheusSource(prom.url, _targets("a", "b", "c"))
    n = len(source.grouped_queries)
    await _tick(source, ["ns/a", "ns/b"], now=0.0)
    late = await source.read("ns/c", PODS, now=0.2)  # the tick's batch already fetched
    assert late.signals["waiting"] == 0.7 and len(prom.queries) == 2 * n
    await _tick(source, ["ns/a", "ns/b", "ns/c"], now=1.0)
    assert len(prom.queries) == 3 * n
    assert all("(a|b|c)-" in q for q in prom.queries[-n:])
    await source.close()


async def test_forgotten_target_leaves_the_batch(prom: FakePrometheus) -> None:
    targets: dict[str, WorkloadPods] = _targets("a", "b")
    source = PrometheusSource(prom.url, targets)
    await _tick(source, ["ns/a", "ns/b"], now=0.0)
    del targets["ns/b"]
    source.forget("ns/b")
    await _tick(source, ["ns/a"], now=1.0)
    assert all('pod=~"(a)-' in q for q in prom.queries[-len(source.grouped_queries) :])
    await source.close()


async def test_custom_queries_without_grouping_are_sent_once_per_target(
    prom: FakePrometheus,
) -> None:
    queries = {
        "waiting": VLLM_QUERIES["waiting"],
        "running": 'sum(vllm:num_requests_running{pod=~"a-.*"})',  # copied from KEDA
    }
    source = PrometheusSource(prom.url, _targets("a", "b"), queries)
    a, b = await _tick(source, ["ns/a", "ns/b"], now=0.0)
    assert a.signals == {"waiting": 0.3, "running": 0.3}
    assert b.signals == {"waiting": 0.5, "running": 0.3}  # the custom query, as written
    assert len(prom.queries) == 1 + 2
    await source.close()


async def test_grouped_answer_over_its_size_cap_is_unread_for_every_target(
    prom: FakePrometheus,
) -> None:
    source = PrometheusSource(
        prom.url,
        _targets("a", "b"),
        max_answer_bytes=64,
        grouped_bytes_per_target=8,
        bucket_bytes_per_target=8,
    )
    for reading in await _tick(source, ["ns/a", "ns/b"], now=0.0):
        assert reading.signals == {} and reading.pods_read == 0
        assert all("larger than 80 bytes" in e for e in reading.errors)
    await source.close()


@pytest.mark.parametrize("query", ['sum by (a,) (x{pod=~"(a\\\\.b|c)-.*"})', "ü é +&=/ %", ""])
def test_query_form_is_encoded_as_urllib_does(query: str) -> None:
    form = {"query": query, "timeout": "5000ms"}
    expected = urllib.parse.urlencode(form, quote_via=urllib.parse.quote)
    assert _form_body(form) == expected.encode()


async def test_target_pointed_at_another_workload_is_queried_by_its_new_name(
    prom: FakePrometheus,
) -> None:
    targets: dict[str, WorkloadPods] = _targets("a", "b")
    source = PrometheusSource(prom.url, targets)
    first = await _tick(source, ["ns/a", "ns/b"], now=0.0)
    assert [r.signals["waiting"] for r in first] == [0.3, 0.5]
    targets["ns/b"] = WorkloadPods("ns", "c")  # same key, its scaleTargetRef edited
    a, b = await _tick(source, ["ns/a", "ns/b"], now=1.0)
    assert all('pod=~"(a|c)-' in q for q in prom.queries[-len(source.grouped_queries) :])
    assert a.signals["waiting"] == 0.3 and b.signals["waiting"] == 0.7
    await source.close()


def _answer(*series: tuple[str, str]) -> dict[str, object]:
    result = [
        {"metric": {"namespace": "ns", TARGET_LABEL: name}, "value": [1.0, value]}
        for name, value in series
    ]
    return {"status": "success", "data": {"resultType": "vector", "result": result}}


KEYS = {("ns", "a"): ["ns/a"], ("ns", "b"): ["ns/b", "ns/b-again"]}


def test_grouped_answer_splits_per_target_and_nan_or_no_series_is_missing_not_zero() -> None:
    got = _grouped_values("waiting", _answer(("a", "NaN"), ("b", "2"), ("other", "9")), KEYS)
    assert got.error is None and got.key_errors is None
    assert got.values == {"ns/b": 2.0, "ns/b-again": 2.0}  # a: NaN, other: no target
    empty = _grouped_values("waiting", _answer(), KEYS)
    assert empty.values == {} and empty.error is None


def test_several_series_for_one_target_make_that_target_an_error_only() -> None:
    got = _grouped_values("waiting", _answer(("b", "1"), ("a", "3"), ("b", "2")), KEYS)
    assert got.values == {"ns/a": 3.0}
    assert got.key_errors is not None
    assert set(got.key_errors) == {"ns/b", "ns/b-again"}
    assert "several series for ('ns', 'b')" in got.key_errors["ns/b"]
    reading = _reading(0.0, PODS, [], "ns/b", [got])
    assert reading.signals == {} and reading.errors == (got.key_errors["ns/b"],)


def test_malformed_grouped_answer_is_an_error_for_every_target() -> None:
    bad_series = {"status": "success", "data": {"resultType": "vector", "result": [{"x": 1}]}}
    for doc in (bad_series, {"status": "success", "data": {"resultType": "matrix"}}, []):
        got = _grouped_values("waiting", doc, KEYS)
        assert got.values == {} and got.error is not None and got.error.startswith("waiting: ")
        reading = _reading(0.0, PODS, [], "ns/a", [got])
        assert reading.pods_read == 0 and reading.errors == (got.error,)


async def test_read_later_than_the_batch_age_joins_the_batch_still_in_flight(
    prom: FakePrometheus,
) -> None:
    """A slow Prometheus spreads a tick's reads beyond ``batch_max_age_s``: they join the
    fetch in flight instead of starting one more batch of every query for every target."""
    source = PrometheusSource(prom.url, _targets("a", "b"), batch_max_age_s=0.5)
    n = len(source.grouped_queries)
    await _tick(source, ["ns/a", "ns/b"], now=0.0)  # both known: batched together
    prom.hold, prom.received = asyncio.Event(), asyncio.Event()
    first = asyncio.ensure_future(source.read("ns/a", PODS, now=1.0))
    await asyncio.wait_for(prom.received.wait(), 10)  # the tick's batch is fetching
    late = asyncio.ensure_future(source.read("ns/b", PODS, now=3.0))
    await asyncio.sleep(0)
    prom.hold.set()
    a, b = await asyncio.gather(first, late)
    assert len(prom.queries) == 2 * n
    assert a.signals["waiting"] == 0.3 and b.signals["waiting"] == 0.5
    await _tick(source, ["ns/a", "ns/b"], now=4.0)  # the next tick: a batch of its own
    assert len(prom.queries) == 3 * n
    await source.close()
