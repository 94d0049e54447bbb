"""Scale to zero in the decision core (fake clock: time is an argument): the first
scale-up is sized for the requests held at the activators, and a target goes to zero
only after its idle period, never while a replica starts, a request is held or a
response still streams."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.domain import DecisionState, Observation, Reason
from autoscaler.errors import ConfigError
from autoscaler.policy.core import decide
from autoscaler.policy.schema import load_policy, validate_policy

WAITING4: dict[str, Any] = {
    "minReplicaCount": 0,
    "maxReplicaCount": 16,
    "metrics": [{"signal": "waiting", "target": 4}],
}


def _obs(t: float, cur: int, held: int = 0, **kw: Any) -> Observation:
    ready = kw.pop("ready", cur)
    signals = kw.pop("signals", {"waiting": float(held)} if cur == 0 else {"waiting": 0.0})
    return Observation(
        t=t, current_replicas=cur, ready_replicas=ready, signals=signals, held=held, **kw
    )


def test_first_scale_up_from_zero_is_sized_for_the_held_queue() -> None:
    policy = validate_policy(WAITING4)
    d, _ = decide(policy, _obs(0, 0, held=10), DecisionState(), 0)
    assert (d.desired_replicas, d.reason) == (3, Reason.ACTIVATE)  # ceil(10 / 4)
    assert d.numbers["held_ask_replicas"] == 3
    assert "scaled from zero for 10 held requests" in d.message


def test_one_held_request_activates_one_replica() -> None:
    d, _ = decide(validate_policy(WAITING4), _obs(0, 0, held=1), DecisionState(), 0)
    assert d.desired_replicas == 1


def test_held_queue_size_is_bounded_by_the_cold_start_guard_and_max() -> None:
    # default scale-up policies: one step beyond 0 ready is 4 pods
    d, _ = decide(validate_policy(WAITING4), _obs(0, 0, held=1000), DecisionState(), 0)
    assert d.desired_replicas == 4
    assert Reason.WAITING_FOR_READY in d.limits
    unguarded = validate_policy(
        {**WAITING4, "maxReplicaCount": 6, "coldStartGuard": {"enabled": False}}
    )
    d, _ = decide(unguarded, _obs(0, 0, held=1000), DecisionState(), 0)
    assert d.desired_replicas == 6


def test_held_queue_uses_the_policys_per_replica_waiting_target() -> None:
    policy = validate_policy({**WAITING4, "metrics": [{"signal": "waiting", "target": 2}]})
    d, _ = decide(policy, _obs(0, 0, held=7), DecisionState(), 0)
    assert d.desired_replicas == 4  # ceil(7 / 2)


def test_a_held_request_activates_a_policy_without_a_waiting_metric() -> None:
    policy = validate_policy(
        {"minReplicaCount": 0, "metrics": [{"signal": "running", "target": 32}]}
    )
    d, _ = decide(policy, _obs(0, 0, held=3, signals={}), DecisionState(), 0)
    assert (d.desired_replicas, d.reason, d.active) == (1, Reason.ACTIVATE, True)


def test_scale_to_zero_enabled_idles_to_zero_after_its_idle_period_not_cooldown() -> None:
    policy = validate_policy(
        {
            "minReplicaCount": 2,
            "cooldownPeriod": 300,
            "scaleToZero": {"enabled": True, "idlePeriodSeconds": 60},
            "metrics": [{"signal": "waiting", "target": 4}],
        }
    )
    state = DecisionState()
    d, state = decide(policy, _obs(0, 2, signals={"waiting": 5.0}), state, 0)
    d, state = decide(policy, _obs(59, 2), state, 59)
    assert d.desired_replicas == 2 and Reason.COOLDOWN in d.limits
    d, state = decide(policy, _obs(61, 2), state, 61)
    assert (d.desired_replicas, d.reason) == (0, Reason.IDLE)
    # active again: back to minReplicaCount (KEDA's idleReplicaCount 0 semantics)
    d, state = decide(policy, _obs(70, 0, held=1), state, 70)
    assert (d.desired_replicas, d.reason) == (2, Reason.ACTIVATE)


@pytest.mark.parametrize(
    ("what", "kw"),
    [
        ("a replica still starting", {"ready": 1}),
        ("a pending replica", {"pending_replicas": 1}),
        ("a response still streaming", {"in_flight": 1}),
        ("a held request", {"held": 1}),
    ],
)
def test_never_goes_to_zero_while(what: str, kw: dict[str, Any]) -> None:
    policy = validate_policy({**WAITING4, "cooldownPeriod": 30})
    state = DecisionState()
    _, state = decide(policy, _obs(0, 2, signals={"waiting": 5.0}), state, 0)
    held = kw.pop("held", 0)
    d, state = decide(
        policy, _obs(100, 2, held=held, signals={"waiting": float(held)}, **kw), state, 100
    )
    assert d.desired_replicas > 0, what
    # and once it is gone, the idle period counts again from the last activity
    d, _ = decide(policy, _obs(101, 2), state, 101)
    expect = 0 if not (held or kw.get("in_flight")) else 2
    assert d.desired_replicas == expect, what


def test_a_held_request_restarts_the_idle_period() -> None:
    policy = validate_policy({**WAITING4, "cooldownPeriod": 30})
    state = DecisionState()
    _, state = decide(policy, _obs(0, 1), state, 0)
    _, state = decide(policy, _obs(25, 1, held=1, signals={"waiting": 1.0}), state, 25)
    d, state = decide(policy, _obs(40, 1), state, 40)
    assert d.desired_replicas == 1  # 15 s since the held request, not 40
    d, _ = decide(policy, _obs(56, 1), state, 56)
    assert d.desired_replicas == 0


def test_scale_to_zero_fields_are_validated_with_field_value_and_rule() -> None:
    with pytest.raises(ConfigError) as err:
        load_policy({"minReplicaCount": 1, "scaleToZero": {"holdCap": 50}})
    assert any(
        "scaleToZero.holdCap: value 50" in p and "may go to zero" in p for p in err.value.problems
    )
    with pytest.raises(ConfigError) as err:
        load_policy({"scaleToZero": {"enabled": True}, "minReplicaCount": 3, "idleReplicaCount": 1})
    assert any(
        "scaleToZero.enabled: value true conflicts with idleReplicaCount (1)" in p
        for p in err.value.problems
    )
    with pytest.raises(ConfigError) as err:
        load_policy({"scaleToZero": {"enabled": True, "holdCap": 0}})
    assert any("scaleToZero.holdCap" in p and "value 0" in p for p in err.value.problems)
    ok = load_policy({"scaleToZero": {"enabled": True, "idlePeriodSeconds": 120, "holdCap": 50}})
    assert ok.may_go_to_zero and ok.zero_idle_period_s == 120
