"""Upstream-exact HPA/KEDA semantics (issue 14), one table row per upstream behaviour.

Each row names the upstream file and test (or function) it follows. Time is an argument
(fake clock); ``follow`` applies each decision before the next tick, ``run`` does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from autoscaler.domain import Decision, DecisionState, Observation, Reason
from autoscaler.errors import ConfigError
from autoscaler.policy.core import decide, initial_state
from autoscaler.policy.schema import validate_policy

WAITING4 = {"metrics": [{"signal": "waiting", "type": "AverageValue", "target": 4}]}
TWO = {
    "metrics": [{"signal": "waiting", "target": 4}, {"signal": "running", "target": 10}],
    "maxReplicaCount": 20,
}
NO_DOWN_WINDOW = {"scaleDown": {"stabilizationWindowSeconds": 0}}


def follow(
    doc: Mapping[str, Any],
    start: int,
    series: Sequence[tuple[float, dict[str, float]]],
    state: DecisionState | None = None,
) -> list[Decision]:
    """Each tick's replica count is the previous decision (advice applied)."""
    policy = validate_policy(doc)
    state = DecisionState() if state is None else state
    cur = start
    out: list[Decision] = []
    for t, signals in series:
        obs = Observation(t=t, current_replicas=cur, ready_replicas=cur, signals=signals)
        decision, state = decide(policy, obs, state, t)
        out.append(decision)
        cur = decision.desired_replicas
    return out


@dataclass(frozen=True)
class Row:
    upstream: str  # file :: test (or function) the row follows
    name: str
    policy: dict[str, Any]
    start: int
    series: list[tuple[float, dict[str, float]]]
    replicas: list[int]
    reasons: dict[int, Reason]


def _missing(n: int) -> list[tuple[float, dict[str, float]]]:
    """n ticks without data, 20 s apart (past the default 15 s rate-policy period)."""
    return [(20.0 * t, {}) for t in range(n)]


ROWS = [
    Row(
        "keda pkg/fallback/fallback_test.go :: 'should bump the number of failures when "
        "metrics call fails' / 'should return a normalised metric when number of failures "
        "are beyond threshold' (fallback.go: NumberOfFailures > FailureThreshold)",
        "fallback_only_after_failures_exceed_threshold",
        {**WAITING4, "fallback": {"failureThreshold": 3, "replicas": 10}, "maxReplicaCount": 20},
        2,
        _missing(5),
        [2, 2, 2, 6, 10],
        {2: Reason.HOLD_MISSING_DATA, 3: Reason.FALLBACK},
    ),
    Row(
        "keda pkg/scaling/scale_handler.go isActiveOrFallback + pkg/scaling/executor/"
        "scale_scaledobjects.go RequestScale (scale from zero when active or in fallback)",
        "fallback_starts_from_zero_then_hpa_takes_it_to_fallback_replicas",
        {
            **WAITING4,
            "minReplicaCount": 0,
            "fallback": {"failureThreshold": 1, "replicas": 5},
        },
        0,
        _missing(4),
        [0, 1, 5, 5],
        {0: Reason.HOLD_MISSING_DATA, 1: Reason.ACTIVATE, 2: Reason.FALLBACK},
    ),
    Row(
        "keda pkg/scaling/executor/scale_scaledobjects.go scaleFromZeroOrIdle "
        "(minReplicaCount > 0 with idleReplicaCount: activation goes to minReplicaCount)",
        "fallback_from_idle_activates_to_min_replica_count",
        {
            **WAITING4,
            "minReplicaCount": 3,
            "idleReplicaCount": 0,
            "fallback": {"failureThreshold": 1, "replicas": 6},
        },
        0,
        _missing(3),
        [0, 3, 6],
        {1: Reason.ACTIVATE, 2: Reason.FALLBACK},
    ),
    Row(
        "keda fallback.go doFallback (a fallback of 0 replicas feeds a zero metric: nothing "
        "to activate for)",
        "fallback_of_zero_replicas_does_not_activate",
        {**WAITING4, "minReplicaCount": 0, "fallback": {"failureThreshold": 1, "replicas": 0}},
        0,
        _missing(3),
        [0, 0, 0],
        {},
    ),
    Row(
        "keda fallback.go doFallback (target x replicas as an AverageValue metric) + "
        "kubernetes replica_calculator.go GetExternalMetricReplicas (tolerance band)",
        "fallback_inside_hpa_tolerance_holds",
        {
            **WAITING4,
            "maxReplicaCount": 20,
            "fallback": {"failureThreshold": 1, "replicas": 10},
            "behavior": NO_DOWN_WINDOW,
        },
        11,
        _missing(3),
        [11, 11, 11],
        {1: Reason.FALLBACK},
    ),
    Row(
        "same as above: outside the tolerance band the fallback applies",
        "fallback_outside_hpa_tolerance_scales",
        {
            **WAITING4,
            "maxReplicaCount": 20,
            "fallback": {"failureThreshold": 1, "replicas": 10},
            "behavior": NO_DOWN_WINDOW,
        },
        12,
        _missing(2),
        [12, 10],
        {1: Reason.FALLBACK},
    ),
    Row(
        "kubernetes horizontal.go computeReplicasForMetrics (the largest metric wins; the "
        "fallback is one metric among them)",
        "fallback_never_lowers_a_larger_metric",
        {**TWO, "fallback": {"failureThreshold": 1, "replicas": 3}, "behavior": NO_DOWN_WINDOW},
        8,
        [(0.0, {"waiting": 32}), (1.0, {"waiting": 32}), (2.0, {"waiting": 32})],
        [8, 8, 8],
        {},
    ),
    Row(
        "kubernetes horizontal.go computeReplicasForMetrics (the fallback wins when larger)",
        "fallback_larger_than_metric_wins",
        {**TWO, "fallback": {"failureThreshold": 1, "replicas": 8}, "behavior": NO_DOWN_WINDOW},
        4,
        [(0.0, {"waiting": 16}), (1.0, {"waiting": 16})],
        [4, 8],
        {1: Reason.FALLBACK},
    ),
    Row(
        "keda pkg/scaling/executor/scale_scaledobjects.go scaleToZero "
        "(lastActiveTime + cooldownPeriod strictly Before(now))",
        "scale_to_zero_strictly_after_cooldown",
        {**WAITING4, "minReplicaCount": 0, "cooldownPeriod": 300},
        1,
        [(0.0, {"waiting": 1}), (300.0, {"waiting": 0}), (300.5, {"waiting": 0})],
        [1, 1, 0],
        {2: Reason.IDLE},
    ),
    Row(
        "kubernetes pkg/apis/autoscaling/validation validateScalingRules (tolerance >= 0 only) "
        "+ replica_calculator.go tolerance: 2.0 down never scales in",
        "tolerance_two_never_scales_down",
        {
            **WAITING4,
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0, "tolerance": 2.0}},
        },
        6,
        [(0.0, {"waiting": 0}), (100.0, {"waiting": 0})],
        [6, 6],
        {0: Reason.WITHIN_TOLERANCE},
    ),
]


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
def test_upstream_table(row: Row) -> None:
    decisions = follow(row.policy, row.start, row.series)
    assert [d.desired_replicas for d in decisions] == row.replicas, [d.message for d in decisions]
    for i, reason in row.reasons.items():
        assert decisions[i].reason == reason, decisions[i].message


