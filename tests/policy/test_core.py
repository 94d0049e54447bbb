"""Table-driven tests of the decision core with a fake clock (time is an argument)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from autoscaler.domain import Decision, DecisionState, Forecast, Observation, Reason
from autoscaler.policy.core import decide
from autoscaler.policy.schema import validate_policy


@dataclass
class Tick:
    t: float
    current: int
    signals: Mapping[str, float]
    ready: int | None = None
    pods_read: int | None = None
    capacity: int | None = None
    forecast: Mapping[str, float] | None = None


def run(policy_doc: Mapping[str, Any], ticks: Sequence[Tick]) -> list[Decision]:
    policy = validate_policy(policy_doc)
    state = DecisionState()
    out: list[Decision] = []
    for tick in ticks:
        obs = Observation(
            t=tick.t,
            current_replicas=tick.current,
            ready_replicas=tick.current if tick.ready is None else tick.ready,
            signals=dict(tick.signals),
            pods_read=tick.pods_read,
            capacity_max_replicas=tick.capacity,
            forecast=Forecast(90.0, dict(tick.forecast)) if tick.forecast else None,
        )
        decision, state = decide(policy, obs, state, tick.t)
        out.append(decision)
    return out


def follow(
    policy_doc: Mapping[str, Any], start: int, series: Sequence[tuple[float, dict[str, float]]]
) -> list[Decision]:
    """Like `run`, but each tick's replica count is the previous decision (advice applied)."""
    policy = validate_policy(policy_doc)
    state = DecisionState()
    cur = start
    out: list[Decision] = []
    for t, signals in series:
        obs = Observation(t=t, current_replicas=cur, ready_replicas=cur, signals=signals)
        decision, state = decide(policy, obs, state, t)
        out.append(decision)
        cur = decision.desired_replicas
    return out


WAITING4 = {"metrics": [{"signal": "waiting", "type": "AverageValue", "target": 4}]}
KV = {"metrics": [{"signal": "kv_cache_usage", "type": "Value", "target": 0.8}]}


@dataclass
class Case:
    name: str
    policy: dict[str, Any]
    ticks: list[Tick]
    desired: int
    reason: Reason
    limits: tuple[Reason, ...] = field(default_factory=tuple)


