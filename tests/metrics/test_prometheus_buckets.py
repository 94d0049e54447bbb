"""Quantiles computed in the controller from one bucket query per histogram family equal
a REAL Prometheus' own ``histogram_quantile`` over the same data, target by target.

Pods serve histograms whose bucket counters advance by fixed steps on every scrape
(edge cases included); Prometheus (the Debian 2.42 binary) scrapes them. At one pinned
evaluation time, the grouped `PrometheusSource` (bucket queries, quantiles computed
here) and Prometheus answering the ``histogram_quantile`` templates as written must
agree for every target and quantile: both missing, or equal within 1e-12 relative (the
same IEEE operations on the same numbers: in practice bit-identical)."""

from __future__ import annotations

import asyncio
import json
import math
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest

from autoscaler.metrics.prometheus import (
    RECORDED_QUERIES,
    RECORDED_RULES,
    TARGET_LABEL,
    VLLM_QUERIES,
    PrometheusSource,
    WorkloadPods,
    _quantile,
    render_grouped,
)
from autoscaler.metrics.source import PodEndpoint, TargetReading
from tests.deploy.manifests import DEPLOY, load_docs
from tests.metrics.vllm_pods import serve_each
from tests.support.prometheus import PrometheusServer

TTFT = "vllm:time_to_first_token_seconds"
ITL = "vllm:inter_token_latency_seconds"
TPOT = "vllm:time_per_output_token_seconds"  # the older name, the ITL fallback
LE = ("0.01", "0.1", "0.5", "1", "+Inf")
Hist = dict[str, tuple[tuple[str, ...], tuple[float, ...]]]  # family -> (le, step per scrape)


def h(
    steps: tuple[float, ...], les: tuple[str, ...] = LE
) -> tuple[tuple[str, ...], tuple[float, ...]]:
    return les, steps


# workload -> its pods' histograms (bucket counters advance by ``step`` every scrape)
WORKLOADS: dict[str, list[Hist]] = {
    "spread": [
        {TTFT: h((1, 4, 7, 9, 10)), ITL: h((2, 3, 3, 8, 9))},
        {TTFT: h((0, 2, 2, 5, 6)), ITL: h((0, 1, 4, 4, 5))},
    ],
    "tail": [{TTFT: h((0, 0, 1, 2, 20)), ITL: h((5, 5, 5, 5, 5))}],  # mostly above 1 s
    "inf-only": [{TTFT: h((0, 0, 0, 0, 10)), ITL: h((0, 0, 0, 0, 3))}],
    "idle": [{TTFT: h((0, 0, 0, 0, 0)), ITL: h((0, 0, 0, 0, 0))}],  # zero rate: NaN
    "one-bucket": [{TTFT: h((5,), ("+Inf",)), ITL: h((5,), ("+Inf",))}],
    "no-inf": [{TTFT: h((3, 5), ("0.1", "1")), ITL: h((3, 5), ("0.1", "1"))}],
    "non-monotonic": [{TTFT: h((10, 5, 12, 8, 12)), ITL: h((1, 9, 4, 9, 7))}],
    "zero-bound": [
        {TTFT: h((6, 8, 10), ("0", "0.5", "+Inf")), ITL: h((6, 8, 10), ("0", "0.5", "+Inf"))}
    ],
    "dup-le": [  # le="1" from one pod, le="1.0" from the other: one bucket for Prometheus
        {TTFT: h((1, 2, 3), ("0.5", "1", "+Inf"))},
        {TTFT: h((2, 3, 5), ("0.5", "1.0", "+Inf"))},
    ],
    "mixed-layout": [
        {TTFT: h((1, 3, 4), ("0.1", "1", "+Inf"))},
        {TTFT: h((2, 2), ("0.5", "+Inf"))},
    ],
    "old-itl": [{TPOT: h((1, 2, 3, 4, 5))}],  # only the fallback family: its quantile
    "itl-new-idle": [{ITL: h((0, 0, 0, 0, 0)), TPOT: h((1, 2, 3, 4, 5))}],  # `or`: NaN
}
QUANTILES = (0.0, 0.25, 0.5, 0.9, 0.95, 0.99, 1.0)


