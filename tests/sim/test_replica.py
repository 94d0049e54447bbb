"""Replica model: calibration anchors, scheduling semantics, fast path == step path."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from autoscaler.errors import ConfigError
from autoscaler.sim.replica import PROFILES, TTFT_BUCKETS_S, CounterSink, Replica, get_profile

# calibration.md section 1a [M]: decode step (TPOT) at batch <= 10, ~500 ctx tokens.
DECODE_ANCHORS_MS = {"8b-h100": 7.2, "8b-a100": 11.5, "70b-h100-tp4": 17.5}
DECODE_TOLERANCE = 0.10
# calibration.md 1d [M]: TTFT of a 10-prompt, 1,369-token batch (70B: 112-141 ms).
TTFT_ANCHORS_MS = {"8b-h100": 62.0, "8b-a100": 127.0, "70b-h100-tp4": 126.5}
TTFT_TOLERANCE = 0.30  # the model has no API-server/tokenizer overhead (section 6 caveat)


def _itl_mean_s(r: Replica) -> float:
    tokens = sum(n for _, n in r.itl_samples)
    return sum(d * n for d, n in r.itl_samples) / tokens


@pytest.mark.parametrize("name", sorted(DECODE_ANCHORS_MS))
def test_decode_step_reproduces_measured_tpot_at_batch_10(name: str) -> None:
    r = Replica(PROFILES[name])
    for i in range(10):
        r.add_request(i, 500, 100, 0.0)
    r.run_until(60.0)
    assert r.request_success_total == 10
    measured = DECODE_ANCHORS_MS[name] / 1000
    assert _itl_mean_s(r) == pytest.approx(measured, rel=DECODE_TOLERANCE)


@pytest.mark.parametrize("name", sorted(TTFT_ANCHORS_MS))
def test_ttft_of_a_1369_token_batch_is_near_measured(name: str) -> None:
    r = Replica(PROFILES[name])
    for i in range(10):
        r.add_request(i, 137 if i else 136, 10, 0.0)
    r.run_until(10.0)
    ttft_mean_s = r.metrics().ttft_sum_s / 10
    assert ttft_mean_s == pytest.approx(TTFT_ANCHORS_MS[name] / 1000, rel=TTFT_TOLERANCE)


def test_saturated_decode_step_matches_derived_22ms_at_256_sequences() -> None:
    r = Replica(PROFILES["8b-h100"])
    for i in range(300):
        r.add_request(i, 1000, 400, 0.0)
    for _ in range(40):  # admission: ~8 prompts per 8192-token step
        r.step()
    assert r.num_running == 256
    ev = r.step()  # 256 decoders, about 1k context each (1000 prompt + up to 33 generated)
    ctx = 256 * 1017
    expected_ms = 6.5 + 0.015 * 256 + 0.047 * ctx / 1000
    assert ev.duration_s * 1000 == pytest.approx(expected_ms, rel=0.02)
    assert 21.0 < ev.duration_s * 1000 < 24.0  # calibration.md section 6: ~22.4 ms


def test_fast_path_finishes_every_request_at_the_same_time_as_single_steps() -> None:
    prof = replace(PROFILES["8b-a100"], kv_capacity_tokens=20_000)
    arrivals = [(i * 0.037, 300 + (i * 97) % 1700, 5 + (i * 31) % 300) for i in range(120)]

    preemptions: list[int] = []

    def run(fast: bool) -> dict[int, float]:
        r = Replica(prof)
        done: dict[int, float] = {}
        for rid, (t, p, o) in enumerate(arrivals):
            if fast:
                r.run_until(t)
            else:
                while r.clock_s < t and not r.idle:
                    done.update(r.step().finished)
            r.add_request(rid, p, o, t)
        if fast:
            r.run_until(1e6)
        else:
            while not r.idle:
                done.update(r.step().finished)
        done.update(r.drain_events().finished)
        preemptions.append(r.num_preemptions_total)
        return done

    fast, slow = run(True), run(False)
    assert set(fast) == set(slow) == set(range(len(arrivals)))
    assert preemptions[0] == preemptions[1] > 0  # the KV-full path was exercised
    for rid in fast:
        assert fast[rid] == pytest.approx(slow[rid], rel=1e-6, abs=1e-6)


def test_kv_full_preempts_newest_and_still_completes_every_request() -> None:
    prof = replace(PROFILES["8b-h100"], kv_capacity_tokens=8_000)
    r = Replica(prof)
    for i in range(20):
        r.add_request(i, 200, 400, 0.0)
    peak_usage = 0.0
    while not r.idle:
        r.step()
        peak_usage = max(peak_usage, r.kv_usage())
        assert r.kv_usage() <= 1.0
        assert r.load == r.num_waiting + r.num_running  # the router's count survives preemption
    assert r.load == 0
    assert r.num_preemptions_total > 0
    assert r.request_success_total == 20
    assert peak_usage > 0.9


def test_kv_usage_counts_16_token_blocks() -> None:
    r = Replica(PROFILES["8b-h100"])
    r.add_request(0, 17, 100, 0.0)  # 17 prompt tokens -> 2 blocks
    r.step()
    assert r.kv_usage() == pytest.approx(2 / PROFILES["8b-h100"].kv_blocks)


def test_max_num_seqs_caps_running_and_queues_the_rest() -> None:
    prof = replace(PROFILES["8b-h100"], max_num_seqs=8)
    r = Replica(prof)
    for i in range(20):
        r.add_request(i, 100, 50, 0.0)
    r.step()
    assert r.num_running == 8
    assert r.num_waiting == 12


def test_chunked_prefill_spreads_a_long_prompt_over_budget_sized_steps() -> None:
    prof = PROFILES["8b-a100"]  # 2048-token budget
    r = Replica(prof)
    r.add_request(0, 5000, 5, 0.0)
    steps = 0
    first_tokens: list[tuple[int, float]] = []
    while not first_tokens:
        first_tokens = r.step().first_tokens
        steps += 1
    assert steps == 3  # 2048 + 2048 + 904


def test_ttft_histogram_uses_vllm_buckets_and_counts_every_first_token() -> None:
    r = Replica(PROFILES["8b-h100"])
    for i in range(50):
        r.add_request(i, 400, 20, i * 0.01)
        r.run_until(i * 0.01)
    r.run_until(100.0)
    m = r.metrics()
    assert len(m.ttft_bucket_counts) == len(TTFT_BUCKETS_S) + 1
    assert sum(m.ttft_bucket_counts) == 50
    assert m.prompt_tokens_total == 50 * 400
    assert m.generation_tokens_total == 50 * 20
    assert sum(m.itl_bucket_counts) == 50 * 19


def test_request_larger_than_the_kv_cache_is_refused() -> None:
    r = Replica(PROFILES["8b-a100-mig-3g40gb"])
    assert not r.add_request(0, 150_000, 10_000, 0.0)
    assert r.idle


def test_unknown_profile_error_lists_the_choices() -> None:
    with pytest.raises(ConfigError, match="8b-h100"):
        get_profile("h200")


def test_shared_counter_sink_sums_the_replicas_counters() -> None:
    sink = CounterSink()
    reps = [Replica(PROFILES["8b-h100"], sink=sink) for _ in range(2)]
    prof = replace(PROFILES["8b-h100"], kv_capacity_tokens=8_000)
    reps.append(Replica(prof, sink=sink))  # preempts: its counter must reach the sink too
    for k, r in enumerate(reps):
        for i in range(20):
            r.add_request(i, 200 + 50 * k, 400, 0.0)
        r.run_until(120.0)
    ms = [r.metrics() for r in reps]
    assert ms[2].num_preemptions_total > 0
    assert sink.prompt_tokens == sum(m.prompt_tokens_total for m in ms)
    assert sink.generation_tokens == sum(m.generation_tokens_total for m in ms)
    assert sink.preemptions == sum(m.num_preemptions_total for m in ms)
    assert sink.ttft_counts == list(np.sum([m.ttft_bucket_counts for m in ms], axis=0))
    assert sink.itl_counts == list(np.sum([m.itl_bucket_counts for m in ms], axis=0))