CASES = [
    Case(
        "average_value_divides_total_by_target",
        {**WAITING4, "maxReplicaCount": 20},
        [Tick(0, 4, {"waiting": 30})],
        8,
        Reason.SCALE_UP,
    ),
    Case(
        "value_scales_ready_replicas_by_ratio",
        {**KV, "maxReplicaCount": 20},
        [Tick(0, 4, {"kv_cache_usage": 0.96})],
        5,
        Reason.SCALE_UP,
    ),
    Case(
        "value_uses_ready_not_spec_replicas",
        {**KV, "maxReplicaCount": 20},
        [Tick(0, 6, {"kv_cache_usage": 1.0}, ready=4)],
        5,
        Reason.SCALE_DOWN,
    ),
    Case(
        "within_tolerance_holds",
        WAITING4,
        [Tick(0, 4, {"waiting": 17})],
        4,
        Reason.WITHIN_TOLERANCE,
    ),
    Case(
        "just_outside_tolerance_scales",
        WAITING4,
        [Tick(0, 4, {"waiting": 17.7})],
        5,
        Reason.SCALE_UP,
    ),
    Case(
        "largest_metric_wins",
        {
            "metrics": [{"signal": "waiting", "target": 4}, {"signal": "running", "target": 10}],
            "maxReplicaCount": 50,
        },
        [Tick(0, 2, {"waiting": 4, "running": 70})],
        6,
        Reason.SCALE_UP,
        (Reason.RATE_LIMITED,),
    ),
    Case("all_missing_holds_replicas", WAITING4, [Tick(0, 5, {})], 5, Reason.HOLD_MISSING_DATA),
    Case(
        "missing_metric_never_lets_others_scale_down",
        {"metrics": [{"signal": "waiting", "target": 4}, {"signal": "running", "target": 10}]},
        [Tick(0, 5, {"waiting": 0})],
        5,
        Reason.HOLD_PARTIAL_DATA,
        (Reason.HOLD_PARTIAL_DATA,),
    ),
    Case(
        "missing_metric_still_lets_others_scale_up",
        {"metrics": [{"signal": "waiting", "target": 4}, {"signal": "running", "target": 10}]},
        [Tick(0, 2, {"waiting": 16})],
        4,
        Reason.SCALE_UP,
    ),
    Case(
        "unread_pods_block_scale_down",
        {**WAITING4, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}}},
        [Tick(0, 5, {"waiting": 0}, pods_read=3)],
        5,
        Reason.HOLD_PARTIAL_DATA,
        (Reason.HOLD_PARTIAL_DATA,),
    ),
    Case(
        "capacity_cap_is_reported",
        {**WAITING4, "maxReplicaCount": 20},
        [Tick(0, 2, {"waiting": 40}, capacity=3)],
        3,
        Reason.CAPACITY_LIMITED,
        (Reason.CAPACITY_LIMITED,),
    ),
    Case(
        "capacity_never_removes_running_replicas",
        {**WAITING4, "maxReplicaCount": 20},
        [Tick(0, 6, {"waiting": 40}, capacity=3)],
        6,
        Reason.CAPACITY_LIMITED,
        (Reason.CAPACITY_LIMITED,),
    ),
    Case(
        "above_max_snaps_to_max",
        {**WAITING4, "maxReplicaCount": 3},
        [Tick(0, 6, {"waiting": 40})],
        3,
        Reason.MAX_REPLICAS,
    ),
    Case(
        "below_min_snaps_to_min",
        {**WAITING4, "minReplicaCount": 3},
        [Tick(0, 1, {"waiting": 0})],
        3,
        Reason.MIN_REPLICAS,
    ),
    Case(
        "forecast_larger_wins",
        {**WAITING4, "prediction": {"enabled": True}, "maxReplicaCount": 20},
        [Tick(0, 2, {"waiting": 8}, forecast={"waiting": 40})],
        6,
        Reason.FORECAST,
        (Reason.RATE_LIMITED,),
    ),
    Case(
        "forecast_ignored_without_prediction_block",
        WAITING4,
        [Tick(0, 2, {"waiting": 8}, forecast={"waiting": 24})],
        2,
        Reason.STEADY,
    ),
    Case(
        "forecast_lower_never_scales_down",
        {**WAITING4, "prediction": {"enabled": True}},
        [Tick(0, 4, {"waiting": 16}, forecast={"waiting": 0})],
        4,
        Reason.STEADY,
    ),
    Case(
        "max_replicas_caps_scale_up",
        {**WAITING4, "maxReplicaCount": 5},
        [Tick(0, 4, {"waiting": 100})],
        5,
        Reason.SCALE_UP,
        (Reason.MAX_REPLICAS,),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_decision_table(case: Case) -> None:
    decision = run(case.policy, case.ticks)[-1]
    assert decision.desired_replicas == case.desired, decision.message
    assert decision.reason == case.reason, decision.message
    for limit in case.limits:
        assert limit in decision.limits, decision.limits


def test_scale_up_default_policy_allows_max_of_4_pods_or_100_percent_per_15s() -> None:
    # HPA default scaleUp: max(Pods 4, Percent 100) per 15 s.
    decisions = follow(
        {**WAITING4, "maxReplicaCount": 100}, 1, [(t, {"waiting": 400}) for t in (0, 5, 15, 16, 31)]
    )
    assert [d.desired_replicas for d in decisions] == [5, 5, 10, 10, 20]


def test_hpa_doc_scale_down_percent_or_pods_per_minute() -> None:
    # Kubernetes HPA docs: scaleDown policies Pods 4/60s and Percent 10/60s (selectPolicy Max):
    # from 80 replicas the first step removes 8, the next (72) removes 8 again (72*0.9=64.8 -> 64).
    policy = {
        **WAITING4,
        "maxReplicaCount": 100,
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [
                    {"type": "Pods", "value": 4, "periodSeconds": 60},
                    {"type": "Percent", "value": 10, "periodSeconds": 60},
                ],
            }
        },
    }
    decisions = follow(policy, 80, [(t, {"waiting": 40}) for t in (0, 30, 61, 122)])
    assert [d.desired_replicas for d in decisions] == [72, 72, 64, 57]
    assert decisions[1].reason == Reason.RATE_LIMITED


