"""Variants and prefill/decode roles in Prometheus mode, against a real Prometheus: a
model over several Deployments reads its signals over every variant's pods in the
tick's grouped queries (combined here per workload: sums add, the KV mean is weighted
by each workload's series count, quantiles come from the bucket rates summed per
bound), the same numbers Prometheus computes when asked about all those pods at once;
each role reads its own variants' pods; a role without series reads missing, never 0."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Sequence
from typing import Any

import pytest

from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.roles import role_signals, role_spec, role_targets, split_role_ref
from autoscaler.control.signals import SourceSignals, workload_pods
from autoscaler.domain import TargetRef
from autoscaler.metrics.prometheus import (
    VLLM_QUERIES,
    PrometheusSource,
    WorkloadPods,
    _combine,
    _combiner,
    _Grouped,
    render_grouped,
)
from autoscaler.metrics.source import PodEndpoint, TargetReading
from autoscaler.policy.roles import RoleState, size_roles
from autoscaler.policy.schema import load_policy
from autoscaler.target import ROLES, Role, RolesSpec, ScaleTargetRef, TargetSpec, VariantSpec
from tests.metrics.vllm_pods import FakeVllm, serve_each
from tests.support.prometheus import PrometheusServer

NS = "llm"
# pod -> (waiting, running, KV usage, prompt tokens per serve, TTFT samples per serve)
PODS: dict[str, tuple[float, float, float, float, list[float]]] = {
    "llama-h100-5c7d-a1": (4, 6, 0.6, 300, [0.02, 0.05]),
    "llama-mig-77f-b1": (2, 4, 0.8, 100, [0.3, 0.4, 0.6]),
    "llama-mig-77f-b2": (1, 1, 0.2, 50, [0.08]),
    # roles: one prefill Deployment, two decode ones (one name a prefix of the other)
    "pd-prefill-9a-p1": (5, 0, 0.1, 2000, [0.2, 0.9]),
    "pd-decode-3b-d1": (0, 30, 0.5, 0, []),
    "pd-decode-mig-4c-d2": (0, 10, 0.9, 0, []),
    "qwen-9f-q1": (7, 7, 0.7, 10, [0.01]),  # another target in the same batch
}
LLAMA = ("llama-h100-5c7d-a1", "llama-mig-77f-b1", "llama-mig-77f-b2")
UNION = 'namespace="llm",pod=~"(llama-h100|llama-mig)-.*"'


def _variant(name: str, deployment: str, role: Role | None = None) -> VariantSpec:
    return VariantSpec(name, ScaleTargetRef(name=deployment), 1.0, role=role)


LLAMA_SPEC = TargetSpec(
    ref=TargetRef(NS, "llama"),
    policy=load_policy({}),
    scale_target_ref=ScaleTargetRef(name="llama-h100"),
    variants=(_variant("h100", "llama-h100"), _variant("mig", "llama-mig")),
)
PD_SPEC = TargetSpec(
    ref=TargetRef(NS, "pd"),
    policy=load_policy({}),
    scale_target_ref=ScaleTargetRef(name="pd-prefill"),
    variants=(
        _variant("prefill", "pd-prefill", "prefill"),
        _variant("decode", "pd-decode", "decode"),
        _variant("decode-mig", "pd-decode-mig", "decode"),
    ),
    roles=RolesSpec(prompt_tokens_per_s_per_prefill=100.0, running_per_decode=16.0),
)
# the same roles, but the decode Deployment has no series in Prometheus
GONE_SPEC = TargetSpec(
    ref=TargetRef(NS, "gone"),
    policy=load_policy({}),
    scale_target_ref=ScaleTargetRef(name="pd-prefill"),
    variants=(
        _variant("prefill", "pd-prefill", "prefill"),
        _variant("decode", "gone-decode", "decode"),
    ),
    roles=RolesSpec(prompt_tokens_per_s_per_prefill=100.0, running_per_decode=16.0),
)
SPECS = {str(s.ref): s for s in (LLAMA_SPEC, PD_SPEC, GONE_SPEC)}


def selector(key: str) -> WorkloadPods:
    """As the controller resolves keys (autoscaler/app.py): a role's key reads its role's
    variants; a model's key every variant's; a plain target its workload's."""
    if key == "llm/qwen":
        return WorkloadPods(NS, "qwen")
    namespace, _, name = key.partition("/")
    ref, role = split_role_ref(TargetRef(namespace, name))
    return workload_pods(SPECS[str(ref)], role)


