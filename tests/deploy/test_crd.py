"""The LLMAutoscaler CRD: generated from the policy model, structural, and it accepts
exactly the examples and rejects invalid policies."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from autoscaler.policy.profiles import PROFILES
from autoscaler.policy.schema import Policy, load_policy
from tests.deploy.manifests import DEPLOY, all_objects, crd_validator, load_docs, load_script

CRD_FILE = DEPLOY / "base" / "crd.yaml"
TARGET_FIELDS = {"scaleTargetRef", "mode", "metricsPort", "metricsPath", "engine", "selector"}
gen_crd = load_script("gen_crd")


def _crd() -> dict[str, Any]:
    (crd,) = load_docs(CRD_FILE)
    return crd


def _examples() -> list[dict[str, Any]]:
    return [obj for _, obj in all_objects() if obj["kind"] == "LLMAutoscaler"]


def _walk(node: Any, path: str = "") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(node, dict):
        out.append((path, node))
        for name, sub in node.get("properties", {}).items():
            out.extend(_walk(sub, f"{path}.{name}"))
        if isinstance(node.get("items"), dict):
            out.extend(_walk(node["items"], f"{path}[]"))
        if isinstance(node.get("additionalProperties"), dict):
            out.extend(_walk(node["additionalProperties"], f"{path}{{}}"))
    return out


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_equals_generated_from_policy_model() -> None:
    assert CRD_FILE.read_text() == gen_crd.render(), "run: python scripts/gen_crd.py"


def test_check_mode_reports_a_stale_file(tmp_path: Any) -> None:
    stale = tmp_path / "crd.yaml"
    stale.write_text(gen_crd.render().replace("llmas", "llmx"))
    assert gen_crd.main(["--check", "--output", str(stale)]) == 1
    stale.write_text(gen_crd.render())
    assert gen_crd.main(["--check", "--output", str(stale)]) == 0


def test_schema_is_structural() -> None:
    forbidden = {"$ref", "anyOf", "oneOf", "allOf", "not", "$defs", "title"}
    for path, node in _walk(_spec_schema()):
        assert not forbidden & set(node), f"{path}: {sorted(forbidden & set(node))}"
        assert "type" in node, f"{path}: every node needs a type"
        if "properties" in node:
            assert node.get("additionalProperties") in (None,), f"{path}: props + addlProps"
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert node[bound] is True, f"{path}.{bound} must be boolean in OpenAPI v3.0"
        if "default" in node:
            assert node["default"] is not None, f"{path}: null default"


def test_every_policy_field_is_in_the_spec() -> None:
    props = _spec_schema()["properties"]["spec"]["properties"]
    policy_fields = {f.alias for f in Policy.model_fields.values()}
    assert policy_fields <= set(props)
    assert set(props) == policy_fields | TARGET_FIELDS | {"profile"}


def test_profile_is_an_enum_of_the_shipped_profiles() -> None:
    prop = _spec_schema()["properties"]["spec"]["properties"]["profile"]
    assert prop["type"] == "string" and "default" not in prop
    assert set(prop["enum"]) == set(PROFILES)
    validator = crd_validator(_crd())
    obj = copy.deepcopy(_examples()[0])
    for name in PROFILES:
        obj["spec"]["profile"] = name
        assert not list(validator.iter_errors(obj)), name
    obj["spec"]["profile"] = "cheap"
    assert list(validator.iter_errors(obj))


def test_policy_fields_have_no_defaults_the_profile_supplies_them() -> None:
    """An API server default would be indistinguishable from a value the user set, and
    would override the selected profile's (maxReplicaCount 16 over recommended's)."""
    policy_fields = {f.alias for f in Policy.model_fields.values()}
    spec = _spec_schema()["properties"]["spec"]
    for path, node in _walk(spec):
        top = path.split(".")[1] if path.count(".") >= 1 else ""
        if top in policy_fields and "[]" not in path:
            assert "default" not in node, f"{path}: default {node.get('default')!r}"
    assert spec["properties"]["mode"]["default"] == "direct"  # target fields keep theirs


def test_names_printer_columns_and_status_subresource_match_the_contract() -> None:
    spec = _crd()["spec"]
    assert spec["group"] == "autoscaling.llmscaler.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == "llmautoscalers"
    assert "llmas" in spec["names"]["shortNames"]
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["subresources"] == {"status": {}}
    paths = {c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert {".status.currentReplicas", ".status.desiredReplicas", ".spec.mode"} <= paths
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"currentReplicas", "desiredReplicas", "lastReason", "lastMessage"} <= set(status)
    assert {"lastDecisionTime", "conditions", "observedGeneration"} <= set(status)
    assert {"profile", "policyHash"} <= set(status)


def test_kubectl_get_shows_the_profile_in_use_from_the_status() -> None:
    """``.spec.profile`` is empty when the spec names none; the status always says."""
    (version,) = _crd()["spec"]["versions"]
    columns = {c["name"]: c for c in version["additionalPrinterColumns"]}
    assert columns["Profile"]["jsonPath"] == ".status.profile"
    assert "priority" not in columns["Profile"]  # in the default output, not only -o wide
    assert columns["Policy"] == {
        "name": "Policy",
        "type": "string",
        "jsonPath": ".status.policyHash",
        "priority": 1,
    }


def test_examples_exist_and_the_crd_schema_accepts_them() -> None:
    examples = _examples()
    assert len(examples) >= 3
    validator = crd_validator(_crd())
    for obj in examples:
        errors = [e.message for e in validator.iter_errors(obj)]
        assert not errors, f"{obj['metadata']['name']}: {errors}"


def test_examples_are_valid_policies_for_the_controller() -> None:
    for obj in _examples():
        policy_part = {k: v for k, v in obj["spec"].items() if k not in TARGET_FIELDS}
        load_policy(policy_part)  # raises ConfigError naming field, value and rule


def test_default_policy_dump_is_accepted_as_a_spec() -> None:
    obj = {
        "apiVersion": "autoscaling.llmscaler.io/v1alpha1",
        "kind": "LLMAutoscaler",
        "metadata": {"name": "x", "namespace": "y"},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "x"}, **Policy().dump()},
    }
    assert not list(crd_validator(_crd()).iter_errors(obj))


@pytest.mark.parametrize(
    ("field_path", "value"),
    [
        (("minReplicaCount",), -1),
        (("maxReplicaCount",), 0),
        (("pollingInterval",), 0),
        (("metrics", 0, "signal"), "gpu_utilization"),
        (("metrics", 0, "target"), 0),
        (("metrics", 0, "type"), "Utilization"),
        (("behavior", "scaleUp", "selectPolicy"), "Fastest"),
        (("behavior", "scaleDown", "policies", 0, "periodSeconds"), 1801),
        (("panic", "threshold"), 1),
        (("engine",), "llamacpp"),
        (("mode",), "aggressive"),
        (("metricsPort",), 70000),
        (("scaleTargetRef", "kind"), "DaemonSet"),
        (("minReplicaCounts",), 1),
    ],
)
def test_crd_schema_rejects_invalid_policy(field_path: tuple[Any, ...], value: Any) -> None:
    obj = copy.deepcopy(_examples()[0])
    obj["spec"].setdefault("behavior", {}).setdefault(
        "scaleDown", {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
    )
    node = obj["spec"]
    for part in field_path[:-1]:
        node = node[part]
    node[field_path[-1]] = value
    validator = crd_validator(_crd())
    errors = list(validator.iter_errors(obj))
    assert errors, f"spec.{'.'.join(map(str, field_path))}={value!r} was accepted"
    # The controller's own validation agrees (for the policy part).
    if field_path[0] not in TARGET_FIELDS:
        policy_part = {k: v for k, v in obj["spec"].items() if k not in TARGET_FIELDS}
        with pytest.raises(Exception, match="invalid policy"):
            load_policy(policy_part)


def test_spec_without_scale_target_is_rejected() -> None:
    obj = copy.deepcopy(_examples()[0])
    del obj["spec"]["scaleTargetRef"]
    assert list(crd_validator(_crd()).iter_errors(obj))


def test_converter_refuses_unions_it_cannot_express() -> None:
    schema = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    with pytest.raises(gen_crd.SchemaConversionError, match="spec.x"):
        gen_crd.to_structural(schema, {}, "spec.x")


def test_controller_reads_every_example_and_writes_objects_the_crd_accepts() -> None:
    """Round trip through the controller's own mapping (autoscaler/target.py)."""
    from autoscaler.target import object_to_spec, spec_to_object

    validator = crd_validator(_crd())
    for obj in _examples():
        written = spec_to_object(object_to_spec(obj))
        written.setdefault("apiVersion", obj["apiVersion"])
        written.setdefault("kind", obj["kind"])
        errors = [e.message for e in validator.iter_errors(written)]
        assert not errors, f"{obj['metadata']['name']}: {errors}"


