"""Edges of the decision core that a one-line change would move: exact instants, float
noise, rounding, combined policies, advisory mode (the advice is not applied)."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain import DecisionState, Forecast, Observation, Reason
from autoscaler.policy.core import decide
from autoscaler.policy.schema import TARGET_MIN, VALUE_MAX, validate_policy
from tests.policy.test_core import WAITING4, Tick, follow, run

W1 = {"metrics": [{"signal": "waiting", "type": "AverageValue", "target": 1}]}


def _behavior(
    up: dict[str, Any] | None = None, down: dict[str, Any] | None = None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if up is not None:
        out["scaleUp"] = up
    if down is not None:
        out["scaleDown"] = {"stabilizationWindowSeconds": 0, **down}
    return out


# --- cold-start guard ---------------------------------------------------------------------


def test_cold_start_guard_never_scales_down_while_demand_wants_more() -> None:
    # 10 replicas, none ready yet, demand asks 25: ready + one step (0 + 4) is below the
    # current count; the guard holds 10, it never removes starting replicas.
    d = run({**WAITING4, "maxReplicaCount": 40}, [Tick(0, 10, {"waiting": 100}, ready=0)])[-1]
    assert d.desired_replicas == 10
    assert d.reason == Reason.WAITING_FOR_READY


def test_cold_start_guard_step_uses_the_percent_policy_on_ready_replicas() -> None:
    # ready 6: Pods 4 -> 10, Percent 100 -> 12; Max picks 12 (below HPA's 2 x 8 = 16).
    d = run({**WAITING4, "maxReplicaCount": 40}, [Tick(0, 8, {"waiting": 400}, ready=6)])[-1]
    assert d.desired_replicas == 12 and d.numbers["ready_step_limit"] == 12


def test_cold_start_guard_with_select_policy_min_takes_the_smaller_step() -> None:
    doc = {
        **WAITING4,
        "maxReplicaCount": 40,
        "behavior": {
            "scaleUp": {
                "selectPolicy": "Min",
                "policies": [
                    {"type": "Pods", "value": 4, "periodSeconds": 15},
                    {"type": "Percent", "value": 100, "periodSeconds": 15},
                ],
            }
        },
    }
    d = run(doc, [Tick(0, 8, {"waiting": 400}, ready=6)])[-1]
    assert d.numbers["ready_step_limit"] == 10  # min(6 + 4, 6 + 6)


# --- tolerance ----------------------------------------------------------------------------

SPLIT_TOLERANCE = {
    **W1,
    "maxReplicaCount": 40,
    "behavior": _behavior(up={"tolerance": 0.5}, down={"tolerance": 0.05}),
}


@pytest.mark.parametrize(
    ("waiting", "desired"),
    [(12.0, 10), (16.0, 16), (9.0, 9), (9.6, 10)],
    ids=["up_inside_up_band", "up_outside", "down_outside_down_band", "down_inside"],
)
def test_up_and_down_tolerances_apply_to_their_own_direction(waiting: float, desired: int) -> None:
    # kubernetes replica_calculator.go (1.33 configurable tolerance): scale-up ratios use
    # scaleUp.tolerance, scale-down ratios scaleDown.tolerance.
    d = run(SPLIT_TOLERANCE, [Tick(0, 10, {"waiting": waiting})])[-1]
    assert d.desired_replicas == desired, d.message


def test_ratio_exactly_at_the_tolerance_holds_despite_float_noise() -> None:
    # 11 / 10 = 1.1 in decimal but |1 - 1.1| = 0.10000000000000009 in floats.
    d = run({**W1, "maxReplicaCount": 20}, [Tick(0, 10, {"waiting": 11})])[-1]
    assert d.desired_replicas == 10 and d.reason == Reason.WITHIN_TOLERANCE


def test_float_noise_never_adds_a_replica() -> None:
    # 0.1 + 0.2 over a target of 0.1 is 3.0000000000000004 replicas in floats: 3, not 4.
    doc = {"metrics": [{"signal": "running", "type": "AverageValue", "target": 0.1}]}
    d = run(doc, [Tick(0, 2, {"running": 0.1 + 0.2})])[-1]
    assert d.desired_replicas == 3


def test_value_metric_at_zero_ready_uses_current_count() -> None:
    # Documented difference from HPA (docs/policy.md): no ready pod, no per-replica reading.
    doc = {"metrics": [{"signal": "kv_cache_usage", "type": "Value", "target": 0.5}]}
    d = run(doc, [Tick(0, 4, {"kv_cache_usage": 1.0}, ready=0)])[-1]
    assert d.numbers["demand_replicas"] == 8.0


# --- rate policies --------------------------------------------------------------------------


def test_percent_up_rounds_up_and_down_rounds_down() -> None:
    up = {**W1, "maxReplicaCount": 40, "coldStartGuard": {"enabled": False}}
    up["behavior"] = _behavior(
        up={"policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}
    )
    assert run(up, [Tick(0, 3, {"waiting": 30})])[-1].desired_replicas == 5  # ceil(4.5)
    down = {
        **W1,
        "behavior": _behavior(
            down={"policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}
        ),
    }
    assert run(down, [Tick(0, 3, {"waiting": 0})])[-1].desired_replicas == 1  # floor(1.5)


def test_percent_limits_ignore_float_noise() -> None:
    # 25 x 1.12 = 28.000000000000004 and 10 x 0.2 = 1.9999999999999996 in floats.
    up = {**W1, "maxReplicaCount": 60, "coldStartGuard": {"enabled": False}}
    up["behavior"] = _behavior(
        up={"policies": [{"type": "Percent", "value": 12, "periodSeconds": 15}]}
    )
    assert run(up, [Tick(0, 25, {"waiting": 50})])[-1].desired_replicas == 28
    down = {
        **W1,
        "behavior": _behavior(
            down={"policies": [{"type": "Percent", "value": 80, "periodSeconds": 15}]}
        ),
    }
    assert run(down, [Tick(0, 10, {"waiting": 1})])[-1].desired_replicas == 2


def test_two_scale_up_policies_with_different_periods_combine() -> None:
    # Pods 2 / 10 s and Percent 100 / 60 s, selectPolicy Min: each limit counts its own
    # period's changes. t=0: min(4+2, 8) = 6; t=5: Pods allows 4+2 from the start of its
    # 10 s (4), Percent allows 2 x 4 = 8: 6; t=11: Pods 6+2 = 8, Percent 8: 8; t=21: Pods
    # 10, Percent still 8 (its 60 s started at 4): 8.
    doc = {
        **W1,
        "maxReplicaCount": 40,
        "coldStartGuard": {"enabled": False},
        "behavior": _behavior(
            up={
                "selectPolicy": "Min",
                "policies": [
                    {"type": "Pods", "value": 2, "periodSeconds": 10},
                    {"type": "Percent", "value": 100, "periodSeconds": 60},
                ],
            }
        ),
    }
    series = [(t, {"waiting": 40.0}) for t in (0.0, 5.0, 11.0, 21.0, 61.0)]
    assert [d.desired_replicas for d in follow(doc, 4, series)] == [6, 6, 8, 8, 10]


def test_two_scale_down_policies_with_different_periods_combine() -> None:
    # Pods 1 / 10 s and Percent 50 / 60 s, selectPolicy Max (the biggest change): from 10,
    # Percent allows 5 at once; afterwards Percent's 60 s still counts the 5 removed and
    # Pods allows one per 10 s.
    doc = {
        **W1,
        "behavior": _behavior(
            down={
                "policies": [
                    {"type": "Pods", "value": 1, "periodSeconds": 10},
                    {"type": "Percent", "value": 50, "periodSeconds": 60},
                ]
            }
        ),
    }
    series = [(t, {"waiting": 0.0}) for t in (0.0, 5.0, 11.0, 22.0)]
    assert [d.desired_replicas for d in follow(doc, 10, series)] == [5, 5, 4, 3]


def test_rate_period_boundary_is_exclusive() -> None:
    # HPA getReplicasChangePerPeriod: an event exactly periodSeconds ago no longer counts.
    doc = {**W1, "maxReplicaCount": 40, "coldStartGuard": {"enabled": False}}
    doc["behavior"] = _behavior(
        up={"policies": [{"type": "Pods", "value": 2, "periodSeconds": 10}]}
    )
    decisions = follow(doc, 2, [(t, {"waiting": 40.0}) for t in (0.0, 9.9, 10.0)])
    assert [d.desired_replicas for d in decisions] == [4, 4, 6]


def test_stabilization_window_boundary_is_exclusive() -> None:
    # A recommendation exactly stabilizationWindowSeconds old has left the window.
    doc = {
        **W1,
        "maxReplicaCount": 20,
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 60}},
    }
    decisions = run(
        doc,
        [Tick(0, 8, {"waiting": 8}), Tick(59.9, 8, {"waiting": 2}), Tick(60, 8, {"waiting": 2})],
    )
    assert [d.desired_replicas for d in decisions] == [8, 8, 2]


# --- KEDA activation / idle ---------------------------------------------------------------


def test_activation_from_idle_goes_to_min_replica_count() -> None:
    # KEDA scale_scaledobjects.go scaleFromZeroOrIdle: minReplicaCount when it is above 0.
    doc = {**WAITING4, "minReplicaCount": 3, "idleReplicaCount": 0}
    d = run(doc, [Tick(0, 0, {"waiting": 1})])[-1]
    assert (d.desired_replicas, d.reason) == (3, Reason.ACTIVATE)


def test_activation_never_exceeds_max_replica_count() -> None:
    doc = {**WAITING4, "minReplicaCount": 0, "maxReplicaCount": 1}
    assert run(doc, [Tick(0, 0, {"waiting": 50})])[-1].desired_replicas == 1


def test_inactive_at_idle_stays_idle_and_reports_idle() -> None:
    doc = {**WAITING4, "minReplicaCount": 0}
    d = run(doc, [Tick(0, 0, {"waiting": 0})])[-1]
    assert (d.desired_replicas, d.reason, d.active) == (0, Reason.IDLE, False)


def test_cooldown_counts_from_the_last_active_tick() -> None:
    doc = {**WAITING4, "minReplicaCount": 0, "cooldownPeriod": 100}
    ticks = [
        Tick(0, 2, {"waiting": 5}),
        Tick(50, 2, {"waiting": 5}),  # active again: the cooldown restarts here
        Tick(120, 2, {"waiting": 0}),
        Tick(150.5, 2, {"waiting": 0}),
    ]
    decisions = run(doc, ticks)
    assert decisions[2].desired_replicas >= 1 and Reason.COOLDOWN in decisions[2].limits
    assert decisions[3].desired_replicas == 0
    assert decisions[3].numbers["inactive_for_s"] == pytest.approx(100.5)


# --- panic ---------------------------------------------------------------------------------

PANIC = {
    **W1,
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


def test_panic_starts_exactly_at_the_threshold() -> None:
    # Knative: desiredPanicPodCount / readyPodCount >= panicThreshold.
    d = run(PANIC, [Tick(0, 2, {"waiting": 4})])[-1]
    assert d.panic and d.desired_replicas == 4 and d.reason == Reason.PANIC
    below = run(PANIC, [Tick(0, 2, {"waiting": 3.0})])[-1]  # ceil(3) / 2 = 1.5
    assert not below.panic


def test_panic_ends_exactly_at_the_stable_window() -> None:
    ticks = [Tick(0, 2, {"waiting": 8}), Tick(59.9, 2, {"waiting": 0}), Tick(60, 2, {"waiting": 0})]
    decisions = run(PANIC, ticks)
    assert [d.panic for d in decisions] == [True, True, False]


def test_panic_holds_its_highest_demand_in_advisory_mode() -> None:
    # The advice is never applied (the target stays at 2): during panic the decision still
    # asks for the highest panic demand seen, not for the current count.
    ticks = [Tick(0, 2, {"waiting": 10}), Tick(7, 2, {"waiting": 1}), Tick(20, 2, {"waiting": 1})]
    decisions = run(PANIC, ticks)
    assert [d.desired_replicas for d in decisions] == [10, 10, 10]
    assert all(d.panic for d in decisions)


def test_panic_demand_is_the_window_average_not_its_maximum() -> None:
    # ready 4, threshold 2: demands 2, 2, 12 average 5.33 -> ceil 6 -> 1.5 x ready: no panic
    # (the maximum, 12, would be 3 x ready).
    ticks = [Tick(t, 4, {"waiting": w}) for t, w in ((0, 2), (1, 2), (2, 12))]
    d = run(PANIC, ticks)[-1]
    assert not d.panic
    assert d.numbers["panic_demand_replicas"] == pytest.approx(16 / 3)


def test_panic_window_drops_demand_exactly_window_seconds_old() -> None:
    ticks = [Tick(0, 4, {"waiting": 2}), Tick(6, 4, {"waiting": 4})]
    assert run(PANIC, ticks)[-1].numbers["panic_demand_replicas"] == 4


# --- capacity -----------------------------------------------------------------------------


def test_provisionable_replicas_raise_the_capacity_cap() -> None:
    doc = {**WAITING4, "maxReplicaCount": 20, "capacity": {"provisionableReplicas": 2}}
    d = run(doc, [Tick(0, 2, {"waiting": 40}, capacity=3)])[-1]
    assert d.desired_replicas == 5 and d.reason == Reason.CAPACITY_LIMITED
    assert d.numbers["capacity_max_replicas"] == 5


def test_capacity_cap_off_when_not_enforced() -> None:
    doc = {**WAITING4, "maxReplicaCount": 20, "capacity": {"enforce": False}}
    assert run(doc, [Tick(0, 2, {"waiting": 40}, capacity=3)])[-1].desired_replicas == 6


# --- state ---------------------------------------------------------------------------------


def test_advised_change_is_stamped_when_decided_not_when_observed() -> None:
    # HPA stamps its own rescale at decision time: the Pods 2 / 10 s budget of the change
    # advised at t=0 and seen at t=9 frees at t=10, not t=19.
    doc = {**W1, "maxReplicaCount": 40, "coldStartGuard": {"enabled": False}}
    doc["behavior"] = _behavior(
        up={"policies": [{"type": "Pods", "value": 2, "periodSeconds": 10}]}
    )
    ticks = [
        Tick(0, 2, {"waiting": 40}),
        Tick(9, 4, {"waiting": 40}),
        Tick(10.5, 4, {"waiting": 40}),
    ]
    assert [d.desired_replicas for d in run(doc, ticks)] == [4, 4, 6]


def test_consecutive_failures_count_and_reset() -> None:
    policy = validate_policy(WAITING4)
    state = DecisionState()
    counts = []
    for t, signals in ((0, {}), (1, {}), (2, {"waiting": 4.0}), (3, {})):
        obs = Observation(t=t, current_replicas=2, ready_replicas=2, signals=signals)
        _, state = decide(policy, obs, state, t)
        counts.append(state.consecutive_failures)
    assert counts == [1, 2, 0, 1]


# --- what a decision reports ----------------------------------------------------------------


def test_decision_sentences_name_verb_driver_reason_and_limits() -> None:
    # The message is the user's explanation: each kind of decision, word for word.
    up = run({**WAITING4, "maxReplicaCount": 4}, [Tick(0, 2, {"waiting": 40})])[-1]
    assert up.message == (
        "scale up 2 -> 4; waiting=40 (target 4 per replica) asks for 10; limited by max-replicas"
    )
    kv = {"metrics": [{"signal": "kv_cache_usage", "type": "Value", "target": 0.5}]}
    down = run({**kv, "behavior": _behavior(down={})}, [Tick(0, 4, {"kv_cache_usage": 0.25})])
    assert down[-1].message == (
        "scale down 4 -> 2; kv_cache_usage=0.25 (target 0.5 mean per replica) asks for 2"
    )
    hold = run(WAITING4, [Tick(0, 2, {"waiting": 8})])[-1]
    assert hold.message == "hold at 2; waiting=8 (target 4 per replica) asks for 2"
    fb = {**WAITING4, "fallback": {"failureThreshold": 1, "replicas": 3}}
    fallback = run(fb, [Tick(0, 2, {}), Tick(20, 2, {})])[-1]
    assert fallback.message == (
        "scale up 2 -> 3; no metric could be read; fallback replicas after repeated failed reads"
    )
    zero = {**WAITING4, "minReplicaCount": 0, "cooldownPeriod": 10}
    act = run(zero, [Tick(0, 0, {"waiting": 1})])[-1]
    assert act.message.endswith("; activation threshold crossed")
    idle = run(zero, [Tick(0, 1, {"waiting": 0}), Tick(11, 1, {"waiting": 0})])[-1]
    assert idle.message == (
        "scale down 1 -> 0; waiting=0 (target 4 per replica) asks for 0; "
        "inactive past cooldownPeriod"
    )
    two = {**WAITING4, "maxReplicaCount": 3, "coldStartGuard": {"enabled": False}}
    both = run(two, [Tick(0, 2, {"waiting": 40}, capacity=2)])[-1]
    assert both.message.endswith("limited by max-replicas, capacity-limited")
    fc = {**WAITING4, "prediction": {"enabled": True}, "maxReplicaCount": 20}
    forecast = run(fc, [Tick(0, 2, {"waiting": 8}, forecast={"waiting": 16})])[-1]
    assert "waiting=8 (target 4 per replica) asks for 2, forecast 16 asks for 4" in forecast.message


def test_hold_decision_reports_the_observation() -> None:
    d = run(WAITING4, [Tick(7.5, 3, {})])[-1]
    assert (d.t, d.current_replicas, d.desired_replicas, d.active) == (7.5, 3, 3, False)
    assert [m.signal for m in d.metrics] == ["waiting"] and d.metrics[0].missing
    assert d.numbers == {"tolerated": 0.0, "consecutive_failures": 1.0}
    assert d.message.startswith("holding 3 replicas: no fresh data for waiting (1 consecutive")


def test_steady_decision_reports_only_its_own_numbers() -> None:
    d = run(WAITING4, [Tick(3.0, 2, {"waiting": 8})])[-1]
    assert (d.t, d.current_replicas, d.reason, d.limits) == (3.0, 2, Reason.STEADY, ())
    assert d.numbers == {
        "tolerated": 0.0,
        "consecutive_failures": 0.0,
        "raw_recommendation": 2.0,
        "demand_replicas": 2.0,
        "stabilized_recommendation": 2.0,
    }


def test_zero_demand_is_reported_as_zero_replicas_not_one() -> None:
    d = run(WAITING4, [Tick(0, 2, {"waiting": 0})])[-1]
    assert d.metrics[0].replicas == 0 and d.numbers["raw_recommendation"] == 0


def test_scale_up_numbers_report_both_limits() -> None:
    d = run({**WAITING4, "maxReplicaCount": 40}, [Tick(0, 2, {"waiting": 400})])[-1]
    assert d.numbers["scale_up_limit"] == 6 and d.numbers["ready_step_limit"] == 6
    down = run({**W1, "behavior": _behavior(down={})}, [Tick(0, 4, {"waiting": 1})])[-1]
    assert down.numbers["scale_down_limit"] == 0 and "scale_up_limit" not in down.numbers


def test_reaching_a_bound_exactly_is_not_reported_as_limited() -> None:
    at_max = run({**WAITING4, "maxReplicaCount": 5}, [Tick(0, 4, {"waiting": 20})])[-1]
    assert (at_max.desired_replicas, at_max.limits) == (5, ())
    doc = {**W1, "minReplicaCount": 2, "behavior": _behavior(down={})}
    at_min = run(doc, [Tick(0, 4, {"waiting": 2})])[-1]
    assert (at_min.desired_replicas, at_min.reason, at_min.limits) == (2, Reason.SCALE_DOWN, ())
    cap = run({**WAITING4, "maxReplicaCount": 20}, [Tick(0, 2, {"waiting": 16}, capacity=4)])[-1]
    assert (cap.desired_replicas, cap.reason) == (4, Reason.SCALE_UP)


def test_min_replicas_reported_when_the_rate_floor_is_the_minimum() -> None:
    doc = {
        **W1,
        "minReplicaCount": 2,
        "behavior": _behavior(
            down={"policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}
        ),
    }
    d = run(doc, [Tick(0, 4, {"waiting": 0})])[-1]
    assert d.desired_replicas == 2 and Reason.MIN_REPLICAS in d.limits
    assert Reason.RATE_LIMITED not in d.limits


def test_forecast_equal_to_now_is_a_plain_scale_up() -> None:
    fc = {**WAITING4, "prediction": {"enabled": True}, "maxReplicaCount": 20}
    d = run(fc, [Tick(0, 2, {"waiting": 16}, forecast={"waiting": 16})])[-1]
    assert d.desired_replicas == 4 and d.reason == Reason.SCALE_UP


def test_active_target_above_idle_is_not_cooling_down() -> None:
    d = run({**WAITING4, "minReplicaCount": 0}, [Tick(0, 2, {"waiting": 8})])[-1]
    assert d.limits == () and d.reason == Reason.STEADY


def test_inactive_at_idle_reports_no_cooldown() -> None:
    d = run({**WAITING4, "minReplicaCount": 0}, [Tick(0, 0, {"waiting": 0})])[-1]
    assert d.limits == ()


# --- tolerance and demand at one replica ------------------------------------------------------


def test_one_replica_inside_the_tolerance_band_holds() -> None:
    d = run(WAITING4, [Tick(0, 1, {"waiting": 4.2})])[-1]
    assert (d.desired_replicas, d.reason) == (1, Reason.WITHIN_TOLERANCE)


def test_value_metric_at_zero_replicas_asks_ratio_replicas() -> None:
    doc = {
        "minReplicaCount": 0,
        "metrics": [{"signal": "kv_cache_usage", "type": "Value", "target": 0.5}],
    }
    d = run(doc, [Tick(0, 0, {"kv_cache_usage": 0.5}, ready=0)])[-1]
    assert d.metrics[0].replicas == 1  # no tolerance band at zero replicas
    d = run(doc, [Tick(0, 0, {"kv_cache_usage": 0.9}, ready=0)])[-1]
    assert d.metrics[0].replicas == 2


def test_value_metric_multiplies_by_one_ready_replica() -> None:
    doc = {"metrics": [{"signal": "kv_cache_usage", "type": "Value", "target": 0.5}]}
    d = run(doc, [Tick(0, 4, {"kv_cache_usage": 1.0}, ready=1)])[-1]
    assert d.numbers["demand_replicas"] == 2.0
    d = run(doc, [Tick(0, 1, {"kv_cache_usage": 1.0}, ready=3)])[-1]
    assert d.numbers["demand_replicas"] == 6.0


def test_fallback_inside_a_wide_tolerance_at_one_replica_holds() -> None:
    doc = {
        **WAITING4,
        "fallback": {"failureThreshold": 1, "replicas": 2},
        "behavior": {"scaleUp": {"tolerance": 1.0}},
    }
    d = run(doc, [Tick(0, 1, {}), Tick(20, 1, {})])[-1]
    assert (d.desired_replicas, d.reason) == (1, Reason.FALLBACK)


# --- rate policy arithmetic ------------------------------------------------------------------


def test_percent_policies_divide_by_one_hundred() -> None:
    up = {**W1, "maxReplicaCount": 400, "coldStartGuard": {"enabled": False}}
    assert run(up, [Tick(0, 101, {"waiting": 400})])[-1].desired_replicas == 202
    down = {**W1, "maxReplicaCount": 400}
    down["behavior"] = _behavior(
        down={"policies": [{"type": "Percent", "value": 50, "periodSeconds": 15}]}
    )
    assert run(down, [Tick(0, 101, {"waiting": 0})])[-1].desired_replicas == 50
    d = run({**W1, "maxReplicaCount": 400}, [Tick(0, 150, {"waiting": 400}, ready=101)])[-1]
    assert d.numbers["ready_step_limit"] == 202


def test_pods_scale_down_policy_removes_pods_not_percent() -> None:
    doc = {
        **W1,
        "behavior": _behavior(
            down={"policies": [{"type": "Pods", "value": 3, "periodSeconds": 15}]}
        ),
    }
    assert run(doc, [Tick(0, 10, {"waiting": 0})])[-1].desired_replicas == 7


def test_single_pod_scale_ups_count_in_the_period() -> None:
    doc = {**W1, "maxReplicaCount": 40, "coldStartGuard": {"enabled": False}}
    doc["behavior"] = _behavior(
        up={"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
    )
    decisions = follow(doc, 2, [(t, {"waiting": 40.0}) for t in (0.0, 10.0, 61.0)])
    assert [d.desired_replicas for d in decisions] == [3, 3, 4]


def test_disabled_scale_up_without_the_guard_never_adds_pods() -> None:
    doc = {
        **WAITING4,
        "coldStartGuard": {"enabled": False},
        "behavior": {"scaleUp": {"selectPolicy": "Disabled"}},
    }
    assert run(doc, [Tick(0, 2, {"waiting": 100})])[-1].desired_replicas == 2
    guarded = {**WAITING4, "behavior": {"scaleUp": {"selectPolicy": "Disabled"}}}
    d = run(guarded, [Tick(0, 2, {"waiting": 100})])[-1]
    assert d.desired_replicas == 2 and d.numbers["ready_step_limit"] == 2


def test_scale_up_window_boundary_is_exclusive() -> None:
    doc = {**W1, "maxReplicaCount": 20, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 60}}}
    ticks = [Tick(0, 2, {"waiting": 2}), Tick(59.9, 2, {"waiting": 6}), Tick(60, 2, {"waiting": 6})]
    assert [d.desired_replicas for d in run(doc, ticks)] == [2, 2, 6]


# --- panic, more ----------------------------------------------------------------------------


def test_panic_with_one_ready_replica_divides_by_one() -> None:
    d = run(PANIC, [Tick(0, 1, {"waiting": 2})])[-1]
    assert d.panic


def test_a_later_panic_does_not_inherit_the_previous_panic_floor() -> None:
    ticks = [
        Tick(0, 2, {"waiting": 10}),  # panic: floor 10
        Tick(100, 2, {"waiting": 1}),  # stable window over: panic ends
        Tick(200, 2, {"waiting": 6}),  # a new panic asks 6
    ]
    decisions = run(PANIC, ticks)
    assert [d.panic for d in decisions] == [True, False, True]
    assert decisions[-1].desired_replicas == 6


def test_after_panic_the_scale_up_window_applies_again() -> None:
    ticks = [Tick(0, 2, {"waiting": 8}), Tick(90, 2, {"waiting": 2}), Tick(100, 2, {"waiting": 3})]
    d = run(PANIC, ticks)[-1]
    assert (d.desired_replicas, d.reason, d.panic) == (2, Reason.STABILIZED, False)


# --- more reported details ------------------------------------------------------------------


def test_missing_metrics_are_listed_with_their_spec() -> None:
    d = run(TWO_METRICS, [Tick(0, 3, {})])[-1]
    assert d.message.startswith("holding 3 replicas: no fresh data for waiting, running (1 ")
    assert [(m.signal, m.metric_type, m.target) for m in d.metrics] == [
        ("waiting", "AverageValue", 4),
        ("running", "AverageValue", 10),
    ]
    assert d.numbers == {"tolerated": 0.0, "consecutive_failures": 1.0}


TWO_METRICS = {
    "metrics": [{"signal": "waiting", "target": 4}, {"signal": "running", "target": 10}],
    "maxReplicaCount": 20,
}


def test_a_missing_first_metric_does_not_hide_the_next_one() -> None:
    d = run(TWO_METRICS, [Tick(0, 2, {"running": 60})])[-1]
    assert d.desired_replicas == 6 and d.metrics[1].replicas == 6


def test_partial_data_asking_the_current_count_is_not_limited() -> None:
    d = run(TWO_METRICS, [Tick(0, 2, {"waiting": 8})])[-1]
    assert (d.desired_replicas, d.reason, d.limits) == (2, Reason.STEADY, ())


def test_partial_data_never_idles_an_inactive_target() -> None:
    doc = {**TWO_METRICS, "minReplicaCount": 0, "cooldownPeriod": 10}
    decisions = run(doc, [Tick(t, 2, {"waiting": 0}) for t in (0, 20, 40)])
    assert [d.desired_replicas for d in decisions] == [2, 2, 2]


def test_zero_demand_reports_zero_demand() -> None:
    d = run(WAITING4, [Tick(0, 2, {"waiting": 0})])[-1]
    assert d.numbers["demand_replicas"] == 0


def test_fallback_of_zero_replicas_scales_to_the_minimum() -> None:
    doc = {
        **WAITING4,
        "fallback": {"failureThreshold": 1, "replicas": 0},
        "behavior": _behavior(down={}),
    }
    d = run(doc, [Tick(0, 2, {}), Tick(20, 2, {})])[-1]
    assert (d.desired_replicas, d.reason) == (1, Reason.FALLBACK)


def test_fallback_equal_to_the_other_metric_is_reported_as_fallback() -> None:
    doc = {**TWO_METRICS, "fallback": {"failureThreshold": 1, "replicas": 4}}
    d = run(doc, [Tick(0, 2, {"waiting": 16}), Tick(20, 2, {"waiting": 16})])[-1]
    assert (d.desired_replicas, d.reason) == (4, Reason.FALLBACK)


def test_fallback_of_one_replica_activates_from_zero() -> None:
    doc = {**WAITING4, "minReplicaCount": 0, "fallback": {"failureThreshold": 1, "replicas": 1}}
    d = run(doc, [Tick(0, 0, {}), Tick(20, 0, {})])[-1]
    assert (d.desired_replicas, d.reason) == (1, Reason.ACTIVATE)


def test_at_max_replicas_a_steady_target_is_steady() -> None:
    d = run({**WAITING4, "maxReplicaCount": 4}, [Tick(0, 4, {"waiting": 16})])[-1]
    assert d.reason == Reason.STEADY


def test_panic_at_the_current_count_is_not_a_panic_scale_up() -> None:
    decisions = follow(PANIC, 2, [(0.0, {"waiting": 8.0}), (1.0, {"waiting": 8.0})])
    assert decisions[0].reason == Reason.PANIC and decisions[1].desired_replicas == 8
    assert decisions[1].panic and decisions[1].reason != Reason.PANIC


def test_panic_flag_ends_at_the_stable_window_on_every_path() -> None:
    # Above maxReplicaCount the count snaps before the panic logic runs: the flag still
    # ends exactly when the stable window does.
    ticks = [
        Tick(0, 2, {"waiting": 8}),
        Tick(59.9, 60, {"waiting": 8}),
        Tick(60, 60, {"waiting": 8}),
    ]
    assert [d.panic for d in run(PANIC, ticks)] == [True, True, False]


def test_forecast_numbers_are_reported() -> None:
    fc = {**WAITING4, "prediction": {"enabled": True}, "maxReplicaCount": 20}
    d = run(fc, [Tick(0, 2, {"waiting": 8}, forecast={"waiting": 16})])[-1]
    assert d.numbers["forecast_horizon_s"] == 90.0 and d.numbers["forecast.waiting"] == 16


def test_forecast_no_higher_than_now_is_not_mentioned() -> None:
    fc = {**WAITING4, "prediction": {"enabled": True}, "maxReplicaCount": 20}
    equal = run(fc, [Tick(0, 2, {"waiting": 16}, forecast={"waiting": 16})])[-1]
    lower = run(fc, [Tick(0, 2, {"waiting": 16}, forecast={"waiting": 8})])[-1]
    assert "forecast" not in equal.message and "forecast" not in lower.message
    zero = run({**fc, "minReplicaCount": 0}, [Tick(0, 1, {"waiting": 0}, forecast={"waiting": 4})])
    assert "forecast 4 asks for 1" in zero[-1].message


def test_forecast_at_the_activation_target_does_not_activate() -> None:
    fc = {**WAITING4, "minReplicaCount": 0, "prediction": {"enabled": True}}
    d = run(fc, [Tick(0, 0, {"waiting": 0}, forecast={"waiting": 0})])[-1]
    assert (d.desired_replicas, d.active) == (0, False)


@pytest.mark.parametrize("capacity", [0.0, 0.5, float("inf")])
def test_learned_capacity_must_be_positive_and_finite(capacity: float) -> None:
    doc = {**WAITING4, "maxReplicaCount": 32, "prediction": {"learnedCapacitySignal": "running"}}
    obs = Observation(
        t=0,
        current_replicas=2,
        ready_replicas=2,
        signals={"waiting": 0, "running": 10},
        forecast=Forecast(90.0, {}, capacity_per_replica={"running": capacity}),
    )
    decision, _ = decide(validate_policy(doc), obs, DecisionState(), 0)
    learned = [m for m in decision.metrics if m.learned]
    if capacity == 0.5:  # a fractional capacity is a capacity: 10 / 0.5 = 20 replicas
        assert [(m.metric_type, m.replicas) for m in learned] == [("AverageValue", 20)]
    else:
        assert learned == []


def test_external_change_counts_its_own_size_in_the_rate_budget() -> None:
    # Someone else scaled 2 -> 3: the period started at 2, so Pods 4 allows 6.
    doc = {**WAITING4, "maxReplicaCount": 40, "coldStartGuard": {"enabled": False}}
    ticks = [Tick(0, 2, {"waiting": 8}), Tick(1, 3, {"waiting": 400})]
    assert run(doc, ticks)[-1].desired_replicas == 6


def test_stale_advice_is_never_matched_to_a_later_change() -> None:
    # Advice 2 -> 6 at t=0 is withdrawn at t=1; the 2 -> 6 seen at t=30 is someone else's,
    # stamped at t=30, so at t=31 the 15 s budget still counts it.
    doc = {**WAITING4, "maxReplicaCount": 40, "coldStartGuard": {"enabled": False}}
    ticks = [
        Tick(0, 2, {"waiting": 40}),
        Tick(1, 2, {"waiting": 8}),
        Tick(30, 6, {"waiting": 400}),
        Tick(31, 6, {"waiting": 400}),
    ]
    assert run(doc, ticks)[-1].desired_replicas == 6


def test_decision_state_stays_bounded_over_a_long_run() -> None:
    # Memory per target: recommendations and events older than the longest window or
    # period are dropped (default windows: 300 s; periods: 15 s).
    policy = validate_policy({**W1, "maxReplicaCount": 40})
    state = DecisionState()
    cur = 2
    for i in range(200):
        t = 10.0 * i
        obs = Observation(
            t=t, current_replicas=cur, ready_replicas=cur, signals={"waiting": float(2 + i % 7)}
        )
        d, state = decide(policy, obs, state, t)
        cur = d.desired_replicas
    assert len(state.recommendations) <= 30 and len(state.events) <= 2


def test_down_window_shorter_than_up_window_ends_exactly() -> None:
    doc = {
        **W1,
        "maxReplicaCount": 20,
        "behavior": {
            "scaleUp": {"stabilizationWindowSeconds": 120},
            "scaleDown": {"stabilizationWindowSeconds": 60},
        },
    }
    decisions = run(doc, [Tick(0, 8, {"waiting": 8}), Tick(60, 8, {"waiting": 2})])
    assert decisions[-1].desired_replicas == 2


IDLE2 = {**TWO_METRICS, "minReplicaCount": 3, "idleReplicaCount": 2}


def test_activation_with_partial_data_reports_no_limits() -> None:
    d = run(IDLE2, [Tick(0, 2, {"waiting": 1})])[-1]  # active; running unread
    assert (d.desired_replicas, d.reason, d.limits) == (3, Reason.ACTIVATE, ())


def test_idle_hold_on_partial_data_reports_it() -> None:
    d = run(IDLE2, [Tick(0, 2, {"waiting": 0})])[-1]  # inactive; running unread
    assert (d.desired_replicas, d.reason) == (2, Reason.IDLE)
    assert d.limits == (Reason.HOLD_PARTIAL_DATA,)


@pytest.mark.parametrize("capacity", [TARGET_MIN, VALUE_MAX])
def test_learned_capacity_at_the_policy_bounds_is_learned(capacity: float) -> None:
    # The learned target may be anything a policy could say: the bounds are inclusive.
    doc = {**WAITING4, "maxReplicaCount": 32, "prediction": {"learnedCapacitySignal": "running"}}
    obs = Observation(
        t=0,
        current_replicas=2,
        ready_replicas=2,
        signals={"waiting": 0, "running": 0},
        forecast=Forecast(90.0, {}, capacity_per_replica={"running": capacity}),
    )
    decision, _ = decide(validate_policy(doc), obs, DecisionState(), 0)
    assert [m.target for m in decision.metrics if m.learned] == [capacity]