def test_a_target_over_several_workloads_selects_all_their_pods() -> None:
    t = workload_pods(LLAMA_SPEC)
    assert (t.name, t.others, t.names) == (
        "llama-h100",
        ("llama-mig",),
        ("llama-h100", "llama-mig"),
    )
    assert t.selector() == UNION
    decode = workload_pods(PD_SPEC, "decode")
    assert decode.names == ("pd-decode-mig", "pd-decode")  # longest first
    assert workload_pods(PD_SPEC, "prefill") == WorkloadPods(NS, "pd-prefill")
    grouped = render_grouped("sum by ($by) ($(x{$selector}$))", [t, decode])
    assert 'pod=~"(pd-decode-mig|llama-h100|llama-mig|pd-decode)-.*"' in grouped
    assert split_role_ref(TargetRef(NS, "pd//decode")) == (TargetRef(NS, "pd"), "decode")
    assert split_role_ref(TargetRef(NS, "pd//x")) == (TargetRef(NS, "pd//x"), None)


def test_how_each_default_signal_combines_over_workloads() -> None:
    ops = {sig: _combiner(tpl) for sig, tpl in VLLM_QUERIES.items() if "histogram" not in tpl}
    assert ops == {
        "waiting": "sum",
        "running": "sum",
        "kv_cache_usage": "avg",
        "kv_cache_usage_max": "max",
        "arrival_rate_per_s": "sum",
        "prompt_tokens_per_s": "sum",
        "generation_tokens_per_s": "sum",
        "preemptions_per_s": "sum",
    }
    assert _combiner("sum by ($by) ($(x{$selector}$)) / 2") is None  # not the outer op
    assert _combiner("quantile by ($by) (0.5, x)") is None


@pytest.mark.timeout(150)
async def test_variants_and_roles_read_from_a_real_prometheus() -> None:
    pods: dict[str, FakeVllm] = {}
    for name, (waiting, running, kv, _, _) in PODS.items():
        pods[name] = pod = FakeVllm()
        pod.set(waiting=waiting, running=running, kv=kv)
        pod.serve(0, [])  # the counter and histogram exported from the first scrape on
    labels = [{"namespace": NS, "pod": name} for name in pods]
    runners, netlocs = await serve_each(list(pods.values()))
    try:
        async with PrometheusServer(netlocs, scrape_interval_s=0.5, target_labels=labels) as prom:
            await prom.wait_for("vllm:num_requests_waiting", deadline_s=40, min_series=len(pods))
            for _ in range(8):  # counters and histograms move under the scrapes
                for name, (_, _, _, tokens, ttfts) in PODS.items():
                    pods[name].serve(tokens, ttfts)
                await asyncio.sleep(0.5)
            at = time.time() - 0.5
            grouped = PrometheusSource(prom.url, selector, eval_time=lambda: at)
            # Prometheus' own aggregation over the same pods: one query per signal
            plain = PrometheusSource(prom.url, {"llm/llama": UNION}, eval_time=lambda: at)
            each = PrometheusSource(
                prom.url, {n: f'namespace="llm",pod="{n}"' for n in LLAMA}, eval_time=lambda: at
            )
            try:
                keys = ["llm/llama", "llm/qwen", "llm/pd//prefill", "llm/pd//decode"]
                got = await _read(grouped, keys)
                sent_once = grouped.queries_sent
                expected = (await _read(plain, ["llm/llama"]))["llm/llama"]
                per_pod = await _read(each, list(LLAMA))
                signals = SourceSignals(grouped)
                roles: dict[Role, SignalReading] = {
                    role: await signals.read(role_spec(GONE_SPEC, role), _view(1), 20.0)
                    for role in ROLES
                }
            finally:
                await grouped.close()
                await plain.close()
                await each.close()
    finally:
        for runner in runners:
            await runner.cleanup()

    llama = got["llm/llama"].signals
    # the sums are the sums of the variants' pods' series
    assert llama["waiting"] == sum(PODS[n][0] for n in LLAMA) == 7
    assert llama["running"] == sum(PODS[n][1] for n in LLAMA) == 11
    assert llama["kv_cache_usage"] == pytest.approx((0.6 + 0.8 + 0.2) / 3)  # over all 3 pods
    assert llama["kv_cache_usage_max"] == 0.8
    rate = sum(per_pod[n].signals["prompt_tokens_per_s"] for n in LLAMA)
    assert llama["prompt_tokens_per_s"] == pytest.approx(rate) and rate > 0
    # and every signal is what Prometheus answers over all the variants' pods at once
    assert set(llama) == set(expected.signals)
    for sig, value in expected.signals.items():
        assert llama[sig] == pytest.approx(value, rel=1e-9), sig
    assert "ttft_p95_s" in llama and "ttft_p50_s" in llama
    assert got["llm/qwen"].signals["waiting"] == 7  # its own pod only
    assert all(not r.errors for r in got.values())
    # the variant target cost no query of its own: one query per signal (+ the KV count)
    assert sent_once == len(grouped.grouped_queries) + 1

    pre, dec = got["llm/pd//prefill"].signals, got["llm/pd//decode"].signals
    assert (pre["waiting"], pre["running"], pre["kv_cache_usage"]) == (5, 0, 0.1)
    assert (dec["waiting"], dec["running"]) == (0, 40)
    assert dec["kv_cache_usage"] == pytest.approx((0.5 + 0.9) / 2)  # the two decode pods
    assert pre["prompt_tokens_per_s"] > 0 and dec["prompt_tokens_per_s"] == 0
    assert "ttft_p95_s" in pre and "ttft_p95_s" not in dec  # no request ever on decode
    by_role: dict[Role, SignalReading] = {
        r: SignalReading(signals=dict(got[f"llm/pd//{r}"].signals)) for r in ROLES
    }
    split = role_signals(by_role)
    assert (split.waiting, split.running) == (5, 40)
    assert split.prompt_tokens_per_s == pre["prompt_tokens_per_s"]
    assert split.kv_usage == dec["kv_cache_usage"]

    # a role whose pods have no series: missing (not 0), and that role holds
    assert roles["decode"].signals == {} and roles["prefill"].signals["waiting"] == 5
    gone = role_signals(roles)
    assert (gone.running, gone.kv_usage) == (None, None)
    sized = size_roles(gone, role_targets(GONE_SPEC), RoleState(2), RoleState(3))
    assert sized.decode == 3
    assert "decode: running and KV usage missing, holding" in sized.notes


