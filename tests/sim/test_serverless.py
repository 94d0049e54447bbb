"""Scale to zero, warm floor and sleepers on low-traffic models (autoscaler.sim.serverless)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoscaler.errors import ConfigError
from autoscaler.sim.cluster import ColdStartModel, Phase
from autoscaler.sim.replica import get_profile
from autoscaler.sim.serverless import (
    ModelResult,
    ServerlessRow,
    SleepModel,
    after_idle_mask,
    many_models,
    simulate_model,
)
from autoscaler.sim.traces import Trace, from_arrays

PROFILE = get_profile("8b-h100")
ZERO = Phase(0, 0)
# deterministic lifecycle: a 60 s cold start, a 2 s wake
COLD_60 = ColdStartModel(
    node_provision=Phase(100, 100),
    image_pull_uncached=ZERO,
    image_pull_cached=ZERO,
    engine_init=Phase(60, 60),
    weights=ZERO,
    compile_cached=ZERO,
    cuda_graphs=ZERO,
    readiness=ZERO,
)
WAKE_2 = SleepModel(Phase(2, 2))


def trace(arrivals: list[float], prompt: int = 100, output: int = 20) -> Trace:
    n = len(arrivals)
    return from_arrays("t", arrivals, [prompt] * n, [output] * n)


def run(row: ServerlessRow, arrivals: list[float], horizon_s: float = 3600.0) -> ModelResult:
    return simulate_model(
        trace(arrivals), row, PROFILE, cold_start=COLD_60, sleep=WAKE_2, horizon_s=horizon_s
    )


def test_a_request_held_at_zero_waits_for_the_cold_start_after_the_poke() -> None:
    res = run(ServerlessRow("zero"), [100.0])
    assert res.held.tolist() == [True]
    assert res.cold_starts == 1
    assert 60.1 <= res.ttft_s[0] < 60.1 + 0.1  # poke + cold start + prefill of 100 tokens


def test_a_sleeper_answers_the_held_request_after_the_wake_not_a_cold_start() -> None:
    res = run(ServerlessRow("sleepers", sleep_budget=1), [100.0])
    assert (res.cold_starts, res.wakes) == (0, 1)
    assert 2.1 <= res.ttft_s[0] < 2.2


def test_the_warm_floor_never_holds_and_bills_its_gpu_for_the_whole_horizon() -> None:
    res = run(ServerlessRow("min-1", min_awake=1), [100.0, 2000.0])
    assert not res.held.any()
    assert res.ttft_s.max() < 0.1
    assert res.awake_gpu_s == pytest.approx(3600.0, abs=1.0)


def test_scale_down_waits_for_the_idle_period_so_a_request_inside_it_is_not_held() -> None:
    row = ServerlessRow("zero", idle_s=300)
    inside = run(row, [100.0, 100.0 + 60 + 250])  # 250 s after the pod turned Ready
    assert inside.held.tolist() == [True, False]
    after = run(row, [100.0, 100.0 + 60 + 400])
    assert after.held.tolist() == [True, True]
    assert after.cold_starts == 2


def test_scale_to_zero_bills_the_cold_start_and_the_cooldown_only() -> None:
    res = run(ServerlessRow("zero", idle_s=300), [100.0])
    # created at 100.1, Ready at 160.1, idle from ~160 for 300 s: ~360 s of GPU
    assert 355.0 <= res.awake_gpu_s <= 365.0
    assert res.asleep_gpu_s == 0.0


def test_a_sleeper_is_billed_its_gpu_share_while_asleep() -> None:
    own = run(ServerlessRow("own", sleep_budget=1), [100.0])
    shared = run(ServerlessRow("shared", sleep_budget=1, sleep_gpu_share=0.25), [100.0])
    assert own.awake_gpu_s == pytest.approx(shared.awake_gpu_s)
    assert own.awake_gpu_s + own.asleep_gpu_s == pytest.approx(3600.0, abs=1.0)
    assert shared.asleep_gpu_s == pytest.approx(own.asleep_gpu_s * 0.25)


def test_a_sleeper_past_its_ttl_is_deleted_and_the_next_request_cold_starts() -> None:
    row = ServerlessRow("ttl", sleep_budget=1, sleep_ttl_s=600)
    res = run(row, [100.0, 100.0 + 2 + 300 + 1000])
    assert (res.wakes, res.cold_starts) == (1, 1)
    assert res.ttft_s[1] > 60.0


def test_a_request_held_past_the_hold_timeout_is_dropped() -> None:
    row = ServerlessRow("zero", new_node=True, hold_timeout_s=120)  # 100 s node + 60 s start
    res = run(row, [100.0])
    assert math.isinf(res.ttft_s[0])


def test_after_idle_marks_the_first_request_and_those_after_a_long_gap() -> None:
    mask = after_idle_mask(np.array([5.0, 10.0, 400.0, 420.0]), 300.0)
    assert mask.tolist() == [True, False, True, False]


def test_many_models_thin_shift_and_repeat_under_a_seed() -> None:
    base = from_arrays("base", [float(i) for i in range(2000)], [10] * 2000, [5] * 2000)
    a = many_models(base, 5, span_s=4000.0, keep=(0.05, 0.2), seed=3)
    b = many_models(base, 5, span_s=4000.0, keep=(0.05, 0.2), seed=3)
    c = many_models(base, 5, span_s=4000.0, keep=(0.05, 0.2), seed=4)
    assert [len(t) for t in a] == [len(t) for t in b]
    assert any(not np.array_equal(x.arrival_s, y.arrival_s) for x, y in zip(a, c, strict=True))
    for t in a:
        assert 0.02 * 2000 <= len(t) <= 0.3 * 2000
        assert float(t.arrival_s.max()) < 4000.0
        assert bool(np.all(np.diff(t.arrival_s) >= 0))


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"sleep_gpu_share": 1.5}, "sleep_gpu_share"),
        ({"min_awake": -1}, "min_awake"),
        ({"sleep_ttl_s": 0.0}, "sleep_ttl_s"),
    ],
)
def test_bad_rows_are_refused_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        ServerlessRow("bad", **kwargs)  # type: ignore[arg-type]