def test_hpa_doc_select_policy_min_picks_smallest_change() -> None:
    policy = {
        **WAITING4,
        "maxReplicaCount": 100,
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "selectPolicy": "Min",
                "policies": [
                    {"type": "Pods", "value": 4, "periodSeconds": 60},
                    {"type": "Percent", "value": 10, "periodSeconds": 60},
                ],
            }
        },
    }
    assert follow(policy, 80, [(0, {"waiting": 40})])[0].desired_replicas == 76


def test_hpa_doc_disabled_scale_down_never_removes_pods() -> None:
    policy = {**WAITING4, "behavior": {"scaleDown": {"selectPolicy": "Disabled"}}}
    decisions = follow(policy, 8, [(t, {"waiting": 0}) for t in range(0, 1000, 50)])
    assert all(d.desired_replicas == 8 for d in decisions)


def test_hpa_doc_one_pod_per_ten_minutes() -> None:
    policy = {
        **WAITING4,
        "behavior": {
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}],
            }
        },
    }
    decisions = follow(policy, 5, [(t, {"waiting": 0}) for t in range(0, 1300, 100)])
    assert [d.desired_replicas for d in decisions] == [4, 4, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 2]


def test_scale_down_stabilization_uses_max_over_window() -> None:
    # Default scaleDown stabilization: 300 s of recommendations, the highest wins.
    series = [
        (0.0, {"waiting": 32}),
        (100.0, {"waiting": 4}),
        (200.0, {"waiting": 4}),
        (301.0, {"waiting": 4}),
    ]
    decisions = follow({**WAITING4, "maxReplicaCount": 20}, 8, series)
    assert [d.desired_replicas for d in decisions] == [8, 8, 8, 1]
    assert decisions[1].reason == Reason.STABILIZED


def test_scale_up_stabilization_uses_min_over_window() -> None:
    policy = {
        **WAITING4,
        "maxReplicaCount": 20,
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": 60}},
    }
    series = [
        (0.0, {"waiting": 4}),
        (10.0, {"waiting": 40}),
        (30.0, {"waiting": 40}),
        (71.0, {"waiting": 40}),
    ]
    decisions = follow(policy, 1, series)
    assert [d.desired_replicas for d in decisions] == [1, 1, 1, 5]


def test_disabled_scale_up_never_adds_pods() -> None:
    policy = {**WAITING4, "behavior": {"scaleUp": {"selectPolicy": "Disabled"}}}
    assert follow(policy, 2, [(0, {"waiting": 100})])[0].desired_replicas == 2


def test_activation_is_strictly_greater_than_activation_target() -> None:
    policy = {
        "minReplicaCount": 0,
        "metrics": [{"signal": "waiting", "target": 4, "activationTarget": 2}],
    }
    at = run(policy, [Tick(0, 0, {"waiting": 2})])[-1]
    above = run(policy, [Tick(0, 0, {"waiting": 2.5})])[-1]
    assert (at.desired_replicas, at.reason, at.active) == (0, Reason.IDLE, False)
    assert (above.desired_replicas, above.reason, above.active) == (1, Reason.ACTIVATE, True)


def test_activation_from_zero_goes_to_min_replicas() -> None:
    policy = {
        "minReplicaCount": 0,
        "idleReplicaCount": None,
        "metrics": [{"signal": "waiting", "target": 4}],
    }
    assert run(policy, [Tick(0, 0, {"waiting": 50})])[-1].desired_replicas == 1


