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
TARGET_FIELDS = {
    "scaleTargetRef",
    "mode",
    "metricsPort",
    "metricsPath",
    "engine",
    "selector",
    "variants",
    "roles",
}
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


# ------------------------------------------------------- REST schema vs CRD schema
# A document the REST API accepts is one the API server accepts too (what the CRD store
# sends for it validates against the CRD), and a value the CRD refuses the REST API
# refuses: so a REST write never meets the API server's 422. (The REST API also checks
# rules across fields the CRD cannot say, such as minReplicaCount <= maxReplicaCount.)

import re  # noqa: E402

import jsonschema  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from autoscaler.errors import ConfigError  # noqa: E402
from autoscaler.store.file import target_spec_from_dict  # noqa: E402
from autoscaler.target import spec_to_object  # noqa: E402
from tests.deploy.manifests import openapi_to_jsonschema  # noqa: E402


def _re2_pattern(validator: Any, pattern: str, instance: Any, schema: dict[str, Any]) -> Any:
    """The API server's regexes are Go RE2, where ``$`` is the end of the text; Python's
    ``$`` also matches before a final newline."""
    if isinstance(instance, str):
        python = pattern[:-1] + r"\Z" if pattern.endswith("$") else pattern
        if re.search(python, instance) is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_CRD_VALIDATOR = jsonschema.validators.extend(
    jsonschema.Draft4Validator, {"pattern": _re2_pattern}
)(openapi_to_jsonschema(_spec_schema()))

_BASE: dict[str, Any] = {
    "scaleTargetRef": {"kind": "Deployment", "name": "chat-vllm"},
    "selector": {"app": "chat"},
    "policy": {
        "minReplicaCount": 1,
        "maxReplicaCount": 8,
        "metrics": [{"signal": "waiting", "target": 4}],
        "behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 4, "periodSeconds": 60}]}},
        "panic": {"windowSeconds": 6},
        "fallback": {"failureThreshold": 3, "replicas": 2},
        "prediction": {"enabled": True},
        "warmPool": {"enabled": False},
    },
}


