"""Sleepers out of the Prometheus queries: a sleeping pod's series are idle (nothing
waiting or running, an empty KV cache) and, averaged in, would pull a target's values
down. With the sleepers' names given (`PrometheusSource.exclude_pods`, which
`SourceSignals` calls from the informer cache's view), grouped and per-target queries
against a real Prometheus average over the awake pods only."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

import pytest

from autoscaler.control.ports import Replica, TargetView
from autoscaler.control.signals import SourceSignals
from autoscaler.domain import TargetRef
from autoscaler.metrics.prometheus import PrometheusSource, WorkloadPods, render_grouped
from autoscaler.metrics.source import PodEndpoint, TargetReading
from autoscaler.policy.schema import load_policy
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.metrics.vllm_pods import FakeVllm, serve_each
from tests.support.prometheus import PrometheusServer

AWAKE = {"llama-5c7d-a1": (4, 6, 0.6), "llama-5c7d-b2": (2, 4, 0.8)}
ASLEEP = "llama-5c7d-c3"  # idle: 0 waiting, 0 running, KV 0
OTHER = {"qwen-9f-a1": (1, 1, 0.5)}  # another target in the same grouped queries


def test_the_exclusion_is_part_of_both_selectors() -> None:
    t = WorkloadPods("llm", "llama", excluded=(ASLEEP, "llama-x.y"))
    assert t.selector() == ('namespace="llm",pod=~"llama-.*",pod!~"llama-5c7d-c3|llama-x\\\\.y"')
    grouped = render_grouped("sum by ($by) ($(x{$selector}$))", [t, WorkloadPods("llm", "q")])
    assert 'pod!~"llama-5c7d-c3|llama-x\\\\.y"' in grouped
    assert WorkloadPods("llm", "llama").selector() == 'namespace="llm",pod=~"llama-.*"'


@pytest.mark.timeout(120)
async def test_prometheus_averages_over_the_awake_pods_once_sleepers_are_excluded() -> None:
    pods: list[FakeVllm] = []
    labels: list[dict[str, str]] = []
    for name, (waiting, running, kv) in {**AWAKE, ASLEEP: (0, 0, 0.0), **OTHER}.items():
        pod = FakeVllm()
        pod.set(waiting=waiting, running=running, kv=kv)
        pods.append(pod)
        labels.append({"namespace": "llm", "pod": name})
    runners, netlocs = await serve_each(pods)
    try:
        async with PrometheusServer(netlocs, scrape_interval_s=0.5, target_labels=labels) as prom:
            await prom.wait_for("vllm:num_requests_waiting", deadline_s=40, min_series=len(pods))
            await asyncio.sleep(2.0)  # a few scrapes in: every series has a sample at `at`
            at = time.time() - 0.5
            targets = {
                "llm/llama": WorkloadPods("llm", "llama"),
                "llm/qwen": WorkloadPods("llm", "qwen"),
            }
            grouped = PrometheusSource(prom.url, targets, eval_time=lambda: at)
            one = PrometheusSource(
                prom.url, {k: t.selector() for k, t in targets.items()}, eval_time=lambda: at
            )
            try:
                before = await _read(grouped)
                grouped.exclude_pods("llm/llama", [ASLEEP])
                after = await _read(grouped)
                # a string selector is the user's own: left as written
                one.exclude_pods("llm/llama", [ASLEEP])
                plain = await _read(one)
                grouped.exclude_pods("llm/llama", [])  # woken: back in
                again = await _read(grouped)
            finally:
                await grouped.close()
                await one.close()
    finally:
        for runner in runners:
            await runner.cleanup()

    b, a = before["llm/llama"].signals, after["llm/llama"].signals
    assert b["kv_cache_usage"] == pytest.approx((0.6 + 0.8 + 0.0) / 3)  # pulled down
    assert a["kv_cache_usage"] == pytest.approx((0.6 + 0.8) / 2)  # the awake pods only
    assert (a["waiting"], a["running"], a["kv_cache_usage_max"]) == (6, 10, 0.8)
    assert after["llm/qwen"].signals == before["llm/qwen"].signals  # the others unchanged
    assert plain["llm/llama"].signals["kv_cache_usage"] == pytest.approx(b["kv_cache_usage"])
    assert again["llm/llama"].signals == b


async def _read(source: PrometheusSource) -> dict[str, TargetReading]:
    keys = ["llm/llama", "llm/qwen"]
    pods = [PodEndpoint("p", "unused")]
    got = await asyncio.gather(*(source.read(k, pods, now=10.0) for k in keys))
    return dict(zip(keys, got, strict=True))


class Recording:
    def __init__(self) -> None:
        self.excluded: list[tuple[str, list[str]]] = []

    def exclude_pods(self, key: str, pods: Sequence[str]) -> None:
        self.excluded.append((key, list(pods)))

    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        return TargetReading(now, {}, pods_read=len(pods))

    async def close(self) -> None:
        return None


async def test_source_signals_hands_the_sleepers_names_from_the_view_to_the_source() -> None:
    source = Recording()
    signals = SourceSignals(source)
    ref = TargetRef("llm", "llama")
    sleepy = TargetSpec(
        ref=ref,
        policy=load_policy({"sleep": {"maxSleeping": 1}}),
        scale_target_ref=ScaleTargetRef(name="llama"),
    )
    view = TargetView(
        spec_replicas=2,
        ready_replicas=1,
        sleeping_replicas=1,
        replicas=(Replica("llama-a", True, False), Replica("llama-b", True, True)),
    )
    await signals.read(sleepy, view, 1.0)
    woken = TargetView(
        spec_replicas=2, ready_replicas=2, replicas=(Replica("llama-b", True, False),)
    )
    await signals.read(sleepy, woken, 2.0)
    plain = TargetSpec(ref=ref, policy=load_policy({}), scale_target_ref=ScaleTargetRef(name="x"))
    await signals.read(plain, TargetView(spec_replicas=1, ready_replicas=1), 3.0)
    # asleep: left out; woken: the exclusion is cleared; no sleepers ever: not called
    assert source.excluded == [("llm/llama", ["llama-b"]), ("llm/llama", [])]