def test_scale_to_zero_waits_for_cooldown_period() -> None:
    policy = {
        "minReplicaCount": 0,
        "cooldownPeriod": 300,
        "metrics": [{"signal": "waiting", "target": 4}],
    }
    ticks = [
        Tick(0, 2, {"waiting": 5}),
        Tick(10, 2, {"waiting": 0}),
        Tick(299, 2, {"waiting": 0}),
        Tick(301, 2, {"waiting": 0}),
    ]
    decisions = run(policy, ticks)
    assert [d.desired_replicas for d in decisions][2:] == [2, 0]
    assert Reason.COOLDOWN in decisions[2].limits
    assert decisions[3].reason == Reason.IDLE


def test_idle_replica_count_is_used_when_inactive() -> None:
    policy = {
        "minReplicaCount": 2,
        "idleReplicaCount": 1,
        "cooldownPeriod": 60,
        "metrics": [{"signal": "waiting", "target": 4}],
    }
    decisions = run(policy, [Tick(0, 3, {"waiting": 0}), Tick(61, 3, {"waiting": 0})])
    assert decisions[-1].desired_replicas == 1
    assert decisions[-1].reason == Reason.IDLE


def test_missing_data_never_scales_to_zero() -> None:
    policy = {
        "minReplicaCount": 0,
        "cooldownPeriod": 10,
        "metrics": [{"signal": "waiting", "target": 4}],
    }
    decisions = run(policy, [Tick(t, 3, {}) for t in range(0, 100, 10)])
    assert all(d.desired_replicas == 3 for d in decisions)
    assert all(d.reason == Reason.HOLD_MISSING_DATA for d in decisions)


def test_fallback_after_failure_threshold() -> None:
    policy = {
        **WAITING4,
        "fallback": {"failureThreshold": 3, "replicas": 10},
        "maxReplicaCount": 20,
    }
    # KEDA pkg/fallback: failures strictly greater than the threshold (see test_upstream.py)
    decisions = run(policy, [Tick(t, 2, {}) for t in range(5)])
    assert [d.desired_replicas for d in decisions] == [2, 2, 2, 6, 6]
    assert decisions[3].reason == Reason.FALLBACK
    assert Reason.RATE_LIMITED in decisions[3].limits


def test_fallback_counter_resets_after_a_good_read() -> None:
    policy = {**WAITING4, "fallback": {"failureThreshold": 2, "replicas": 6}}
    ticks = [Tick(0, 2, {}), Tick(1, 2, {"waiting": 8}), Tick(2, 2, {})]
    assert [d.reason for d in run(policy, ticks)] == [
        Reason.HOLD_MISSING_DATA,
        Reason.STEADY,
        Reason.HOLD_MISSING_DATA,
    ]


def test_panic_skips_scale_up_window_and_blocks_scale_down() -> None:
    policy = {
        **WAITING4,
        "maxReplicaCount": 50,
        "panic": {"windowSeconds": 6, "threshold": 2.0, "stableWindowSeconds": 60},
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 30,
                "policies": [{"type": "Percent", "value": 1000, "periodSeconds": 1}],
            },
            "scaleDown": {"stabilizationWindowSeconds": 0},
        },
    }
    series = [
        (0.0, {"waiting": 4}),
        (1.0, {"waiting": 40}),
        (2.0, {"waiting": 40}),
        (20.0, {"waiting": 0}),
        (59.0, {"waiting": 0}),
        (80.0, {"waiting": 0}),
    ]
    decisions = follow(policy, 2, series)
    assert decisions[1].reason == Reason.PANIC and decisions[1].desired_replicas >= 6
    assert decisions[3].desired_replicas == decisions[2].desired_replicas  # no scale-down in panic
    assert decisions[3].panic
    assert decisions[-1].desired_replicas == 1 and not decisions[-1].panic


def test_without_panic_scale_up_window_delays() -> None:
    policy = {
        **WAITING4,
        "maxReplicaCount": 50,
        "behavior": {"scaleUp": {"stabilizationWindowSeconds": 30}},
    }
    decisions = follow(policy, 2, [(0.0, {"waiting": 8}), (1.0, {"waiting": 40})])
    assert decisions[1].desired_replicas == 2
    assert decisions[1].reason == Reason.STABILIZED


