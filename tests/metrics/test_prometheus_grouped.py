"""Grouped PromQL (one query per signal per tick for every target) against a real
Prometheus scraping real HTTP vLLM pages: same signals as one query per target."""

from __future__ import annotations

import asyncio
import time

import pytest

from autoscaler.metrics.prometheus import PrometheusSource, WorkloadPods
from autoscaler.metrics.source import PodEndpoint, TargetReading
from tests.metrics.vllm_pods import FakeVllm, serve_each
from tests.support.prometheus import PrometheusServer

# (namespace, workload) -> its pods' (waiting, running, kv); "qwen.v2" checks the escaping
WORKLOADS = {
    ("llm", "llama-a"): [(1, 5, 0.2), (3, 6, 0.4)],
    ("llm", "llama-b"): [(7, 2, 0.9)],
    ("llm", "qwen.v2"): [(0, 1, 0.1), (2, 2, 0.3)],
    ("batch", "mistral"): [(4, 8, 0.5)],
    ("batch", "gemma"): [(6, 3, 0.7), (5, 4, 0.6)],
}
ABSENT = WorkloadPods("llm", "no-pods")  # a target Prometheus has no series for


async def _read_all(source: PrometheusSource, keys: list[str]) -> dict[str, TargetReading]:
    pods = [PodEndpoint("p", "unused")]
    got = await asyncio.gather(*(source.read(k, pods, now=10.0) for k in keys))
    return dict(zip(keys, got, strict=True))


@pytest.mark.timeout(120)
async def test_grouped_queries_read_the_same_signals_as_per_target_queries() -> None:
    pods: list[FakeVllm] = []
    labels: list[dict[str, str]] = []
    for (ns, name), values in WORKLOADS.items():
        for i, (waiting, running, kv) in enumerate(values):
            pod = FakeVllm()
            pod.set(waiting=waiting, running=running, kv=kv)
            pods.append(pod)
            labels.append({"namespace": ns, "pod": f"{name}-7d9f8-{i}x{len(pods)}q"})
    runners, netlocs = await serve_each(pods)
    try:
        async with PrometheusServer(netlocs, scrape_interval_s=0.5, target_labels=labels) as prom:
            await prom.wait_for("vllm:num_requests_waiting", deadline_s=40, min_series=len(pods))
            for _ in range(4):  # traffic, so rates and TTFT quantiles have values
                for n, pod in enumerate(pods):
                    pod.serve(prompt_tokens=10 * (n + 1), ttfts=[0.01 * (n + 1), 0.3])
                await asyncio.sleep(0.5)
            await prom.wait_for(
                "rate(vllm:prompt_tokens_total[1m]) > 0", deadline_s=30, min_series=len(pods)
            )
            at = time.time() - 1.0  # both modes evaluate at one instant: exact comparison
            targets = {f"{ns}/{name}": WorkloadPods(ns, name) for ns, name in WORKLOADS}
            targets["llm/absent"] = ABSENT
            keys = list(targets)
            grouped = PrometheusSource(prom.url, targets, eval_time=lambda: at)
            per_target = PrometheusSource(
                prom.url, {k: t.selector() for k, t in targets.items()}, eval_time=lambda: at
            )
            try:
                first = await _read_all(grouped, keys)  # the reads of one turn join a batch
                first_queries, grouped.queries_sent = grouped.queries_sent, 0
                by_group = await _read_all(grouped, keys)  # next tick: a new batch
                one_each = await _read_all(per_target, keys)
            finally:
                await grouped.close()
                await per_target.close()
    finally:
        for runner in runners:
            await runner.cleanup()

    for key in keys:
        assert by_group[key].signals == one_each[key].signals, key
        assert by_group[key].errors == one_each[key].errors == ()
        assert first[key].signals == by_group[key].signals
    s = by_group["llm/llama-a"].signals
    assert (s["waiting"], s["running"], s["kv_cache_usage_max"]) == (4, 11, 0.4)
    assert s["kv_cache_usage"] == pytest.approx(0.3)
    assert s["prompt_tokens_per_s"] > 0 and 0 < s["ttft_p50_s"] <= 0.5
    assert by_group["llm/qwen.v2"].signals["waiting"] == 2  # the dot matched literally
    assert by_group["llm/absent"].signals == {}  # no series: missing, never 0
    # one query per signal (one per histogram family for the quantiles) per tick for the
    # 6 targets, from the first tick on
    assert first_queries == grouped.queries_sent == len(grouped.grouped_queries)
    assert per_target.queries_sent == len(per_target.queries) * len(keys)
