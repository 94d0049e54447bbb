"""Policy validation: invalid policies are rejected whole with field, value and rule."""

from __future__ import annotations

import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy.schema import load_policy, policy_errors, validate_policy


def test_defaults_are_valid_and_round_trip_in_camel_case() -> None:
    policy = load_policy({})
    doc = policy.dump()
    assert doc["minReplicaCount"] == 1 and "maxReplicaCount" in doc
    assert load_policy(doc) == policy


def test_keda_behavior_block_pastes_unchanged() -> None:
    doc = {
        "minReplicaCount": 1,
        "maxReplicaCount": 16,
        "cooldownPeriod": 300,
        "pollingInterval": 15,
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": 300,
                "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
            },
        },
        "metrics": [
            {"signal": "waiting", "type": "AverageValue", "target": 5, "activationTarget": 1}
        ],
    }
    policy = load_policy(doc)
    assert policy.behavior.scale_down is not None
    assert policy.behavior.scale_down.policies is not None
    assert policy.behavior.scale_down.policies[0].period_seconds == 60


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        (
            {"minReplicaCount": 5, "maxReplicaCount": 2},
            "minReplicaCount: value 5 must be <= maxReplicaCount",
        ),
        ({"metrics": [{"signal": "qps", "target": 1}]}, "metrics[0].signal"),
        ({"metrics": [{"signal": "waiting", "target": 0}]}, "metrics[0].target"),
        (
            {"metrics": [{"signal": "kv_cache_usage_max", "type": "AverageValue", "target": 0.8}]},
            "never ask for more than 2 replicas",
        ),
        (
            {"metrics": [{"signal": "kv_cache_usage", "type": "Value", "target": 80}]},
            "must be <= 1",
        ),
        ({"behavior": {"scaleUp": {"selectPolicy": "Fastest"}}}, "behavior.scaleUp.selectPolicy"),
        (
            {
                "behavior": {
                    "scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 3600}]}
                }
            },
            "periodSeconds",
        ),
        ({"idleReplicaCount": 3, "minReplicaCount": 2}, "idleReplicaCount: value 3 must be <"),
        ({"cooldownPeriod": -1}, "cooldownPeriod"),
        ({"minReplicas": 1}, "minReplicas"),
        (
            {"prediction": {"learnedCapacitySignal": "kv_cache_usage"}},
            "learnedCapacitySignal='kv_cache_usage' must be a per-replica load or rate signal",
        ),
        (
            {"prediction": {"learnedCapacitySignal": "ttft_p95_s"}},
            "a fraction or a latency has no per-replica capacity",
        ),
        ({"prediction": {"learnedCapacityHeadroom": 1.5}}, "prediction.learnedCapacityHeadroom"),
    ],
)
def test_invalid_policy_is_rejected_with_field_value_and_rule(
    doc: dict[str, object], needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_policy(doc)
    assert needle in str(err.value)


def test_every_problem_is_reported_at_once() -> None:
    problems = policy_errors({"metrics": [{"signal": "qps", "target": -1}], "cooldownPeriod": -5})
    assert any(p.startswith("metrics[0].signal") for p in problems)
    assert any(p.startswith("metrics[0].target") for p in problems)
    assert any(p.startswith("cooldownPeriod") for p in problems)


def test_fraction_average_value_allowed_when_reproducing_keda() -> None:
    policy = load_policy(
        {
            "allowFractionAverageValue": True,
            "metrics": [{"signal": "kv_cache_usage_max", "type": "AverageValue", "target": 0.8}],
        }
    )
    assert policy.metrics[0].type == "AverageValue"


def test_problem_lines_name_field_rule_and_value_exactly() -> None:
    # Field errors: "field: rule (value v)"; cross-field errors: the sentence alone.
    with pytest.raises(ConfigError) as err:
        load_policy({"maxReplicaCount": 0})
    assert str(err.value) == (
        "invalid policy: maxReplicaCount: Input should be greater than or equal to 1 (value 0)"
    )
    with pytest.raises(ConfigError) as err:
        load_policy({"minReplicaCount": 5, "maxReplicaCount": 2})
    assert err.value.problems == ["minReplicaCount: value 5 must be <= maxReplicaCount (2)"]
    with pytest.raises(ConfigError) as err:
        load_policy({"metrics": {}})
    assert err.value.problems == ["metrics: Input should be a valid tuple (value dict)"]


def test_dump_is_camel_case_json_without_unset_blocks() -> None:
    doc = validate_policy({}).dump()  # the schema's own defaults, no profile
    by_signal = {m["signal"]: m for m in doc["metrics"]}  # a JSON list of camelCase objects
    assert by_signal["waiting"] == {
        "signal": "waiting",
        "type": "AverageValue",
        "target": 4.0,
        "activationTarget": 0.0,
    }
    assert by_signal["kv_cache_usage"]["type"] == "Value" and isinstance(doc["metrics"], list)
    # The documented defaults (docs/policy.md): targets per replica.
    targets = {m["signal"]: m["target"] for m in doc["metrics"]}
    assert targets == {
        "waiting": 4.0,
        "running": 32.0,
        "kv_cache_usage": 0.8,
        "prompt_tokens_per_s": 8000.0,
    }
    assert "fallback" not in doc and "idleReplicaCount" not in doc and doc["behavior"] == {}