def test_unapplied_advice_does_not_consume_rate_budget() -> None:
    # The target stays at 2 (advisory mode): the next tick may still ask for the full step.
    ticks = [Tick(0, 2, {"waiting": 400}), Tick(1, 2, {"waiting": 400})]
    decisions = run({**WAITING4, "maxReplicaCount": 100}, ticks)
    assert [d.desired_replicas for d in decisions] == [6, 6]


def test_external_changes_count_in_rate_history() -> None:
    # Someone else scaled 2 -> 6 at t=1: within 15 s only max(+4, +100%) from 2 is allowed.
    ticks = [Tick(0, 2, {"waiting": 8}), Tick(1, 6, {"waiting": 400})]
    assert run({**WAITING4, "maxReplicaCount": 100}, ticks)[-1].desired_replicas == 6


def test_decision_explains_itself() -> None:
    d = run({**WAITING4, "maxReplicaCount": 20}, [Tick(0, 2, {"waiting": 30})])[-1]
    assert "waiting=30" in d.message and "2 -> " in d.message
    assert d.numbers["raw_recommendation"] == 8
    assert d.metrics[0].replicas == 8
    assert d.to_dict()["reason"] == "scale-up"


def test_core_is_deterministic_and_does_not_mutate_state() -> None:
    policy = validate_policy(WAITING4)
    state = DecisionState()
    obs = Observation(t=0, current_replicas=2, ready_replicas=2, signals={"waiting": 30})
    a, s1 = decide(policy, obs, state, 0)
    b, s2 = decide(policy, obs, state, 0)
    assert a == b and s1 == s2 and state == DecisionState()


def test_cold_start_guard_allows_one_step_beyond_ready_replicas() -> None:
    # 5 replicas ordered, 1 ready, the queue still grows: HPA's Percent 100 would allow 10.
    ticks = [Tick(0, 1, {"waiting": 40}), Tick(16, 5, {"waiting": 400}, ready=1)]
    decisions = run({**WAITING4, "maxReplicaCount": 64}, ticks)
    assert decisions[-1].desired_replicas == 5  # ready 1 + Pods 4
    assert decisions[-1].reason == Reason.WAITING_FOR_READY
    assert decisions[-1].numbers["ready_step_limit"] == 5


def test_cold_start_guard_off_reproduces_hpa_compounding() -> None:
    policy = {**WAITING4, "maxReplicaCount": 64, "coldStartGuard": {"enabled": False}}
    ticks = [Tick(0, 1, {"waiting": 40}), Tick(16, 5, {"waiting": 400}, ready=1)]
    assert run(policy, ticks)[-1].desired_replicas == 10


def test_cold_start_guard_releases_as_replicas_become_ready() -> None:
    ticks = [Tick(0, 1, {"waiting": 40}), Tick(16, 5, {"waiting": 400}, ready=5)]
    assert run({**WAITING4, "maxReplicaCount": 64}, ticks)[-1].desired_replicas == 10


def test_cold_start_guard_never_blocks_the_first_step_from_zero_ready() -> None:
    # All replicas still starting: one Pods step (4) beyond 0 ready, never below current.
    ticks = [Tick(0, 2, {"waiting": 100}, ready=0)]
    assert run({**WAITING4, "maxReplicaCount": 64}, ticks)[-1].desired_replicas == 4


LEARNED = {
    **WAITING4,
    "maxReplicaCount": 32,
    "prediction": {"learnedCapacitySignal": "prompt_tokens_per_s"},
}


def learned_obs(
    current: int, signals: dict[str, float], capacity: dict[str, float], forecast: float
) -> Observation:
    return Observation(
        t=0,
        current_replicas=current,
        ready_replicas=current,
        signals=signals,
        forecast=Forecast(90.0, {"prompt_tokens_per_s": forecast}, capacity_per_replica=capacity),
    )


