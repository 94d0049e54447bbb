"""The ``variants`` list of a target (issue 37): both encodings, the CRD, and errors that
name the field, the value and the rule; and a target seen as one of its variants (what
the controller observes and scales per Deployment)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.target import (
    VariantSpec,
    object_to_spec,
    spec_to_object,
    target_spec_from_dict,
    target_spec_to_dict,
    variant_target,
)
from tests.deploy.manifests import DEPLOY, crd_validator, load_docs

REF = TargetRef("llm", "chat")
VARIANTS: list[dict[str, Any]] = [
    {
        "name": "h100",
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm-llama3-8b"},
        "costPerReplicaHour": 4.0,
        "capacityPerReplica": 58.7,
        "maxReplicas": 8,
        "maxModelLen": 131072,
    },
    {
        "name": "mig-2g20gb",
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm-llama3-8b-mig"},
        "costPerReplicaHour": 1.33,
        "minReplicas": 1,
        "maxModelLen": 8192,
    },
]


def _doc(variants: Any) -> dict[str, Any]:
    return {
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm-llama3-8b"},
        "policy": {"maxReplicaCount": 8},
        "variants": variants,
    }


def _crd() -> dict[str, Any]:
    (crd,) = load_docs(DEPLOY / "base" / "crd.yaml")
    return crd


def test_variants_survive_both_encodings_and_the_crd_accepts_them() -> None:
    spec = target_spec_from_dict(_doc(VARIANTS), ref=REF)
    assert [v.name for v in spec.variants] == ["h100", "mig-2g20gb"]
    assert spec.variants[1] == VariantSpec(
        name="mig-2g20gb",
        scale_target_ref=spec.variants[1].scale_target_ref,
        cost_per_replica_hour=1.33,
        min_replicas=1,
        max_model_len=8192,
    )
    assert spec.variants[0].capacity_per_replica == 58.7
    again = target_spec_from_dict(target_spec_to_dict(spec), ref=REF)
    assert again.variants == spec.variants
    obj = spec_to_object(spec)
    assert not [e.message for e in crd_validator(_crd()).iter_errors(obj)]
    assert object_to_spec(obj).variants == spec.variants
    # not a policy field: the policy document is the same without them
    assert object_to_spec(obj).policy == target_spec_from_dict(_doc(None), ref=REF).policy


def test_a_target_without_variants_is_written_as_before() -> None:
    spec = target_spec_from_dict(_doc(None), ref=REF)
    assert spec.variants == ()
    assert "variants" not in target_spec_to_dict(spec)
    assert "variants" not in spec_to_object(spec)["spec"]


def _with(i: int, **fields: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(VARIANTS)
    for k, v in fields.items():
        if v is None:
            out[i].pop(k, None)
        else:
            out[i][k] = v
    return out


@pytest.mark.parametrize(
    ("variants", "message"),
    [
        ("h100", "variants: value 'h100' must be a list of variants"),
        (
            _with(0, costPerReplicaHour=0),
            "variants[0].costPerReplicaHour: value 0 must be a number > 0",
        ),
        (
            _with(0, costPerReplicaHour=None),
            "variants[0].costPerReplicaHour: value None must be a number > 0",
        ),
        (
            _with(1, capacityPerReplica=True),
            "variants[1].capacityPerReplica: value True must be a number > 0",
        ),
        (_with(1, minReplicas=-1), "variants[1].minReplicas: value -1 must be an integer >= 0"),
        (_with(1, maxReplicas=0), "variants[1].maxReplicas: value 0 must be >= minReplicas (1)"),
        (_with(0, maxModelLen=0), "variants[0].maxModelLen: value 0 must be an integer >= 1"),
        (_with(0, name="H100"), "variants[0].name: value 'H100' must be a DNS label"),
        (_with(1, name="h100"), "variants[1].name: value 'h100' must be unique among the variants"),
        (
            _with(1, scaleTargetRef={"kind": "Deployment", "name": "vllm-llama3-8b"}),
            "variants[1].scaleTargetRef.name: value 'vllm-llama3-8b' is another variant's target",
        ),
        (
            _with(0, scaleTargetRef={"kind": "Pod", "name": "x"}),
            "variants[0].scaleTargetRef.kind: value 'Pod' must be one of Deployment, StatefulSet",
        ),
        (_with(0, gpu="h100"), "variants[0].gpu: unknown field"),
        ([1], "variants[0]: value 1 must be an object"),
    ],
)
def test_bad_variants_are_refused_naming_field_value_and_rule(variants: Any, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        target_spec_from_dict(_doc(variants), ref=REF)
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems
    # the custom resource names the same problem under spec.
    obj = spec_to_object(target_spec_from_dict(_doc(None), ref=REF))
    obj["spec"]["variants"] = variants
    with pytest.raises(ConfigError) as err:
        object_to_spec(obj)
    assert any(p.startswith(f"spec.{message}") for p in err.value.problems), err.value.problems


def test_the_crd_refuses_what_the_codec_refuses_on_one_field() -> None:
    obj = spec_to_object(target_spec_from_dict(_doc(VARIANTS), ref=REF))
    v = crd_validator(_crd())
    for field, value in (
        ("costPerReplicaHour", 0),
        ("minReplicas", -1),
        ("maxModelLen", 0),
        ("name", "H100"),
    ):
        bad = copy.deepcopy(obj)
        bad["spec"]["variants"][0][field] = value
        assert list(v.iter_errors(bad)), field
    missing = copy.deepcopy(obj)
    del missing["spec"]["variants"][0]["costPerReplicaHour"]
    assert list(v.iter_errors(missing))


def test_a_variant_target_is_its_deployment_with_its_own_selector_and_gpu_resource() -> None:
    doc = {
        "scaleTargetRef": {"kind": "Deployment", "name": "vllm-llama3-8b"},
        "selector": {"app": "llama"},
        "policy": {"capacity": {"gpuResource": "nvidia.com/gpu"}},
        "variants": VARIANTS,
    }
    spec = target_spec_from_dict(doc, ref=REF)
    mig = variant_target(spec, spec.variants[1])
    assert mig.ref == TargetRef("llm", "chat/mig-2g20gb")  # kept apart per Deployment
    assert mig.scale_target_ref.name == "vllm-llama3-8b-mig"
    assert mig.selector is None and mig.variants == ()
    # the MIG Deployment requests nvidia.com/mig-2g.20gb: its own template decides
    assert mig.policy.capacity.gpu_resource is None
    assert spec.policy.capacity.gpu_resource == "nvidia.com/gpu"  # the target unchanged
    assert mig.policy.metrics == spec.policy.metrics


def test_the_status_carries_per_variant_rows_and_a_summary_and_drops_them_when_removed() -> None:
    from autoscaler.domain import Decision, Reason
    from autoscaler.target_status import VariantStatus, status_body

    decision = Decision(1.0, 4, 5, Reason.SCALE_UP, "scale up 4 -> 5", True)
    rows = (
        VariantStatus("h100", 1, 2, 1, 0, 0, 4.0, free_slots=3),
        VariantStatus("mig", 3, 3, 3, 0, 0, 1.33, free_slots=0, blocked="no free slot"),
    )
    status = status_body(decision, now_rfc3339="t", variants=rows)
    assert status["variantSummary"] == "h100=2,mig=3"
    assert status["variants"][1] == {
        "name": "mig",
        "replicas": 3,
        "desiredReplicas": 3,
        "readyReplicas": 3,
        "pendingReplicas": 0,
        "unschedulableReplicas": 0,
        "cost": 1.33,
        "freeSlots": 0,
        "blocked": "no free slot",
    }
    assert "variants" not in status_body(decision, now_rfc3339="t")  # a plain target
    cleared = status_body(decision, now_rfc3339="t", variants=None)
    assert cleared["variants"] is None and cleared["variantSummary"] is None  # merge: delete


# ------------------------------------------------------------ prefill/decode roles
ROLE_VARIANTS: list[dict[str, Any]] = [
    {
        "name": "prefill-h100",
        "scaleTargetRef": {"kind": "Deployment", "name": "llama-prefill"},
        "costPerReplicaHour": 4.0,
        "role": "prefill",
    },
    {
        "name": "decode-h100",
        "scaleTargetRef": {"kind": "Deployment", "name": "llama-decode"},
        "costPerReplicaHour": 4.0,
        "role": "decode",
    },
]
ROLES_BLOCK: dict[str, Any] = {
    "promptTokensPerSecondPerPrefill": 2000,
    "runningPerDecode": 16,
    "kvUsageTarget": 0.7,
    "ttftSloSeconds": 0.5,
    "itlSloSeconds": 0.05,
    "ratioBand": {"min": 0.5, "max": 2},
}


def _roles_doc(variants: Any, roles: Any) -> dict[str, Any]:
    doc = _doc(variants)
    if roles is not None:
        doc["roles"] = roles
    return doc


def test_roles_survive_both_encodings_and_the_crd_accepts_them() -> None:
    from autoscaler.target import RolesSpec

    spec = target_spec_from_dict(_roles_doc(ROLE_VARIANTS, ROLES_BLOCK), ref=REF)
    assert [v.role for v in spec.variants] == ["prefill", "decode"]
    assert spec.roles == RolesSpec(
        prompt_tokens_per_s_per_prefill=2000.0,
        running_per_decode=16.0,
        kv_usage_target=0.7,
        ttft_slo_s=0.5,
        itl_slo_s=0.05,
        ratio_band=(0.5, 2.0),
    )
    again = target_spec_from_dict(target_spec_to_dict(spec), ref=REF)
    assert (again.variants, again.roles) == (spec.variants, spec.roles)
    obj = spec_to_object(spec)
    assert not [e.message for e in crd_validator(_crd()).iter_errors(obj)]
    back = object_to_spec(obj)
    assert (back.variants, back.roles) == (spec.variants, spec.roles)
    # the smallest block: kvUsageTarget defaults to 0.8, no SLOs, no band
    small = target_spec_from_dict(
        _roles_doc(ROLE_VARIANTS, {"promptTokensPerSecondPerPrefill": 1, "runningPerDecode": 2}),
        ref=REF,
    )
    assert small.roles is not None and small.roles.kv_usage_target == 0.8
    assert small.roles.ratio_band is None and small.roles.ttft_slo_s is None


def _role_with(i: int, role: Any) -> list[dict[str, Any]]:
    out = copy.deepcopy(ROLE_VARIANTS)
    if role is None:
        out[i].pop("role")
    else:
        out[i]["role"] = role
    return out


@pytest.mark.parametrize(
    ("variants", "roles", "message"),
    [
        (
            _role_with(0, "both"),
            ROLES_BLOCK,
            "variants[0].role: value 'both' must be one of prefill, decode",
        ),
        (
            _role_with(1, "prefill"),
            ROLES_BLOCK,
            "variants: roles ['prefill'] must come as a pair: at least one prefill and one "
            "decode variant (no decode variant)",
        ),
        (
            [*ROLE_VARIANTS, VARIANTS[1]],
            ROLES_BLOCK,
            "variants[2].role: absent while other variants carry a role; roles must not mix",
        ),
        (ROLE_VARIANTS, None, "roles: required when variants carry a role"),
        (VARIANTS, ROLES_BLOCK, "roles: value {"),
        (
            ROLE_VARIANTS,
            {**ROLES_BLOCK, "promptTokensPerSecondPerPrefill": 0},
            "roles.promptTokensPerSecondPerPrefill: value 0 must be a number > 0",
        ),
        (
            ROLE_VARIANTS,
            {**ROLES_BLOCK, "runningPerDecode": None},
            "roles.runningPerDecode: value None must be a number > 0",
        ),
        (
            ROLE_VARIANTS,
            {**ROLES_BLOCK, "kvUsageTarget": 1.5},
            "roles.kvUsageTarget: value 1.5 must be a number in (0, 1]",
        ),
        (
            ROLE_VARIANTS,
            {**ROLES_BLOCK, "ttftSloSeconds": -1},
            "roles.ttftSloSeconds: value -1 must be a number > 0",
        ),
        (
            ROLE_VARIANTS,
            {**ROLES_BLOCK, "ratioBand": {"min": 3, "max": 1}},
            "roles.ratioBand.min: value 3 must be <= max (1)",
        ),
        (
            ROLE_VARIANTS,
            {**ROLES_BLOCK, "ratioBand": {"min": 0, "max": 1}},
            "roles.ratioBand.min: value 0 must be a number > 0",
        ),
        (ROLE_VARIANTS, {**ROLES_BLOCK, "ratio": 1}, "roles.ratio: unknown field"),
    ],
)
def test_bad_roles_are_refused_naming_field_value_and_rule(
    variants: Any, roles: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        target_spec_from_dict(_roles_doc(variants, roles), ref=REF)
    assert any(p.startswith(message) for p in err.value.problems), err.value.problems
    obj = spec_to_object(target_spec_from_dict(_doc(None), ref=REF))
    obj["spec"]["variants"] = variants
    if roles is not None:
        obj["spec"]["roles"] = roles
    with pytest.raises(ConfigError) as err:
        object_to_spec(obj)
    assert any(p.startswith(f"spec.{message}") for p in err.value.problems), err.value.problems


def test_the_crd_refuses_a_bad_role_and_bad_role_targets() -> None:
    obj = spec_to_object(target_spec_from_dict(_roles_doc(ROLE_VARIANTS, ROLES_BLOCK), ref=REF))
    v = crd_validator(_crd())
    bad = copy.deepcopy(obj)
    bad["spec"]["variants"][0]["role"] = "both"
    assert list(v.iter_errors(bad))
    for field, value in (("runningPerDecode", 0), ("kvUsageTarget", 1.5)):
        bad = copy.deepcopy(obj)
        bad["spec"]["roles"][field] = value
        assert list(v.iter_errors(bad)), field
    missing = copy.deepcopy(obj)
    del missing["spec"]["roles"]["promptTokensPerSecondPerPrefill"]
    assert list(v.iter_errors(missing))


def test_the_status_of_a_target_with_roles_sums_rows_per_role_and_fits_the_crd() -> None:
    from autoscaler.control.adapters import roles_condition
    from autoscaler.domain import Decision, Reason
    from autoscaler.target_status import Condition, VariantStatus, status_body

    decision = Decision(1.0, 4, 5, Reason.SCALE_UP, "prefill 2 -> 3", True)
    rows = (
        VariantStatus("prefill-h100", 3, 3, 2, 1, 1, 4.0, role="prefill"),
        VariantStatus("decode-h100", 1, 1, 1, 0, 0, 4.0, role="decode"),
        VariantStatus("decode-mig", 1, 1, 1, 0, 0, 1.33, role="decode"),
    )
    notes = ("prefill: 1 pod(s) Pending, not growing", "decode: rate-limited")
    held = roles_condition(("prefill: prompt-token rate missing, holding",))
    assert (held.status, held.reason) == ("False", "RoleHeld")
    cond = roles_condition(notes)
    assert (cond.status, cond.reason) == ("True", "RolesDeciding")
    assert cond.message == "; ".join(notes)
    status = status_body(
        decision,
        now_rfc3339="2026-01-01T00:00:00Z",
        variants=rows,
        conditions=(cond, Condition("Ready", "True", "Ready", "ok")),
    )
    assert status["variantSummary"] == "P:prefill-h100=3,D:decode-h100=1,D:decode-mig=1"
    assert status["variants"][0]["role"] == "prefill"
    assert status["roles"] == [
        {
            "role": "prefill",
            "replicas": 3,
            "desiredReplicas": 3,
            "readyReplicas": 2,
            "unschedulableReplicas": 1,
        },
        {
            "role": "decode",
            "replicas": 2,
            "desiredReplicas": 2,
            "readyReplicas": 2,
            "unschedulableReplicas": 0,
        },
    ]
    obj = spec_to_object(target_spec_from_dict(_roles_doc(ROLE_VARIANTS, ROLES_BLOCK), ref=REF))
    obj["status"] = status
    assert not [e.message for e in crd_validator(_crd()).iter_errors(obj)]
    # plain variants: no roles rows
    plain = (VariantStatus("h100", 1, 1, 1, 0, 0, 4.0),)
    assert "roles" not in status_body(decision, now_rfc3339="t", variants=plain)