def _leaf_paths(schema: dict[str, Any], path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if schema.get("type") == "object" and "properties" in schema:
        out: list[tuple[Any, ...]] = []
        for name, sub in schema["properties"].items():
            out.extend(_leaf_paths(sub, (*path, name)))
        return out
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return _leaf_paths(schema["items"], (*path, 0)) or [path]
    return [path]


def _rest_path(crd_path: tuple[Any, ...]) -> tuple[Any, ...]:
    """Where a CRD spec field lives in the REST document."""
    head = crd_path[0]
    if head in TARGET_FIELDS:
        return ("selector",) if head == "selector" else crd_path
    return ("policy", *crd_path)


_SPEC_PATHS = [
    p for p in _leaf_paths(_spec_schema()["properties"]["spec"]) if p and p[0] != "profile"
]
_VALUES = st.one_of(
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([5e-324, 1e308, 0.05, 0.1, 1.0, 10.0, 10.5, 65536, 0, -1]),
    st.sampled_from(["5", "300", "true", "", "bogus", "/metrics", "/m\r\nX: 1", "/a b"]),
    st.sampled_from(["auto", "vllm", "Deployment", "Pods", "waiting", "Max", "AverageValue"]),
    st.sampled_from(["chat", "é", "Chat", "a.b", "a..b", "x" * 254, "\u0661"]),
    st.booleans(),
    st.none(),
    st.dictionaries(
        st.sampled_from(["app", "bad key!", "a/b", "x" * 64, "-x", "example.com/tier"]),
        st.sampled_from(["x", "", "bad value!", "y" * 64]),
        max_size=2,
    ),
)


def _set(doc: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    node: Any = out
    for i, key in enumerate(path[:-1]):
        nxt = path[i + 1]
        if isinstance(node, dict) and not isinstance(node.get(key), dict | list):
            node[key] = [{}] if isinstance(nxt, int) else {}
        if isinstance(node, list) and key >= len(node):
            node.append({})
        node = node[key]
    if isinstance(node, list):
        node[path[-1] if path[-1] < len(node) else 0] = value
    else:
        node[path[-1]] = value
    return out


def _pruned(instance: Any, schema: dict[str, Any]) -> Any:
    """What the API server validates: a null in a field that is not nullable is pruned
    (dropped, then defaulted) first."""
    if isinstance(instance, dict) and "properties" in schema:
        props = schema["properties"]
        return {
            k: _pruned(v, props.get(k, {}))
            for k, v in instance.items()
            if not (v is None and k in props and not props[k].get("nullable"))
        }
    if isinstance(instance, list) and isinstance(schema.get("items"), dict):
        return [_pruned(v, schema["items"]) for v in instance]
    return instance


def _crd_object_of_raw(doc: dict[str, Any]) -> dict[str, Any]:
    """The LLMAutoscaler a user would write for the same raw REST document."""
    spec = {k: v for k, v in doc.items() if k not in ("policy", "selector")}
    spec.update(doc.get("policy") or {})
    if doc.get("selector") is not None:
        spec["selector"] = {"matchLabels": doc["selector"]}
    obj = {"apiVersion": "x", "kind": "LLMAutoscaler", "metadata": {"name": "chat"}}
    return {**obj, "spec": _pruned(spec, _spec_schema()["properties"]["spec"])}


def _rest_spec(doc: dict[str, Any]) -> Any:
    try:
        return target_spec_from_dict(doc, ref=TargetRef("default", "chat"))
    except ConfigError:
        return None


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(path=st.sampled_from(_SPEC_PATHS), value=_VALUES)
def test_a_document_the_rest_api_accepts_the_crd_accepts_and_vice_versa_per_field(
    path: tuple[Any, ...], value: Any
) -> None:
    doc = _set(_BASE, _rest_path(path), value)
    spec = _rest_spec(doc)
    raw_crd_ok = _CRD_VALIDATOR.is_valid(_crd_object_of_raw(doc))
    if spec is not None:
        sent = spec_to_object(spec)
        errors = [e.message for e in _CRD_VALIDATOR.iter_errors(sent)]
        assert errors == [], f"REST accepted {path}={value!r}; the CRD refuses: {errors}"
        assert raw_crd_ok, f"REST accepted {path}={value!r} as written; the CRD refuses it"
    elif not raw_crd_ok:
        pass  # both refuse
    else:
        # The CRD accepts, REST refuses: only for rules across fields, a null the API
        # server prunes (a non-nullable field set to null is dropped, then defaulted), or
        # a label key (a structural schema cannot check map keys; the controller refuses
        # the object when it reads it, with an InvalidSpec status).
        with pytest.raises(ConfigError) as err:
            target_spec_from_dict(doc, ref=TargetRef("default", "chat"))
        text = str(err.value)
        cross_field = re.search(
            r"must be <=|must be <|repeated|fraction|per-replica|is not a label key"
            r"|applies only to a target that may go to zero|conflicts with idleReplicaCount"
            r"|must come as a pair|needs variants with a role|must not mix",
            text,
        )
        assert value is None or cross_field, f"{path}={value!r}: only REST refuses: {text}"


from autoscaler.domain import TargetRef  # noqa: E402


def test_held_requests_are_in_the_status_and_the_held_printer_column() -> None:
    from autoscaler.domain import Decision, Reason
    from autoscaler.target_status import status_body

    decision = Decision(
        t=0.0,
        current_replicas=0,
        desired_replicas=2,
        reason=Reason.ACTIVATE,
        message="scale up 0 -> 2; scaled from zero for 7 held requests",
        active=True,
        numbers={"held": 7.0},
    )
    status = status_body(decision, now_rfc3339="2026-01-01T00:00:00Z")
    assert status["held"] == 7
    idle = status_body(
        Decision(0.0, 0, 0, Reason.IDLE, "hold at 0", False), now_rfc3339="2026-01-01T00:00:00Z"
    )
    assert idle["held"] == 0  # written back to 0 once nothing is held
    obj = copy.deepcopy(_examples()[0])
    obj["status"] = status
    assert not [e.message for e in crd_validator(_crd()).iter_errors(obj)]
    columns = _crd()["spec"]["versions"][0]["additionalPrinterColumns"]
    assert {"name": "Held", "type": "integer", "jsonPath": ".status.held"} in columns