def test_learned_capacity_adds_replicas_the_configured_metrics_do_not_see() -> None:
    # The queue is empty (waiting asks for 1), but 30k prompt tokens/s on replicas that
    # sustain 10k each at the SLO needs 3; the forecast (36k) asks for 4.
    obs = learned_obs(
        2, {"waiting": 0, "prompt_tokens_per_s": 30_000}, {"prompt_tokens_per_s": 10_000}, 36_000
    )
    decision, _ = decide(validate_policy(LEARNED), obs, DecisionState(), 0)
    assert decision.desired_replicas == 4
    assert decision.reason == Reason.FORECAST
    learned = [m for m in decision.metrics if m.learned]
    assert [(m.signal, m.target, m.replicas, m.forecast_replicas) for m in learned] == [
        ("prompt_tokens_per_s", 10_000, 3, 4)
    ]
    assert decision.numbers["capacity.prompt_tokens_per_s.per_replica"] == 10_000
    assert decision.to_dict()["metrics"][-1]["learned"] is True


def test_learned_capacity_headroom_lowers_the_target() -> None:
    doc = {**LEARNED, "prediction": {**LEARNED["prediction"], "learnedCapacityHeadroom": 0.5}}
    obs = learned_obs(
        2, {"waiting": 0, "prompt_tokens_per_s": 30_000}, {"prompt_tokens_per_s": 10_000}, 0
    )
    decision, _ = decide(validate_policy(doc), obs, DecisionState(), 0)
    assert decision.desired_replicas == 6  # ceil(30k / 5k); 10k per replica would ask 3
    assert [m.target for m in decision.metrics if m.learned] == [5_000]


def test_capacity_not_yet_learned_is_no_metric_and_not_missing() -> None:
    obs = learned_obs(4, {"waiting": 0, "prompt_tokens_per_s": 30_000}, {}, 36_000)
    decision, state = decide(validate_policy(LEARNED), obs, DecisionState(), 0)
    assert [m.signal for m in decision.metrics] == ["waiting"]
    assert state.consecutive_failures == 0  # nothing missing: the configured metric read


def test_learned_capacity_without_its_reading_is_skipped_not_zero() -> None:
    # capacity learned but this tick's rate is missing: no recommendation from it, and
    # the configured metric still decides (no scale-down to 0-based demand)
    obs = learned_obs(3, {"waiting": 12}, {"prompt_tokens_per_s": 10_000}, 36_000)
    decision, _ = decide(validate_policy(LEARNED), obs, DecisionState(), 0)
    assert not any(m.learned for m in decision.metrics)
    assert decision.desired_replicas == 3
    nan = learned_obs(
        3, {"waiting": 12, "prompt_tokens_per_s": math.nan}, {"prompt_tokens_per_s": 10_000}, 0
    )
    decision, state = decide(validate_policy(LEARNED), nan, DecisionState(), 0)
    assert [m.signal for m in decision.metrics] == ["waiting"]
    assert state.consecutive_failures == 0


def test_prediction_disabled_ignores_forecast_and_learned_capacity() -> None:
    doc = {**LEARNED, "prediction": {**LEARNED["prediction"], "enabled": False}}
    obs = learned_obs(
        2, {"waiting": 8, "prompt_tokens_per_s": 30_000}, {"prompt_tokens_per_s": 10_000}, 36_000
    )
    decision, _ = decide(validate_policy(doc), obs, DecisionState(), 0)
    assert decision.desired_replicas == 2
    assert not any(m.learned for m in decision.metrics)
    assert "forecast_horizon_s" not in decision.numbers


def _regime_run(regime: Mapping[str, float], prediction: bool) -> list[int]:
    """8 replicas asked for at t=0, 1 afterwards; the forecast carries ``regime``."""
    policy = validate_policy(
        {**WAITING4, "maxReplicaCount": 20, **({"prediction": {}} if prediction else {})}
    )
    state = DecisionState()
    cur, out = 8, []
    for t, waiting in ((0.0, 32.0), (100.0, 4.0), (301.0, 4.0), (1000.0, 4.0)):
        forecast = Forecast(90.0, {}, regime=regime)
        obs = Observation(t, cur, cur, {"waiting": waiting}, forecast=forecast)
        decision, state = decide(policy, obs, state, t)
        cur = decision.desired_replicas
        out.append(cur)
    return out


