"""Property: any policy the schema accepts plus any finite observation -> `decide` returns
without raising, and its decision serialises to strict JSON (no NaN/Infinity)."""

from __future__ import annotations

import json
import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from autoscaler.domain import SIGNALS, DecisionState, Forecast, Observation
from autoscaler.errors import ConfigError
from autoscaler.policy.core import decide
from autoscaler.policy.schema import (
    RATE_POLICY_VALUE_MAX,
    REPLICAS_MAX,
    TARGET_MIN,
    VALUE_MAX,
    Policy,
    validate_policy,
)

FINITE = st.floats(allow_nan=False, allow_infinity=False)
INT32 = st.integers(min_value=0, max_value=2**31 - 1)
# Targets at the edges of what the schema accepts, plus anything in between.
TARGETS = st.one_of(
    st.sampled_from([TARGET_MIN, 1.0, VALUE_MAX, 0.8]),
    st.floats(min_value=TARGET_MIN, max_value=VALUE_MAX),
)
REPLICAS = st.integers(min_value=0, max_value=REPLICAS_MAX)

metric = st.fixed_dictionaries(
    {
        "signal": st.sampled_from(SIGNALS),
        "type": st.sampled_from(["AverageValue", "Value"]),
        "target": TARGETS,
        "activationTarget": st.floats(min_value=0, max_value=VALUE_MAX),
    }
)
rate_policy = st.fixed_dictionaries(
    {
        "type": st.sampled_from(["Pods", "Percent"]),
        "value": st.integers(min_value=1, max_value=RATE_POLICY_VALUE_MAX),
        "periodSeconds": st.integers(min_value=1, max_value=1800),
    }
)
rules = st.fixed_dictionaries(
    {},
    optional={
        "stabilizationWindowSeconds": st.integers(min_value=0, max_value=3600),
        "selectPolicy": st.sampled_from(["Max", "Min", "Disabled"]),
        "tolerance": st.floats(min_value=0, max_value=0.99),
        "policies": st.lists(rate_policy, min_size=1, max_size=3),
    },
)
policy_doc = st.fixed_dictionaries(
    {
        "minReplicaCount": REPLICAS,
        "maxReplicaCount": st.integers(min_value=1, max_value=REPLICAS_MAX),
        "metrics": st.lists(
            metric, min_size=1, max_size=4, unique_by=lambda m: (m["signal"], m["type"])
        ),
        "allowFractionAverageValue": st.just(True),
    },
    optional={
        "idleReplicaCount": REPLICAS,
        "cooldownPeriod": st.integers(min_value=0, max_value=86_400),
        "fallback": st.fixed_dictionaries(
            {"failureThreshold": st.integers(min_value=1, max_value=10), "replicas": REPLICAS}
        ),
        "behavior": st.fixed_dictionaries({}, optional={"scaleUp": rules, "scaleDown": rules}),
        "panic": st.fixed_dictionaries(
            {
                "windowSeconds": st.floats(min_value=0.01, max_value=600),
                "threshold": st.floats(min_value=1.01, max_value=100),
            }
        ),
        "prediction": st.fixed_dictionaries(
            {
                "learnedCapacitySignal": st.sampled_from(["running", "arrival_rate_per_s"]),
                "learnedCapacityHeadroom": st.floats(min_value=0.01, max_value=1),
            }
        ),
        "capacity": st.fixed_dictionaries({"enforce": st.booleans()}),
    },
)


@st.composite
def policies(draw: st.DrawFn) -> Policy:
    doc: dict[str, Any] = draw(policy_doc)
    try:
        return validate_policy(doc)
    except ConfigError:  # inconsistent combination (e.g. min > max): not accepted
        doc["maxReplicaCount"] = REPLICAS_MAX
        doc.pop("idleReplicaCount", None)
        doc.pop("fallback", None)
        doc["metrics"] = [{**m, "target": min(m["target"], 1.0)} for m in doc["metrics"]]
        return validate_policy(doc)


signals = st.dictionaries(st.sampled_from(SIGNALS), FINITE)
forecasts = st.one_of(
    st.none(),
    st.builds(
        Forecast,
        horizon_s=st.floats(min_value=0, max_value=3600),
        signals=signals,
        capacity_per_replica=st.dictionaries(st.sampled_from(SIGNALS), FINITE),
    ),
)


@st.composite
def observations(draw: st.DrawFn, t: float) -> Observation:
    ready = draw(INT32)
    return Observation(
        t=t,
        current_replicas=draw(INT32),
        ready_replicas=ready,
        signals=draw(signals),
        pods_read=draw(st.one_of(st.none(), st.integers(min_value=0, max_value=ready))),
        pending_replicas=draw(INT32),
        capacity_max_replicas=draw(st.one_of(st.none(), INT32)),
        forecast=draw(forecasts),
    )


@settings(
    max_examples=int(os.environ.get("DECIDE_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
@given(policy=policies(), data=st.data())
def test_any_accepted_policy_and_finite_observation_decide_without_raising(
    policy: Policy, data: st.DataObject
) -> None:
    state = DecisionState()
    t = 0.0
    for _ in range(3):  # a few ticks so that histories (stabilisation, events) matter
        t += data.draw(st.floats(min_value=0.001, max_value=1e6))
        decision, state = decide(policy, data.draw(observations(t)), state, t)
        json.dumps(decision.to_dict(), allow_nan=False)
        assert decision.desired_replicas >= 0


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"metrics": [{"signal": "waiting", "target": 5e-324}]}, "metrics[0].target"),
        ({"metrics": [{"signal": "waiting", "target": math.inf}]}, "finite number"),
        ({"metrics": [{"signal": "waiting", "target": 4, "activationTarget": math.nan}]}, "finite"),
        (
            {"behavior": {"scaleUp": {"policies": [{"type": "Percent", "value": 1e300}]}}},
            "behavior.scaleUp.policies[0].value",
        ),
        (
            {"behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 10_001}]}}},
            "less than or equal to 10000",
        ),
        ({"idleReplicaCount": 2**40}, "idleReplicaCount"),
    ],
)
def test_schema_refuses_non_finite_and_unbounded_numbers_naming_field_value_rule(
    doc: dict[str, Any], needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        validate_policy(doc)
    assert any(needle in p and "value" in p for p in err.value.problems), err.value.problems


def test_infinite_signal_reaching_the_core_asks_for_max_instead_of_raising() -> None:
    policy = validate_policy(
        {"maxReplicaCount": 8, "metrics": [{"signal": "waiting", "target": 1}]}
    )
    obs = Observation(t=1.0, current_replicas=2, ready_replicas=2, signals={"waiting": math.inf})
    decision, _ = decide(policy, obs, DecisionState(), 1.0)  # the boundary drops +Inf
    assert 2 < decision.desired_replicas <= 8  # before the core; here it must not raise
