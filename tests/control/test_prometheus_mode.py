"""The controller's Prometheus mode reads its targets in one batch per tick."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError

from autoscaler.app import Controller
from autoscaler.control.ports import TargetView
from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import TargetStatus
from autoscaler.domain import TargetRef
from autoscaler.metrics.prometheus import (
    RECORDED_QUERIES,
    TARGET_LABEL,
    VLLM_QUERIES,
    PrometheusSource,
)
from autoscaler.policy.schema import load_policy
from autoscaler.settings import Settings
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.support.fake_prometheus import FakePrometheus, serve_fake_prometheus

POLICY = {"maxReplicaCount": 8, "metrics": [{"signal": "waiting", "target": 10}]}


@pytest.fixture
async def prom() -> AsyncIterator[FakePrometheus]:
    async with serve_fake_prometheus() as fake:
        yield fake


async def test_prometheus_mode_reads_every_target_with_one_query_per_signal(
    prom: FakePrometheus,
) -> None:
    ctl = Controller(Settings(prometheus_url=prom.url), api=None, identity="a")
    specs = []
    for scaler, workload in (("a-scaler", "a"), ("b-scaler", "b")):
        ref = TargetRef("ns", scaler)
        spec = TargetSpec(
            ref=ref, policy=load_policy(POLICY), scale_target_ref=ScaleTargetRef(name=workload)
        )
        ctl.state.targets[ref] = TargetStatus(spec=spec)
        specs.append(spec)
    signals = ctl._signals()
    assert isinstance(signals, SourceSignals)
    view = TargetView(spec_replicas=1, ready_replicas=1)
    try:
        a, b = await asyncio.gather(*(signals.read(s, view, now=0.0) for s in specs))
    finally:
        await signals.close()
    assert (a.signals["waiting"], b.signals["waiting"]) == (0.3, 0.5)  # workloads a, b
    # one per non-quantile signal, one bucket query per histogram family
    assert len(prom.queries) == len(PrometheusSource(prom.url, {}).grouped_queries)
    assert len(prom.queries) < len(VLLM_QUERIES)
    assert all(TARGET_LABEL in q and '"(a|b)-.*"' in q for q in prom.queries)


async def test_recorded_rules_setting_reads_the_quantiles_from_recorded_series(
    prom: FakePrometheus,
) -> None:
    ctl = Controller(
        Settings(prometheus_url=prom.url, prometheus_recorded_rules=True), api=None, identity="a"
    )
    signals = ctl._signals()
    assert isinstance(signals, SourceSignals) and isinstance(signals.source, PrometheusSource)
    assert signals.source.queries == RECORDED_QUERIES
    sent = signals.source.grouped_queries.values()
    assert sum(":rate1m{" in t for t in sent) == 3 and not any("_bucket{" in t for t in sent)
    await signals.close()


def test_recorded_rules_without_a_prometheus_url_is_refused() -> None:
    with pytest.raises(ValidationError, match="prometheus_recorded_rules=True.*prometheus_url"):
        Settings(prometheus_recorded_rules=True)
