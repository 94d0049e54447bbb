"""What the status says about a target's policy: the profile in use, a hash of the
effective policy, and the fields that hold the pre-profiles CRD's defaults over the
profile's values (docs/policy.md#what-the-status-reports and
#upgrading-from-the-crd-before-profiles)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from autoscaler.domain import TargetRef
from autoscaler.policy.document import (
    POLICY_HASH_CHARS,
    document_hash,
    effective,
    load_source,
    policy_hash,
)
from autoscaler.policy.profiles import cost_first, recommended
from autoscaler.policy.schema import Policy
from autoscaler.policy.status import OLD_CRD_DEFAULTS, Override, old_default_overrides
from autoscaler.target import ScaleTargetRef, TargetSpec
from tests.fixtures import (
    CRD_BEFORE_PROFILES_BLOB,
    CRD_BEFORE_PROFILES_GIT,
    crd_before_profiles,
    crd_before_profiles_text,
)

REF = TargetRef("llm", "m")


def spec_of(document: dict[str, Any]) -> TargetSpec:
    return TargetSpec.from_source(REF, load_source(document), scale_target_ref=ScaleTargetRef())


# ----------------------------------------------------------------------------- hash
def test_the_hash_is_a_short_hex_digest() -> None:
    h = policy_hash(recommended())
    assert len(h) == POLICY_HASH_CHARS and int(h, 16) >= 0


def test_the_hash_follows_the_effective_policy_not_the_spelling_of_the_document() -> None:
    empty = spec_of({}).policy_status()
    spelled_out = spec_of({"profile": "recommended", "maxReplicaCount": 64}).policy_status()
    assert empty == spelled_out  # same profile, same fields run: nothing to report
    assert spec_of({"maxReplicaCount": 65}).policy_status().policy_hash != empty.policy_hash


def test_the_hash_changes_with_the_profile_and_with_any_nested_field() -> None:
    base = spec_of({}).policy_status().policy_hash
    others = {
        spec_of({"profile": "cost-first"}).policy_status().policy_hash,
        spec_of({"prediction": {"forecaster": "holt"}}).policy_status().policy_hash,
        spec_of({"prediction": None}).policy_status().policy_hash,
        spec_of({"behavior": {"scaleDown": {"stabilizationWindowSeconds": 300}}})
        .policy_status()
        .policy_hash,
    }
    assert base not in others and len(others) == 4


def test_the_hash_can_be_recomputed_from_the_rest_apis_effective_policy() -> None:
    """``effectivePolicy`` as JSON (the REST GET), profile included, gives the same hash."""
    for policy, profile in ((recommended(), "recommended"), (cost_first(), "cost-first")):
        over_the_wire = json.loads(json.dumps(effective(policy, profile)))
        assert document_hash(over_the_wire) == policy_hash(policy)


def test_the_status_names_the_profile_applied_recommended_when_omitted() -> None:
    assert spec_of({}).policy_status().profile == "recommended"
    assert spec_of({"profile": "cost-first"}).policy_status().profile == "cost-first"
    coded = TargetSpec(ref=REF, policy=Policy(max_replica_count=16))  # built in code
    status = coded.policy_status()
    assert status.profile == "recommended" and status.overrides == ()  # no user document


# ------------------------------------------------------------- old CRD defaults
def old_crd_object_spec() -> dict[str, Any]:
    """What an API server with the old CRD stored for a spec of one metric: the
    top-level defaults filled in (nested ones only inside blocks the object had)."""
    return {
        "metrics": [{"signal": "waiting", "target": 4, "type": "AverageValue"}],
        "minReplicaCount": 1,
        "maxReplicaCount": 16,
        "cooldownPeriod": 300,
        "pollingInterval": 1,  # the API server stores the float default 1.0 as 1
        "allowFractionAverageValue": False,
    }


def test_an_object_stored_by_the_old_crd_names_only_the_fields_that_change_the_profile() -> None:
    status = spec_of(old_crd_object_spec()).policy_status()
    assert status.overrides == (Override("maxReplicaCount", 16, 64),)
    message = status.overrides_message()
    assert message is not None
    assert "maxReplicaCount=16 (profile: 64)" in message
    assert "override the profile 'recommended'" in message
    assert "if the old CRD wrote them, remove them" in message


def test_a_field_set_to_another_value_is_never_named() -> None:
    for value in (8, 17, 64, 100):
        assert spec_of({"maxReplicaCount": value}).policy_status().overrides == ()


def test_a_field_equal_to_the_old_default_and_to_the_profile_is_not_named() -> None:
    # The profile gives the same value: the field changes nothing the target runs.
    doc = {
        "minReplicaCount": 1,
        "cooldownPeriod": 300,
        "pollingInterval": 1.0,
        "prediction": {"enabled": True, "forecaster": "auto", "minPodsToLearn": 3},
        "coldStartGuard": {"enabled": True},
        "warmPool": {"enabled": False, "maxReplicas": 4},
    }
    assert spec_of(doc).policy_status().overrides == ()


def test_a_block_the_profile_leaves_unset_is_not_named() -> None:
    # recommended has no panic block: panic's old defaults override nothing of it.
    doc = {"panic": {"windowSeconds": 6.0, "threshold": 2.0, "stableWindowSeconds": 60.0}}
    assert spec_of(doc).policy_status().overrides == ()


def test_the_check_applies_under_every_profile() -> None:
    status = spec_of({"profile": "cost-first", "maxReplicaCount": 16}).policy_status()
    assert [o.field for o in status.overrides] == ["maxReplicaCount"]
    assert status.profile == "cost-first"


def test_a_boolean_never_matches_a_number_default() -> None:
    assert old_default_overrides({"maxReplicaCount": True}, "recommended") == ()


def test_the_overrides_are_part_of_what_is_compared_before_a_write() -> None:
    plain = spec_of({}).policy_status()
    legacy = spec_of({"maxReplicaCount": 16}).policy_status()
    assert plain != legacy and plain.overrides_message() is None


def _old_crd_defaults() -> dict[tuple[str, ...], Any]:
    crd = crd_before_profiles()
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    policy_fields = {f.alias for f in Policy.model_fields.values()}
    out: dict[tuple[str, ...], Any] = {}

    def walk(node: dict[str, Any], path: tuple[str, ...]) -> None:
        if "default" in node and path:
            out[path] = node["default"]
        for name, sub in (node.get("properties") or {}).items():
            walk(sub, (*path, name))
        # list items are left out: a list replaces the profile's whole

    for name, sub in spec["properties"].items():
        if name in policy_fields:
            walk(sub, (name,))
    return out


def test_the_old_defaults_table_is_the_old_crds() -> None:
    assert _old_crd_defaults() == dict(OLD_CRD_DEFAULTS)


def test_the_old_crd_copy_is_the_blob_in_the_history() -> None:
    """Provenance of tests/fixtures/crd_before_profiles_73d98bd.yaml (the test above reads
    the copy): its bytes are git's blob ``73d98bd^:deploy/base/crd.yaml``, by blob id, so
    the check needs neither git nor the history."""
    data = crd_before_profiles_text().encode()
    blob_id = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert blob_id == CRD_BEFORE_PROFILES_BLOB, f"{CRD_BEFORE_PROFILES_GIT}: copy differs"
