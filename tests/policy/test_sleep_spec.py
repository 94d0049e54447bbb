"""``policy.sleep``: validated once, with field, value and rule in each message; the CRD
carries the same bounds and shows the awake/sleeping counts with ``-o wide``."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy.schema import load_policy
from tests.deploy.manifests import load_script

build_crd = load_script("gen_crd").build_crd


def test_unset_means_no_sleepers_and_the_profile_hash_is_unchanged() -> None:
    assert load_policy({}).sleep is None
    assert "sleep" not in load_policy({}).dump()


def test_a_budget_and_a_ttl_are_read() -> None:
    sleep = load_policy({"sleep": {"maxSleeping": 2, "ttlSeconds": 1800}}).sleep
    assert sleep is not None and (sleep.max_sleeping, sleep.ttl_seconds) == (2, 1800.0)
    no_ttl = load_policy({"sleep": {"maxSleeping": 1, "ttlSeconds": None}}).sleep
    assert no_ttl is not None and no_ttl.ttl_seconds is None


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        (
            {"maxSleeping": -1},
            "sleep.maxSleeping: Input should be greater than or equal to 0 (value -1)",
        ),
        (
            {"maxSleeping": 1, "ttlSeconds": 0},
            "sleep.ttlSeconds: Input should be greater than 0 (value 0)",
        ),
        ({"ttlSeconds": 60}, "sleep.maxSleeping: Field required"),
        ({"maxSleeping": "2"}, "sleep.maxSleeping: Input should be a valid integer (value '2')"),
        ({"maxSleeping": 1, "ttl": 5}, "sleep.ttl: Extra inputs are not permitted"),
    ],
)
def test_bad_values_name_field_value_and_rule(block: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_policy({"sleep": block})
    assert any(p.startswith(expected) for p in err.value.problems), err.value.problems


def test_the_crd_has_the_same_bounds_and_wide_columns() -> None:
    (version,) = build_crd()["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    sleep = spec["sleep"]
    assert sleep["required"] == ["maxSleeping"]
    assert sleep["properties"]["maxSleeping"]["minimum"] == 0
    ttl = sleep["properties"]["ttlSeconds"]
    assert (ttl["minimum"], ttl["exclusiveMinimum"], ttl["nullable"]) == (0, True, True)
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Awake"]["jsonPath"] == ".status.awakeReplicas"
    assert columns["Sleeping"]["jsonPath"] == ".status.sleepingReplicas"
    assert columns["Awake"]["priority"] == columns["Sleeping"]["priority"] == 1
