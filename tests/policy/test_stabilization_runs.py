"""The stabilisation history keeps one entry per run of equal recommendations
(`policy.core._with_recommendation`): decisions must be exactly those of keeping every
tick's entry, as HPA does, while a steady target's state stays one entry long."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.domain import Decision, DecisionState, Observation, TimedValue
from autoscaler.policy import core
from autoscaler.policy.core import decide
from autoscaler.policy.schema import Policy, validate_policy


def _every_entry(
    history: tuple[TimedValue, ...], now: float, value: float
) -> tuple[TimedValue, ...]:
    return (*history, TimedValue(now, value))


def _policy(up_s: int, down_s: int) -> Policy:
    return validate_policy(
        {
            "maxReplicaCount": 40,
            "metrics": [{"signal": "waiting", "type": "AverageValue", "target": 1}],
            "behavior": {
                "scaleUp": {"stabilizationWindowSeconds": up_s},
                "scaleDown": {"stabilizationWindowSeconds": down_s},
            },
        }
    )


def _follow(policy: Policy, waiting: list[int], step_s: float) -> list[Decision]:
    state, cur, out = DecisionState(), 2, []
    for i, w in enumerate(waiting):
        t = step_s * i
        obs = Observation(
            t=t, current_replicas=cur, ready_replicas=cur, signals={"waiting": float(w)}
        )
        d, state = decide(policy, obs, state, t)
        out.append(d)
        cur = d.desired_replicas
    return out


@settings(max_examples=60, deadline=None)
@given(
    waiting=st.lists(st.integers(0, 30), min_size=1, max_size=120),
    up_s=st.sampled_from([0, 3, 10, 60]),
    down_s=st.sampled_from([0, 5, 30, 300]),
    step_s=st.sampled_from([1.0, 2.5, 7.0]),
)
def test_run_merged_history_decides_exactly_like_every_entry(
    waiting: list[int], up_s: int, down_s: int, step_s: float
) -> None:
    policy = _policy(up_s, down_s)
    merged = _follow(policy, waiting, step_s)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(core, "_with_recommendation", _every_entry)
        reference = _follow(policy, waiting, step_s)
    assert [(d.desired_replicas, d.reason, d.limits, d.numbers) for d in merged] == [
        (d.desired_replicas, d.reason, d.limits, d.numbers) for d in reference
    ]


def test_steady_target_keeps_one_recommendation_not_one_per_tick() -> None:
    policy = _policy(0, 450)
    state, t = DecisionState(), 0.0
    for i in range(900):
        t = float(i)
        obs = Observation(t=t, current_replicas=4, ready_replicas=4, signals={"waiting": 16.0})
        _, state = decide(policy, obs, state, t)
    # waiting 16 at target 1 per replica asks for 16 every tick: one run, one entry
    assert [(r.t, r.value) for r in state.recommendations] == [(t, 16.0)]


def test_a_higher_recommendation_still_holds_a_scale_down_for_its_window() -> None:
    policy = _policy(0, 30)
    state = DecisionState()
    cur = 8
    desired = []
    for i, w in enumerate([8] + [2] * 40):
        obs = Observation(
            t=float(i), current_replicas=cur, ready_replicas=cur, signals={"waiting": float(w)}
        )
        d, state = decide(policy, obs, state, float(i))
        cur = d.desired_replicas
        desired.append(cur)
    assert desired[0] == 8
    assert desired[29] == 8  # t=29: the 8 made at t=0 is still inside the 30 s window
    assert desired[30] == 2  # t=30: it left (HPA keeps entries strictly younger than the cutoff)