def test_status_written_by_the_controller_fits_the_status_schema() -> None:
    from autoscaler.domain import Decision, Reason, TargetRef
    from autoscaler.target_status import Condition, status_body

    decision = Decision(
        t=0.0,
        current_replicas=2,
        desired_replicas=3,
        reason=Reason.CAPACITY_LIMITED,
        message="wants 5, GPUs place 3",
        active=True,
    )
    from autoscaler.policy.document import load_source
    from autoscaler.target import TargetSpec
    from autoscaler.target_status import overrides_condition

    legacy = TargetSpec.from_source(
        TargetRef("llm", "x"), load_source({"maxReplicaCount": 16})
    ).policy_status()
    overrides = overrides_condition(legacy)
    assert overrides is not None
    status = status_body(
        decision,
        now_rfc3339="2026-01-01T00:00:00Z",
        conditions=[
            Condition("CapacityLimited", "True", "capacity-limited", "wants 5"),
            overrides,
        ],
        observed_generation=4,
        policy=legacy,
    )
    assert (status["profile"], status["policyHash"]) == ("recommended", legacy.policy_hash)
    obj = copy.deepcopy(_examples()[0])
    obj["status"] = status
    assert not [e.message for e in crd_validator(_crd()).iter_errors(obj)]
    obj["status"]["desiredReplicas"] = -1
    assert list(crd_validator(_crd()).iter_errors(obj))