class Pod:
    def __init__(self, hists: Hist) -> None:
        self.hists = hists
        self.scrapes = 0

    def page(self) -> bytes:
        self.scrapes += 1
        lines = []
        for family, (les, steps) in self.hists.items():
            lines.append(f"# TYPE {family} histogram")
            for le, step in zip(les, steps, strict=True):
                lines.append(f'{family}_bucket{{le="{le}"}} {100 + step * self.scrapes}')
        return ("\n".join(lines) + "\n").encode()


def _prometheus_answers(url: str, promql: str, at: float) -> dict[str, float]:
    """Prometheus' own answer per workload (NaN included)."""
    form = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"}).encode()
    with urllib.request.urlopen(f"{url}/api/v1/query", form, timeout=10) as resp:
        doc: Any = json.loads(resp.read())
    assert doc["status"] == "success", doc
    return {s["metric"][TARGET_LABEL]: float(s["value"][1]) for s in doc["data"]["result"]}


def _agree(ours: float | None, theirs: float | None) -> bool:
    if ours is None or theirs is None or math.isnan(theirs):
        return ours is None and (theirs is None or math.isnan(theirs))
    return math.isclose(ours, theirs, rel_tol=1e-12, abs_tol=0.0)


@pytest.mark.timeout(150)
async def test_quantiles_from_bucket_answers_equal_prometheus_histogram_quantile() -> None:
    pods: list[Pod] = []
    labels: list[dict[str, str]] = []
    for name, hists in WORKLOADS.items():
        for i, hist in enumerate(hists):
            pods.append(Pod(hist))
            labels.append({"namespace": "llm", "pod": f"{name}-5c7d9-{i}q"})
    series = sum(
        len(les) for hist in (x for w in WORKLOADS.values() for x in w) for les, _ in hist.values()
    )
    # a signal per (family, q): the default templates' form, so they are computed here
    queries = {f"{fam}|{q}": _quantile(q, fam) for fam in (TTFT, ITL, TPOT) for q in QUANTILES}
    queries["itl_p95_s"] = VLLM_QUERIES["itl_p95_s"]  # the `or` of two families
    queries["ttft_p99_s"] = VLLM_QUERIES["ttft_p99_s"]
    targets = {name: WorkloadPods("llm", name) for name in [*WORKLOADS, "absent"]}
    runners, netlocs = await serve_each(pods)
    try:
        async with PrometheusServer(netlocs, scrape_interval_s=0.5, target_labels=labels) as prom:
            await prom.wait_for('{__name__=~".+_bucket"}', deadline_s=40, min_series=series)
            for fam in (TTFT, ITL, TPOT):  # two samples of every bucket: rates
                n = sum(len(x[fam][0]) for w in WORKLOADS.values() for x in w if fam in x)
                await prom.wait_for(f"rate({fam}_bucket[1m]) >= 0", deadline_s=30, min_series=n)
            await asyncio.sleep(1.0)  # a few more scrapes in every rate
            at = time.time() - 0.5
            source = PrometheusSource(prom.url, targets, queries, eval_time=lambda: at)
            try:
                pods_in = [PodEndpoint("p", "unused")]
                ticks: list[dict[str, TargetReading]] = []
                for tick in range(2):  # the 2nd tick decodes through the cached layouts
                    got = await asyncio.gather(
                        *(source.read(k, pods_in, now=float(tick)) for k in targets)
                    )
                    ticks.append(dict(zip(targets, got, strict=True)))
            finally:
                await source.close()
            theirs = {
                sig: await asyncio.to_thread(
                    _prometheus_answers, prom.url, render_grouped(tpl, list(targets.values())), at
                )
                for sig, tpl in queries.items()
            }
    finally:
        for runner in runners:
            await runner.cleanup()

    assert source.queries_sent == 2 * len(source.grouped_queries) == 2 * 3  # 3 families
    assert len(source._layouts) == 3
    compared = present = 0
    for reading in ticks:
        for name in targets:
            signals = reading[name].signals
            for sig in queries:
                ours, want = signals.get(sig), theirs[sig].get(name)
                assert _agree(ours, want), (name, sig, ours, want)
                compared += 1
                present += ours is not None
        assert all(not r.errors for r in reading.values()), reading
    assert compared == 2 * len(targets) * len(queries) and present >= compared // 4
    one = ticks[1]
    # a few answers worked out by hand (rates: step / 0.5 s per scrape, any extrapolation
    # cancels in the ratios): the edge cases are really exercised
    assert one["inf-only"].signals[f"{TTFT}|0.5"] == 1.0  # all above the highest bound
    assert one["zero-bound"].signals[f"{TTFT}|0.5"] == 0.0  # lowest bound <= 0
    assert one["tail"].signals["ttft_p99_s"] == 1.0
    for missing in ("idle", "one-bucket", "no-inf", "absent"):
        assert one[missing].signals == {}, missing
    assert one["old-itl"].signals["itl_p95_s"] == one["old-itl"].signals[f"{TPOT}|0.95"]
    assert "itl_p95_s" not in one["itl-new-idle"].signals  # `or` keeps the new family's NaN
    assert f"{TPOT}|0.95" in one["itl-new-idle"].signals
    assert math.isnan(theirs[f"{TTFT}|0.5"]["idle"])  # Prometheus: a NaN series, not absent


