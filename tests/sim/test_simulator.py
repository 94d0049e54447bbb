"""Cluster model, simulation loop and each baseline's semantics on small synthetic traces."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main
from autoscaler.domain import DecisionState, Observation
from autoscaler.policy.core import decide
from autoscaler.sim.cluster import Cluster, ClusterConfig, ColdStartModel, Phase, PodState
from autoscaler.sim.policies import (
    AibrixApa,
    HpaGpuUtil,
    KnativeKpa,
    StaticPeak,
    keda_seed,
    keda_seed_policy,
    ours,
)
from autoscaler.sim.replica import PROFILES
from autoscaler.sim.simulator import ScrapeModel, SimView, simulate
from autoscaler.sim.traces import Trace, from_arrays, poisson_trace

H100 = PROFILES["8b-h100"]
CFG = ClusterConfig(profile=H100)
REQUIRED = (
    "gpu_hours",
    "cost_usd",
    "requests",
    "slo_attainment",
    "ttft_p50_s",
    "ttft_p99_s",
    "itl_p99_s",
    "dropped",
    "scale_events",
    "max_replicas",
    # issue 18 (docs/simulator.md, "JSON (stable fields)")
    "rejected",
    "slo_misses",
    "slo_feasible_share",
    "slo_attainment_feasible",
)


def burst_trace(seed: int = 1) -> Trace:
    """Quiet, a 2-minute burst at 12x, quiet again (10 minutes)."""
    parts = [
        poisson_trace(2.0, 200.0, 1000, 150, seed=seed),
        poisson_trace(24.0, 120.0, 1000, 150, seed=seed + 1),
        poisson_trace(2.0, 280.0, 1000, 150, seed=seed + 2),
    ]
    offsets = [0.0, 200.0, 320.0]
    arrival = np.concatenate([p.arrival_s + o for p, o in zip(parts, offsets, strict=True)])
    prompt = np.concatenate([p.prompt_tokens for p in parts])
    output = np.concatenate([p.output_tokens for p in parts])
    return from_arrays("burst", arrival, prompt.tolist(), output.tolist())


def all_policies() -> list[object]:
    return [StaticPeak(3), HpaGpuUtil(1), keda_seed(1), KnativeKpa(1), AibrixApa(1), ours(1)]


@pytest.mark.parametrize("index", range(6))
def test_every_request_is_finished_or_counted_dropped(index: int) -> None:
    trace = burst_trace()
    policy = all_policies()[index]
    res = simulate(trace, policy, CFG, seed=3)  # type: ignore[arg-type]
    served = int(np.count_nonzero(np.isfinite(res.ttft_s)))
    assert served + res.dropped == len(trace)
    s = res.summary()
    assert all(s[k] is not None for k in REQUIRED)
    assert s["cost_usd"] == pytest.approx(s["gpu_hours"] * CFG.price_per_gpu_hour, abs=0.01)


def test_requests_nobody_can_serve_are_dropped_after_the_router_timeout() -> None:
    trace = poisson_trace(1.0, 60.0, 100, 10, seed=2)
    res = simulate(trace, StaticPeak(0), replace(CFG, router_timeout_s=30.0), seed=0)
    assert res.dropped == len(trace)
    assert res.summary()["slo_attainment"] == 0.0
    assert res.gpu_hours == 0.0


def test_same_seed_same_results_and_another_seed_other_cold_starts() -> None:
    trace = burst_trace()
    a = simulate(trace, keda_seed(1), CFG, seed=5).summary()
    b = simulate(trace, keda_seed(1), CFG, seed=5).summary()
    c = simulate(trace, keda_seed(1), CFG, seed=6).summary()
    a.pop("wall_s"), b.pop("wall_s"), c.pop("wall_s")
    assert a == b
    assert a["cold_start_p50_s"] != c["cold_start_p50_s"]


def test_static_peak_never_changes_its_replicas() -> None:
    res = simulate(burst_trace(), StaticPeak(4), CFG, seed=0)
    assert set(res.timeline_spec) == {4}
    assert res.scale_events == 0
    # Billed for the whole run: 4 GPUs from t=0 to the end.
    assert res.gpu_hours == pytest.approx(4 * res.end_s / 3600, rel=1e-6)


def test_hpa_gpu_util_never_scales_down_while_requests_run() -> None:
    trace = poisson_trace(6.0, 600.0, 800, 200, seed=4)  # steady load, always busy
    res = simulate(trace, HpaGpuUtil(1), CFG, seed=0)
    under_load = [n for t, n in zip(res.timeline_t, res.timeline_spec, strict=True) if t < 590]
    assert all(b >= a for a, b in itertools.pairwise(under_load))
    assert max(under_load) > 1  # ~100% utilisation keeps asking for more


def test_keda_seed_kv_trigger_never_asks_for_more_than_two_replicas() -> None:
    policy = keda_seed_policy()
    for current in (1, 4, 12):
        obs = Observation(
            t=100.0,
            current_replicas=current,
            ready_replicas=current,
            signals={"waiting": 0.0, "kv_cache_usage_max": 1.0},
        )
        decision, _ = decide(policy, obs, DecisionState(), 100.0)
        kv = next(m for m in decision.metrics if m.signal == "kv_cache_usage_max")
        assert kv.replicas is not None and kv.replicas <= 2


def test_keda_seed_sees_prometheus_data_up_to_a_scrape_interval_old() -> None:
    trace = poisson_trace(3.0, 120.0, 500, 50, seed=1)
    cluster_res = simulate(trace, StaticPeak(1), CFG, seed=0)
    assert cluster_res.dropped == 0
    # Rebuild a view by running a policy that records what it saw.
    seen: list[tuple[float, float]] = []

    class Spy(StaticPeak):
        poll_interval_s = 1.0

        def desired(self, now: float, view: SimView) -> int:
            fresh, _ = view.signals(now, ScrapeModel(interval_s=1))
            lagged, _ = view.signals(now, ScrapeModel(interval_s=15))
            i15 = view.history.index_at(now // 15 * 15)
            if i15 is not None and "running" in lagged:
                assert lagged["running"] == view.history.running[i15]
                seen.append((fresh["running"], lagged["running"]))
            return 1

    simulate(trace, Spy(1), CFG, seed=0)
    assert len(seen) > 50
    assert any(f != lag for f, lag in seen)  # the lag is visible


def test_knative_kpa_panics_on_a_burst_and_holds_through_the_stable_window() -> None:
    res = simulate(burst_trace(), KnativeKpa(1, target_concurrency=16), CFG, seed=0)
    t = np.asarray(res.timeline_t)
    spec = np.asarray(res.timeline_spec)
    during = spec[(t > 200) & (t <= 240)]
    assert during.max() >= 2 * spec[t <= 200].max()  # panic: at once, not after 60 s
    peak_t = t[np.argmax(spec)]
    right_after = spec[(t > peak_t) & (t < peak_t + 55)]
    assert (right_after == spec.max()).all()  # no scale-down inside the panic hold


def test_aibrix_apa_holds_inside_its_tolerance_band() -> None:
    apa = AibrixApa(2)
    apa.config = replace(apa.config, signal="running", target=10.0)
    # 2 ready pods at 10.5 running each: ratio 1.05 inside [0.8, 1.1] -> hold.
    res_hold = _apa_decision(apa, running_per_pod=10.5, pods=2)
    res_up = _apa_decision(apa, running_per_pod=25.0, pods=2)
    res_down = _apa_decision(apa, running_per_pod=1.0, pods=4)
    assert res_hold == 2
    assert res_up == 4  # ceil(2 * 2.5) = 5, capped at 2x
    assert res_down == 2  # ceil(4 * 0.1) = 1, floored at /2


def _apa_decision(apa: AibrixApa, running_per_pod: float, pods: int) -> int:
    cluster = Cluster(CFG, np.random.default_rng(0))
    cluster.scale_to(pods, 0.0)
    for pod in cluster.live:
        pod.ready_t = 0.0
    cluster.tick(0.0)
    from autoscaler.sim.simulator import MetricsHistory

    h = MetricsHistory()
    for k in range(1, 31):
        h.t.append(float(k))
        h.ready.append(pods)
        h.running.append(running_per_pod * pods)
        h.waiting.append(0.0)
        h.kv_mean.append(0.1)
    return apa.desired(30.0, SimView(h, cluster))


def test_cold_start_phase_matches_its_median_and_p90() -> None:
    rng = np.random.default_rng(0)
    phase = Phase(120, 300)
    xs = np.array([phase.sample(rng) for _ in range(20_000)])
    assert np.median(xs) == pytest.approx(120, rel=0.03)
    assert np.quantile(xs, 0.9) == pytest.approx(300, rel=0.04)
    assert ColdStartModel().warm_median_s == pytest.approx(57.0)


def test_warm_pool_lets_a_scale_up_skip_node_provisioning() -> None:
    def first_cold_start(pool: int) -> float:
        cluster = Cluster(replace(CFG, warm_pool_size=pool), np.random.default_rng(1))
        cluster.reconcile_warm_pool(pool, 0.0)
        cluster.tick(1000.0)  # pause pods pulled the image long ago
        cluster.scale_to(1, 1000.0)
        pod = cluster.live[0]
        return pod.ready_t - pod.created_t

    assert first_cold_start(pool=0) > first_cold_start(pool=1) + 100


def test_a_ready_node_is_preferred_to_a_pause_pod_on_a_node_still_provisioning() -> None:
    cfg = replace(CFG, gpus_per_node=2)
    cluster = Cluster(cfg, np.random.default_rng(0))
    cluster.scale_to(1, 0.0)  # node 0 (provisioning), slot 0
    cluster.tick(2000.0)  # node 0 up, the pod ready
    cluster.scale_to(2, 2000.0)  # fills node 0
    cluster.reconcile_warm_pool(1, 2000.0)  # the pause pod needs a new node 1
    pause = cluster.pause_pods[0]
    assert pause.node.nid == 1 and pause.node.ready_t > 2000.0
    cluster.tick(4000.0)
    cluster.scale_to(1, 4000.0)  # frees a slot on ready node 0 (drained at once: idle)
    cluster.tick(4001.0)
    node1 = pause.node
    node1.ready_t = 10_000.0  # pretend node 1 is still coming up
    cluster.scale_to(2, 4001.0)
    newest = max(cluster.live, key=lambda p: p.created_t)
    assert newest.node.nid == 0  # the free slot on the ready node, not the pause slot
    assert cluster.pause_pods == [pause]


def test_every_policy_name_builds_a_policy_reporting_that_name() -> None:
    from autoscaler.sim.compare import CompareConfig, build_policy
    from autoscaler.sim.policies import POLICY_NAMES

    cfg = CompareConfig(cluster=CFG)
    assert [build_policy(n, 4, 1, cfg).name for n in POLICY_NAMES] == list(POLICY_NAMES)


def test_scale_down_drains_in_flight_requests_instead_of_dropping_them() -> None:
    cluster = Cluster(CFG, np.random.default_rng(0))
    cluster.scale_to(2, 0.0)
    for pod in cluster.live:
        pod.ready_t = 0.0
    cluster.tick(0.0)
    for rid, pod in enumerate(list(cluster.ready)):
        assert pod.replica is not None
        pod.replica.add_request(rid, 500, 2000, 0.0)
    cluster.scale_to(1, 0.1)
    victim = next(p for p in cluster.live if p.state is PodState.DRAINING)
    assert victim.replica is not None
    assert victim not in cluster.ready
    assert cluster.tick(1.0) == []
    assert victim.state is PodState.DRAINING  # still generating
    assert cluster.tick(120.0) == []
    assert victim.state is PodState.DELETED
    assert victim.replica.request_success_total == 1


def test_time_slicing_slows_co_located_busy_replicas() -> None:
    cfg = replace(CFG, sharing="time-slicing", replicas_per_gpu=2)
    cluster = Cluster(cfg, np.random.default_rng(0))
    cluster.scale_to(2, 0.0)
    for pod in cluster.live:
        pod.ready_t = 0.0
    cluster.tick(0.0)
    a, b = (p.replica for p in cluster.ready)
    assert a is not None and b is not None
    a.add_request(0, 100, 100, 0.0)
    b.add_request(1, 100, 100, 0.0)
    cluster.tick(0.5)
    assert a.step_time_scale > 2.0
    assert cfg.gpus_billed_per_replica == 0.5


def test_cli_writes_json_with_every_field_per_policy(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": int(i * 400), "input_length": 300 + i % 50, "output_length": 40}
        for i in range(300)
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "r.json"
    png = tmp_path / "r.png"
    code = main(
        [
            "simulate",
            "--trace",
            str(trace),
            "--policy",
            "static-peak,keda-seed,ours",
            "--json",
            str(out),
            "--plot",
            str(png),
            "--quiet",
        ]
    )
    assert code == 0
    doc = json.loads(out.read_text())
    assert set(doc["policies"]) == {"static-peak", "keda-seed", "ours"}
    for summary in doc["policies"].values():
        for key in REQUIRED:
            assert key in summary
        assert summary["requests"] == 300
    assert png.stat().st_size > 10_000


def test_cli_rejects_unknown_policy_naming_the_choices(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 5}\n')
    assert main(["simulate", "--trace", str(trace), "--policy", "hpa-cpu"]) == 2
    err = capsys.readouterr().err
    assert "'hpa-cpu'" in err and "keda-seed" in err


def test_stop_at_keeps_every_first_token_seen_before_the_stop() -> None:
    trace = burst_trace()
    full = simulate(trace, StaticPeak(2), CFG, slo_ttft_s=0.5, seed=0)
    cut = simulate(trace, StaticPeak(2), CFG, slo_ttft_s=0.5, seed=0, stop_at_s=300.0)
    assert cut.stopped_early and not full.stopped_early
    first_token_t = trace.arrival_s + full.ttft_s
    seen = first_token_t <= 300.0
    assert seen.any() and not seen.all()
    # in flight at the stop is not "dropped": first tokens before it are kept exactly
    np.testing.assert_array_equal(cut.ttft_s[seen], full.ttft_s[seen])
    assert np.isinf(cut.ttft_s[~seen & (trace.arrival_s > 310.0)]).all()


def test_miss_budget_stops_a_failing_fleet_and_leaves_a_passing_one_alone() -> None:
    trace = burst_trace()
    full = simulate(trace, StaticPeak(1), CFG, slo_ttft_s=0.5, seed=0)
    misses = full.summary()["slo_misses"]
    assert misses > 100
    cut = simulate(trace, StaticPeak(1), CFG, slo_ttft_s=0.5, seed=0, miss_budget=misses // 2)
    assert cut.stopped_early and cut.end_s < full.end_s
    assert cut.summary()["slo_misses"] > misses // 2
    same = simulate(trace, StaticPeak(1), CFG, slo_ttft_s=0.5, seed=0, miss_budget=misses)
    assert not same.stopped_early
    assert same.summary() | {"wall_s": 0} == full.summary() | {"wall_s": 0}


def _long_prompt_trace(tmp_path: Path, long_every: int, n: int = 200) -> Path:
    """``n`` requests of 1k prompt tokens, every ``long_every``-th of 20k (over 8k)."""
    trace = tmp_path / f"long-{long_every}-{n}.jsonl"
    rows = [
        {
            "timestamp": int(i * 600_000 / n),
            "input_length": 20_000 if i % long_every == 0 else 1000,
            "output_length": 40,
        }
        for i in range(n)
    ]
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    return trace


def test_cli_summary_names_the_refused_share_over_max_model_len(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = _long_prompt_trace(tmp_path, long_every=4)
    out = tmp_path / "r.json"
    argv = ["simulate", "--trace", str(trace), "--policy", "static-peak", "--quiet"]
    assert main([*argv, "--json", str(out)]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "refused:" in x)
    assert "WARNING refused: 50 of 200 requests (25.0%)" in line
    assert "max_model_len 8192" in line and "--profile auto" in line
    assert json.loads(out.read_text())["admission"]["refused"] == 50


def test_cli_profile_auto_picks_a_context_that_covers_the_p999_request_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    long = _long_prompt_trace(tmp_path, long_every=4)
    argv = ["simulate", "--policy", "static-peak", "--quiet", "--profile", "auto"]
    assert main([*argv, "--trace", str(long)]) == 0
    out = capsys.readouterr().out
    assert "--profile auto: 8b-h100-128k" in out and "refused: 0 of 200" in out
    short = _long_prompt_trace(tmp_path, long_every=10_000, n=2000)  # request 0 is long
    assert main([*argv, "--trace", str(short)]) == 0
    # one long request in 2000 is above the 99.9th percentile: the 8k profile
    out = capsys.readouterr().out
    assert "--profile auto: 8b-h100 " in out