def test_a_steady_regime_holds_for_its_longer_scale_down_window_and_reports_it() -> None:
    steady = {"regime.steady": 1.0, "regime.scale_down_window_s": 1200.0}
    assert _regime_run({}, prediction=True) == [8, 8, 1, 1]  # the policy's 300 s
    assert _regime_run(steady, prediction=True) == [8, 8, 8, 8]  # held 1200 s
    # without prediction the learned regime is not used (nothing learned it)
    assert _regime_run(steady, prediction=False) == [8, 8, 1, 1]
    # a regime never shortens the policy's own window
    short = {"regime.steady": 1.0, "regime.scale_down_window_s": 60.0}
    assert _regime_run(short, prediction=True) == [8, 8, 1, 1]
    policy = validate_policy({**WAITING4, "prediction": {}})
    obs = Observation(0.0, 2, 2, {"waiting": 4.0}, forecast=Forecast(90.0, {}, regime=steady))
    decision, _ = decide(policy, obs, DecisionState(), 0.0)
    assert decision.numbers["regime.steady"] == 1.0


def test_a_release_window_from_long_bursts_shortens_the_scale_down_window() -> None:
    release = {"regime.steady": 0.0, "regime.release_window_s": 60.0}
    assert _regime_run(release, prediction=True) == [8, 1, 1, 1]  # released after 60 s
    assert _regime_run(release, prediction=False) == [8, 8, 1, 1]
    # a release longer than the policy's own 300 s window does not lengthen it
    assert _regime_run({"regime.release_window_s": 600.0}, prediction=True) == [8, 8, 1, 1]


def _fleet_run(regime: Mapping[str, float], prediction: bool = True) -> list[int]:
    """From 2 replicas: quiet, a burst asking for 9, quiet again (300 s apart, so the
    policy's scale-down window has passed by the last tick); the forecast carries
    ``regime``."""
    policy = validate_policy(
        {**WAITING4, "maxReplicaCount": 20, **({"prediction": {}} if prediction else {})}
    )
    state = DecisionState()
    cur, out = 2, []
    for t, waiting in ((0.0, 4.0), (400.0, 36.0), (800.0, 4.0), (1200.0, 4.0)):
        obs = Observation(
            t, cur, cur, {"waiting": waiting}, forecast=Forecast(90.0, {}, regime=regime)
        )
        decision, state = decide(policy, obs, state, t)
        cur = decision.desired_replicas
        out.append(cur)
    return out


def test_the_fleet_regime_holds_the_learned_fleet_and_buys_nothing_for_a_burst() -> None:
    fleet = {"regime.fleet": 1.0, "regime.fleet_replicas": 4.0}
    assert _fleet_run({}) == [1, 5, 1, 1]  # the policy alone chases the burst (rate-limited)
    # up to the fleet at once, no replica for the burst, never under the fleet
    assert _fleet_run(fleet) == [4, 4, 4, 4]
    # without prediction nothing learned it: ignored
    assert _fleet_run(fleet, prediction=False) == [1, 5, 1, 1]
    # a fleet above maxReplicaCount is held at the bound
    policy = validate_policy({**WAITING4, "maxReplicaCount": 3, "prediction": {}})
    big = {"regime.fleet": 1.0, "regime.fleet_replicas": 12.0}
    obs = Observation(0.0, 2, 2, {"waiting": 4.0}, forecast=Forecast(90.0, {}, regime=big))
    decision, _ = decide(policy, obs, DecisionState(), 0.0)
    assert decision.desired_replicas == 3
    assert decision.numbers["regime.fleet_replicas"] == 12.0


def test_above_the_fleet_the_count_still_comes_down_to_it() -> None:
    policy = validate_policy({**WAITING4, "maxReplicaCount": 20, "prediction": {}})
    fleet = {"regime.fleet": 1.0, "regime.fleet_replicas": 3.0}
    state, cur = DecisionState(), 8
    for t in (0.0, 400.0):  # 8 replicas from before the regime, the load asks for 1
        obs = Observation(t, cur, cur, {"waiting": 4.0}, forecast=Forecast(90.0, {}, regime=fleet))
        decision, state = decide(policy, obs, state, t)
        cur = decision.desired_replicas
    assert cur == 3