def _recording_groups(interval: str) -> list[dict[str, Any]]:
    """deploy/prometheus/recording-rules.yaml's groups, evaluated every ``interval``."""
    (rule,) = load_docs(DEPLOY / "prometheus" / "recording-rules.yaml")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return [{**g, "interval": interval} for g in groups]


@pytest.mark.timeout(150)
async def test_recorded_bucket_rates_give_prometheus_histogram_quantile_over_them() -> None:
    """With deploy/prometheus/recording-rules.yaml loaded, `RECORDED_QUERIES` reads every
    quantile from the recorded series (no `rate` in the tick's queries) and equals
    Prometheus' own ``histogram_quantile`` over those series, target by target."""
    chosen = ("spread", "non-monotonic", "tail", "old-itl", "itl-new-idle", "idle")
    pods, labels = [], []
    for name in chosen:
        for i, hist in enumerate(WORKLOADS[name]):
            pods.append(Pod(hist))
            labels.append({"namespace": "llm", "pod": f"{name}-5c7d9-{i}q"})
    targets = {name: WorkloadPods("llm", name) for name in [*chosen, "absent"]}
    quantiles = {s: t for s, t in RECORDED_QUERIES.items() if "histogram_quantile" in t}
    runners, netlocs = await serve_each(pods)
    try:
        async with PrometheusServer(
            netlocs,
            scrape_interval_s=0.5,
            target_labels=labels,
            rule_groups=_recording_groups("1s"),
        ) as prom:
            recorded = RECORDED_RULES[TTFT]
            await prom.wait_for(f"{recorded} > 0", deadline_s=40, min_series=5 * 3)
            await prom.wait_for(f"{RECORDED_RULES[TPOT]} > 0", deadline_s=20, min_series=5 * 2)
            await asyncio.sleep(1.5)  # a few rule evaluations
            at = time.time() - 0.5
            source = PrometheusSource(prom.url, targets, RECORDED_QUERIES, eval_time=lambda: at)
            try:
                pods_in = [PodEndpoint("p", "unused")]
                got = await asyncio.gather(*(source.read(k, pods_in, now=0.0) for k in targets))
            finally:
                await source.close()
            theirs = {
                sig: await asyncio.to_thread(
                    _prometheus_answers, prom.url, render_grouped(tpl, list(targets.values())), at
                )
                for sig, tpl in quantiles.items()
            }
    finally:
        for runner in runners:
            await runner.cleanup()

    readings = dict(zip(targets, got, strict=True))
    sent = list(source.grouped_queries.values())
    assert not any("_bucket{" in t for t in sent)  # no rate over bucket samples
    assert sum(t.count(":rate1m{") for t in sent) == 3  # TTFT, ITL, TPOT: recorded
    present = 0
    for name in targets:
        assert readings[name].errors == ()
        for sig in quantiles:
            ours, want = readings[name].signals.get(sig), theirs[sig].get(name)
            assert _agree(ours, want), (name, sig, ours, want)
            present += ours is not None
    assert present >= 12
    assert readings["spread"].signals["ttft_p50_s"] > 0
    assert "itl_p95_s" in readings["old-itl"].signals  # the fallback family, recorded
    assert "itl_p95_s" not in readings["itl-new-idle"].signals
    assert readings["idle"].signals.get("ttft_p50_s") is None
