"""Selecting a profile in a policy document: the default, the merge rule, nulls, errors."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy.document import document_of, load_source, merge, profile_names
from autoscaler.policy.profiles import PROFILES, cost_first, recommended
from autoscaler.policy.schema import (
    Behavior,
    MetricSpec,
    Policy,
    Prediction,
    ScalingRules,
    load_policy,
    validate_policy,
)
from autoscaler.sim.policies import keda_seed_policy, ours_cost_policy, ours_policy


def test_an_empty_document_is_the_policy_the_benchmarks_measure_as_ours() -> None:
    assert load_policy({}) == ours_policy() == recommended()
    assert load_policy({"profile": "cost-first"}) == ours_cost_policy() == cost_first()
    # ... and not the bare schema defaults it was before profiles were selectable.
    bare = validate_policy({})
    assert bare.prediction is None and load_policy({}).prediction is not None


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_naming_a_profile_gives_exactly_that_profile(name: str) -> None:
    assert load_policy({"profile": name}) == PROFILES[name]()
    assert load_source({"profile": name}).profile == name


@pytest.mark.parametrize("value", ["cheap", "Recommended", "", None, 3, ["cost-first"]])
def test_an_unknown_profile_is_rejected_naming_field_value_and_choices(value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        load_policy({"profile": value, "maxReplicaCount": 4})
    (problem,) = err.value.problems
    assert problem.startswith(f"profile: value {value!r} must be one of ")
    assert problem.endswith(", ".join(profile_names()))


def test_a_top_level_field_set_replaces_the_profiles_and_keeps_the_rest() -> None:
    policy = load_policy({"profile": "cost-first", "maxReplicaCount": 12, "cooldownPeriod": 60})
    base = cost_first()
    assert (policy.max_replica_count, policy.cooldown_period) == (12, 60)
    assert policy.metrics == base.metrics and policy.prediction == base.prediction
    assert policy.behavior == base.behavior


def test_objects_merge_recursively_so_behavior_keeps_the_profiles_window() -> None:
    doc = {
        "behavior": {"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    }
    policy = load_policy(doc)
    down = policy.behavior.scale_down
    assert down is not None and down.policies is not None
    assert (
        down.stabilization_window_seconds
        == recommended().behavior.scale_down.stabilization_window_seconds
    )  # type: ignore[union-attr]
    assert (down.policies[0].type, down.policies[0].value) == ("Pods", 1)
    # scaleUp stays the profile's (unset: HPA's default policies)
    assert policy.behavior.scale_up == recommended().behavior.scale_up


def test_prediction_merges_field_by_field() -> None:
    policy = load_policy({"prediction": {"forecaster": "holt"}})
    assert policy.prediction == Prediction(forecaster="holt")


def test_lists_replace_the_profiles_whole() -> None:
    policy = load_policy({"profile": "cost-first", "metrics": [{"signal": "waiting", "target": 2}]})
    assert policy.metrics == (MetricSpec(signal="waiting", target=2),)


def test_null_turns_prediction_off_and_resets_a_window_to_hpas_default() -> None:
    off = load_policy({"prediction": None})
    assert off.prediction is None
    assert off == recommended().model_copy(update={"prediction": None})
    hpa = load_policy({"behavior": {"scaleDown": {"stabilizationWindowSeconds": None}}})
    assert hpa.behavior == Behavior(scale_down=ScalingRules())
    # enabled: false keeps the block (planner, warm-pool sizing) but forecasts nothing
    disabled = load_policy({"prediction": {"enabled": False}})
    assert disabled.prediction is not None and not disabled.prediction.enabled


def test_null_where_the_schema_has_no_unset_state_is_an_error() -> None:
    with pytest.raises(ConfigError, match="maxReplicaCount"):
        load_policy({"maxReplicaCount": None})


def test_cross_field_rules_see_the_profiles_values() -> None:
    max_replicas = recommended().max_replica_count
    with pytest.raises(ConfigError) as err:
        load_policy({"minReplicaCount": max_replicas + 1})
    assert err.value.problems == [
        f"minReplicaCount: value {max_replicas + 1} must be <= maxReplicaCount ({max_replicas})"
    ]


def test_snake_case_keys_merge_like_camel_case_and_both_at_once_is_an_error() -> None:
    snake = load_policy({"max_replica_count": 9, "behavior": {"scale_down": {"tolerance": 0.2}}})
    camel = load_policy({"maxReplicaCount": 9, "behavior": {"scaleDown": {"tolerance": 0.2}}})
    assert snake == camel
    assert camel.behavior.scale_down is not None
    assert camel.behavior.scale_down.stabilization_window_seconds is not None  # merged
    with pytest.raises(ConfigError, match="maxReplicaCount: given twice"):
        load_policy({"max_replica_count": 9, "maxReplicaCount": 8})


def test_unknown_fields_are_still_rejected() -> None:
    with pytest.raises(ConfigError, match="maxReplicas"):
        load_policy({"maxReplicas": 4})


def test_the_source_keeps_the_document_as_written() -> None:
    src = load_source({"max_replica_count": 9})
    assert src.document == {"maxReplicaCount": 9}  # camelCase, no profile added
    assert src.profile == "recommended"


def test_merge_leaves_its_arguments_untouched() -> None:
    base = {"a": {"b": 1, "c": [1]}, "d": 2}
    over = {"a": {"b": None}, "e": 3}
    assert merge(base, over) == {"a": {"b": None, "c": [1]}, "d": 2, "e": 3}
    assert base == {"a": {"b": 1, "c": [1]}, "d": 2} and over == {"a": {"b": None}, "e": 3}


@pytest.mark.parametrize(
    "policy",
    [
        Policy(),
        keda_seed_policy(),
        recommended(),
        cost_first(),
        Policy(
            max_replica_count=5,
            metrics=(MetricSpec(signal="waiting", target=3),),
            behavior=Behavior(scale_up=ScalingRules(select_policy="Min")),
        ),
    ],
    ids=["schema-defaults", "keda-seed", "recommended", "cost-first", "custom"],
)
def test_a_policy_built_in_code_has_a_document_that_loads_back_to_it(policy: Policy) -> None:
    doc = document_of(policy)
    assert doc["profile"] == "recommended"
    assert load_policy(doc) == policy


def test_a_camel_case_document_is_kept_without_a_copy() -> None:
    # A fleet keeps one copy of each spec: the CRD store holds the object's already.
    doc = {"maxReplicaCount": 9, "behavior": {"scaleDown": {"tolerance": 0.2}}}
    assert load_source(doc).document is doc
    snake = {"max_replica_count": 9, "behavior": doc["behavior"]}
    src = load_source(snake)
    assert src.document is not snake and src.document["behavior"] is doc["behavior"]