def _view(pods: int) -> TargetView:
    return TargetView(
        spec_replicas=pods,
        ready_replicas=pods,
        pods=tuple(PodEndpoint(f"p{i}", "unused") for i in range(pods)),
    )


async def _read(source: PrometheusSource, keys: Sequence[str]) -> dict[str, TargetReading]:
    pods = [PodEndpoint("p", "unused")]
    got = await asyncio.gather(*(source.read(k, pods, now=10.0) for k in keys))
    return dict(zip(keys, got, strict=True))


def test_combining_fails_clearly_and_never_reads_missing_as_zero() -> None:
    unions = {"llm/m": (("llm", "a"), ("llm", "b"))}
    a, b = ("llm", "a"), ("llm", "b")

    def answer(sig: str, groups: dict[tuple[str, str], float], **kw: Any) -> _Grouped:
        return _Grouped(sig, groups=groups, **{"duplicated": set(), **kw})

    total = answer("waiting", {a: 3.0})  # b has no series: adds nothing
    _combine(total, unions, "sum", None)
    assert total.values == {"llm/m": 3.0} and total.key_errors is None
    none = answer("waiting", {})  # no workload answered: missing, not 0
    _combine(none, unions, "sum", None)
    assert none.values == {} and none.key_errors is None
    nan = answer("waiting", {a: 1.0, b: math.nan})
    _combine(nan, unions, "sum", None)
    assert nan.values == {}  # NaN: missing
    kv = answer("kv", {a: 0.5, b: 0.8})
    _combine(kv, unions, "avg", answer("kv count", {a: 3.0, b: 1.0}))
    assert kv.values["llm/m"] == pytest.approx((0.5 * 3 + 0.8) / 4)
    failed = answer("kv", {a: 0.5})
    _combine(failed, unions, "avg", _Grouped("kv count", error="kv count: timeout after 6s"))
    assert failed.values == {} and failed.key_errors is not None
    assert "kv count: timeout after 6s" in failed.key_errors["llm/m"]
    odd = answer("x", {a: 1.0})
    _combine(odd, unions, None, None)
    assert odd.key_errors is not None and "cannot combine" in odd.key_errors["llm/m"]
    twice = answer("waiting", {a: 1.0}, duplicated={a})
    _combine(twice, unions, "sum", None)
    assert twice.values == {} and twice.key_errors is not None