def test_tolerance_of_one_or_more_is_accepted_negative_refused() -> None:
    # kubernetes validation: tolerance must be >= 0 (no upper bound).
    validate_policy({**WAITING4, "behavior": {"scaleUp": {"tolerance": 2.0}}})
    with pytest.raises(ConfigError) as err:
        validate_policy({**WAITING4, "behavior": {"scaleUp": {"tolerance": -0.1}}})
    assert "behavior.scaleUp.tolerance" in str(err.value.problems)


# kubernetes pkg/controller/podautoscaler/horizontal.go recordInitialRecommendation
# (kubernetes#68826) :: horizontal_test.go TestRecordInitialRecommendation.
DOWN_300 = {**WAITING4, "maxReplicaCount": 20}


def test_initial_recommendation_holds_first_scale_down_window() -> None:
    state = initial_state(8, 1000.0)
    decisions = follow(DOWN_300, 8, [(t, {"waiting": 4}) for t in (1000.0, 1299.0, 1301.0)], state)
    assert [d.desired_replicas for d in decisions] == [8, 8, 1]
    assert decisions[0].reason == Reason.STABILIZED


def test_without_initial_recommendation_a_fresh_state_scales_down_at_once() -> None:
    # The contrast that makes the test above meaningful.
    decisions = follow(DOWN_300, 8, [(1000.0, {"waiting": 4})])
    assert decisions[0].desired_replicas == 1


def test_restart_mid_window_does_not_scale_down() -> None:
    # High demand at t=0 keeps 8 until t=300. The controller restarts at t=200 (state lost);
    # the seeded state holds 8 for a full window from the restart, as a restarted HPA does.
    policy = validate_policy(DOWN_300)
    state = DecisionState()
    before: list[int] = []
    for t, waiting in ((0.0, 32.0), (100.0, 4.0), (199.0, 4.0)):
        obs = Observation(t=t, current_replicas=8, ready_replicas=8, signals={"waiting": waiting})
        d, state = decide(policy, obs, state, t)
        before.append(d.desired_replicas)
    after = follow(
        DOWN_300,
        8,
        [(t, {"waiting": 4}) for t in (200.0, 301.0, 499.0, 501.0)],
        initial_state(8, 200.0),
    )
    assert before == [8, 8, 8]
    assert [d.desired_replicas for d in after] == [8, 8, 8, 1]


def test_initial_recommendation_also_holds_scale_up_window() -> None:
    # HPA: the initial recommendation is in the scale-up window too (min over the window).
    doc = {**DOWN_300, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 60}}}
    decisions = follow(
        doc, 2, [(t, {"waiting": 40}) for t in (0.0, 59.0, 61.0)], initial_state(2, 0)
    )
    assert [d.desired_replicas for d in decisions] == [2, 2, 6]


def test_initial_state_records_current_count_and_no_scale_event() -> None:
    state = initial_state(5, 42.0)
    assert [(r.t, r.value) for r in state.recommendations] == [(42.0, 5.0)]
    assert state.last_replicas == 5 and state.last_active_t == 42.0 and state.events == ()
