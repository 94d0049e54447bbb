"""Prefill/decode disaggregation: the KV-ready decode path of the replica engine and the
two-pool simulator (sim/disagg.py) on small synthetic traces."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy.roles import RoleTargets
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.disagg import (
    NO_TRANSFER,
    DisaggConfig,
    DisaggResult,
    KvTransfer,
    itl_attainment,
    role_targets,
    simulate_disagg,
)
from autoscaler.sim.policies import StaticPeak
from autoscaler.sim.replica import PROFILES, Replica
from autoscaler.sim.simulator import simulate
from autoscaler.sim.traces import Trace, from_arrays, poisson_trace

H100 = PROFILES["8b-h100"]
# a warm node with free slots at t = 0: new pods start in ~1 min, no node to provision
CLUSTER = ClusterConfig(profile=H100, initial_free_slots=8)
TARGETS = RoleTargets(
    prompt_tokens_per_s_per_prefill=15_000.0,
    running_per_decode=128.0,
    ttft_slo_s=0.5,
    itl_slo_s=0.05,
)


def fixed(
    p: int,
    d: int,
    transfer: KvTransfer | None = None,
    cluster: ClusterConfig = CLUSTER,
    decode_cluster: ClusterConfig | None = None,
) -> DisaggConfig:
    t = replace(TARGETS, min_prefill=p, max_prefill=p, min_decode=d, max_decode=d)
    return DisaggConfig(
        cluster=cluster,
        targets=t,
        transfer=transfer or KvTransfer(),
        decode_cluster=decode_cluster,
    )


def run_fixed(
    trace: Trace,
    p: int,
    d: int,
    transfer: KvTransfer | None = None,
    seed: int = 0,
    *,
    cluster: ClusterConfig = CLUSTER,
    decode_cluster: ClusterConfig | None = None,
    slo_ttft_s: float = 0.5,
) -> DisaggResult:
    return simulate_disagg(
        trace,
        fixed(p, d, transfer, cluster, decode_cluster),
        slo_ttft_s=slo_ttft_s,
        slo_itl_s=0.05,
        initial=(p, d),
        seed=seed,
    )


# ------------------------------------------------------------------ replica: KV-ready path


def test_kv_ready_request_does_no_prefill_work() -> None:
    rep = Replica(H100)
    assert rep.add_request(0, 6000, 11, 0.0, kv_ready=True)
    rep.run_until(10.0)
    ev = rep.drain_events()
    assert [rid for rid, _ in ev.finished] == [0]
    # ten decode steps at ~6.8 ms; a 6000-token prefill alone would take > 170 ms
    assert ev.finished[0][1] < 0.1
    assert rep.prompt_tokens_total == 0
    assert rep.generation_tokens_total == 10  # the first token came from prefill
    assert ev.first_tokens == [(0, 0.0)]  # released on joining the batch, no TTFT here
    assert sum(rep.metrics().ttft_bucket_counts) == 0


def test_kv_capacity_bounds_decode_concurrency() -> None:
    # 100 blocks of 16 tokens; each request holds 25 blocks for its prompt, plus growth
    small = replace(H100, kv_capacity_tokens=1600)
    rep = Replica(small)
    for rid in range(10):
        rep.add_request(rid, 400, 30, 0.0, kv_ready=True)
    peak = 0
    t = 0.0
    while not rep.idle and t < 60.0:
        rep.step()
        t = rep.clock_s
        peak = max(peak, rep.num_running)
        assert rep.kv_usage() <= 1.0
    assert rep.idle
    assert peak == 3  # 3 x 27 blocks fit in 100, a fourth does not
    assert rep.num_preemptions_total == 0  # admission never over-commits the cache
    assert rep.request_success_total == 10


def test_kv_ready_first_interval_includes_admission_wait() -> None:
    small = replace(H100, kv_capacity_tokens=800, max_num_seqs=1)
    rep = Replica(small)
    rep.add_request(0, 400, 40, 0.0, kv_ready=True)
    rep.add_request(1, 400, 2, 0.0, kv_ready=True)  # waits for request 0's slot
    rep.run_until(5.0)
    finished = dict(rep.drain_events().finished)
    longest = max(d for d, _w in rep.itl_samples)
    assert longest >= finished[0] - 0.001  # request 1 waited for all of request 0
    assert finished[1] > finished[0]


def test_kv_ready_needs_two_output_tokens() -> None:
    with pytest.raises(ConfigError, match="output 1 must be >= 2"):
        Replica(H100).add_request(0, 100, 1, 0.0, kv_ready=True)


# ------------------------------------------------------------------ the two-pool simulator


def test_lone_request_ttft_is_aggregated_prefill_plus_transfer() -> None:
    trace = from_arrays("one", [0.3], [3000], [20])
    agg = simulate(trace, StaticPeak(1), CLUSTER, slo_ttft_s=0.5)
    free = run_fixed(trace, 1, 1, NO_TRANSFER)
    link = KvTransfer()
    paid = run_fixed(trace, 1, 1, link)
    assert free.ttft_s[0] == pytest.approx(agg.ttft_s[0], abs=1e-9)
    assert paid.ttft_s[0] - free.ttft_s[0] == pytest.approx(link.seconds(3000), abs=1e-9)
    assert link.seconds(3000) == pytest.approx(0.001 + 3000 * 131_072 / 25e9)


def test_more_prefill_replicas_lower_ttft_at_fixed_load() -> None:
    # ~44k prompt tokens/s: above one H100's ~34k prefill tokens/s
    trace = poisson_trace(11.0, 120.0, 4000, 20, seed=3)
    one = run_fixed(trace, 1, 2)
    three = run_fixed(trace, 3, 2)
    assert np.quantile(three.ttft_s, 0.9) < 0.5 < np.quantile(one.ttft_s, 0.9)
    assert three.summary()["ttft_attainment"] > one.summary()["ttft_attainment"]
    assert three.gpu_hours_prefill > one.gpu_hours_prefill


def test_decode_itl_free_of_prefill_stalls() -> None:
    # long prompts arriving among running decodes: an aggregated replica's decode steps
    # carry 8192-token prefill chunks (~250 ms), a decode replica's never do
    trace = poisson_trace(2.0, 120.0, 16_000, 200, seed=1)
    trace = replace(trace, output_tokens=np.full(len(trace), 200, dtype=np.int64))
    cfg128k = replace(CLUSTER, profile=PROFILES["8b-h100-128k"])
    agg = simulate(trace, StaticPeak(2), cfg128k, slo_ttft_s=2.0)
    t = replace(TARGETS, min_prefill=1, max_prefill=1, min_decode=1, max_decode=1)
    dis = simulate_disagg(
        trace,
        DisaggConfig(cluster=cfg128k, targets=t),
        slo_ttft_s=2.0,
        slo_itl_s=0.05,
        initial=(1, 1),
    )
    agg_itl = itl_attainment(agg.itl_samples, 0.05)
    dis_itl = itl_attainment(dis.itl_samples, 0.05)
    assert agg_itl is not None and dis_itl is not None
    assert dis_itl > 0.99 > agg_itl
    assert max(d for d, _ in dis.itl_samples) < 0.05


def test_pools_grow_with_load_and_settle() -> None:
    # 60 s quiet, then 4 min at ~48k prompt tokens/s and ~400 running requests
    quiet = poisson_trace(0.5, 60.0, 2000, 100, seed=1)
    busy = poisson_trace(24.0, 240.0, 2000, 400, seed=2)
    arrival = np.concatenate([quiet.arrival_s, busy.arrival_s + 60.0])
    trace = from_arrays(
        "step",
        arrival,
        np.concatenate([quiet.prompt_tokens, busy.prompt_tokens]).tolist(),
        np.concatenate([quiet.output_tokens, busy.output_tokens]).tolist(),
    )
    cfg = DisaggConfig(cluster=CLUSTER, targets=TARGETS)
    res = simulate_disagg(trace, cfg, slo_ttft_s=0.5, slo_itl_s=0.05, initial=(1, 1))
    assert res.timeline_prefill[3] == 1 and res.timeline_decode[3] == 1  # t = 40 s
    assert res.max_prefill >= 4  # 48k / 15k per replica
    assert res.max_decode >= 3  # ~400+ running / 128 per replica
    assert res.dropped == 0


def test_deterministic_under_seed() -> None:
    trace = poisson_trace(6.0, 120.0, 1500, 80, seed=5)
    cfg = DisaggConfig(cluster=CLUSTER, targets=TARGETS)
    a = simulate_disagg(trace, cfg, slo_ttft_s=0.5, slo_itl_s=0.05, seed=7)
    b = simulate_disagg(trace, cfg, slo_ttft_s=0.5, slo_itl_s=0.05, seed=7)
    assert np.array_equal(a.ttft_s, b.ttft_s)
    assert a.gpu_hours == b.gpu_hours
    assert a.timeline_prefill == b.timeline_prefill
    assert a.itl_samples == b.itl_samples


def test_role_targets_from_step_model() -> None:
    trace = poisson_trace(1.0, 60.0, 1000, 200)
    t = role_targets(H100, trace, slo_ttft_s=0.5, slo_itl_s=0.05)
    # one 1000-token prefill step: 6.5 + 29 ms (+ attention) -> ~27.8k tokens/s, x 0.5
    assert 13_000 < t.prompt_tokens_per_s_per_prefill < 14_500
    # ITL bound: (50 - 6.5) / (0.015 + 0.047 * 1.1) ~ 650 > max_num_seqs 256; x 0.75
    assert t.running_per_decode == pytest.approx(192.0)
    long = role_targets(H100, poisson_trace(1.0, 60.0, 6000, 200), slo_ttft_s=2, slo_itl_s=0.05)
    assert long.running_per_decode < 192.0  # bound by ITL at 6k-token contexts


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"bandwidth_bytes_per_s": 0.0}, "kv_transfer.bandwidth_bytes_per_s"),
        ({"bytes_per_token": -1.0}, "kv_transfer.bytes_per_token"),
        ({"fixed_s": -0.1}, "kv_transfer.fixed_s"),
    ],
)
def test_bad_transfer_names_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        KvTransfer(**kwargs)


def test_bad_config_names_the_field() -> None:
    with pytest.raises(ConfigError, match="disagg.poll_interval_s: value 0.5"):
        DisaggConfig(cluster=CLUSTER, targets=TARGETS, poll_interval_s=0.5)
    with pytest.raises(ConfigError, match="role_targets.slo_itl_s"):
        role_targets(H100, poisson_trace(1.0, 10.0, 100, 10), slo_ttft_s=0.5, slo_itl_s=0.005)


# ------------------------------------------------------------------ decode on another GPU type


def _mig_pool() -> ClusterConfig:
    from autoscaler.sim.variants import MIG_2G20GB

    return ClusterConfig(
        profile=MIG_2G20GB, sharing="mig", replicas_per_gpu=3, initial_free_slots=8
    )


def _mean_itl(r: DisaggResult) -> float:
    return sum(d * w for d, w in r.itl_samples) / sum(w for _d, w in r.itl_samples)


def test_decode_on_mig_slices_bills_a_third_of_a_gpu_per_decode_replica() -> None:
    trace = poisson_trace(4.0, 120.0, 1000, 100, seed=3)
    same = run_fixed(trace, 1, 2)
    mig = run_fixed(trace, 1, 2, decode_cluster=_mig_pool())
    assert mig.timeline_decode == same.timeline_decode  # two decode pods either way
    assert mig.gpu_hours_decode == pytest.approx(same.gpu_hours_decode / 3, rel=0.02)
    assert mig.gpu_dollars == pytest.approx(
        mig.gpu_hours_prefill * 4.0 + mig.gpu_hours_decode * 4.0
    )
    assert mig.gpu_dollars < same.gpu_dollars
    # a slice decodes slower (12 ms empty step against 6.5 ms): every token still in SLO
    # at this load, but the mean interval is longer
    assert _mean_itl(mig) > _mean_itl(same)


def test_requests_the_decode_type_cannot_hold_are_rejected_though_prefill_could() -> None:
    # 12k-token prompts fit the 128k H100 prefill pool but not a slice's 8k context
    trace = from_arrays("mixed", [1.0, 2.0, 3.0], [1000, 12_000, 1000], [50, 50, 50])
    h100_128k = replace(CLUSTER, profile=PROFILES["8b-h100-128k"])
    both = run_fixed(trace, 1, 1, cluster=h100_128k, slo_ttft_s=2.0)
    sliced = run_fixed(trace, 1, 1, cluster=h100_128k, decode_cluster=_mig_pool(), slo_ttft_s=2.0)
    assert both.rejected.tolist() == [False, False, False]
    assert sliced.rejected.tolist() == [False, True, False]
    assert sliced.summary()["rejected"] == 1 and sliced.dropped == 0


def test_role_targets_size_decode_from_the_decode_type() -> None:
    from autoscaler.sim.variants import MIG_2G20GB

    trace = poisson_trace(1.0, 60.0, 3000, 300)
    on_h100 = role_targets(H100, trace, slo_ttft_s=0.5, slo_itl_s=0.05)
    on_mig = role_targets(H100, trace, slo_ttft_s=0.5, slo_itl_s=0.05, decode_profile=MIG_2G20GB)
    assert on_mig.prompt_tokens_per_s_per_prefill == on_h100.prompt_tokens_per_s_per_prefill
    assert on_mig.running_per_decode < on_h100.running_per_decode  # less KV, slower steps
    with pytest.raises(ConfigError, match=r"role_targets.slo_itl_s.*mig"):
        role_targets(H100, trace, slo_ttft_s=0.5, slo_itl_s=0.01, decode_profile=MIG_2G20GB)
