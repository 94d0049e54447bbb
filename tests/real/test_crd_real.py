"""The LLMAutoscaler CRD on a real API server: CEL rules (1.24 with the feature gate),
defaults and printer columns, REST writes that keep metadata, observedGeneration, and
profile selection (the enum, no schema defaults over the profile's, nulls kept)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.policy.profiles import PROFILES, cost_first, recommended
from autoscaler.policy.schema import Behavior, MetricSpec, Policy, ScalingRules, load_policy
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.target import (
    API_VERSION,
    ScaleTargetRef,
    TargetSpec,
    object_to_spec,
    spec_to_object,
)
from tests.real.kubectl import Kube, KubeError


def llmas(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    body = {"scaleTargetRef": {"kind": "Deployment", "name": name}}
    body |= {"metrics": [{"signal": "waiting", "target": 4}], **spec}
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


INVALID = {
    "min above max": ({"minReplicaCount": 5, "maxReplicaCount": 2}, "minReplicaCount must be <="),
    "kv signal as AverageValue": (
        {"metrics": [{"signal": "kv_cache_usage", "target": 0.8, "type": "AverageValue"}]},
        "AverageValue on a fraction signal",
    ),
    "kv target above one": (
        {"metrics": [{"signal": "kv_cache_usage", "target": 2, "type": "Value"}]},
        "must be <= 1",
    ),
    "idle not below min": ({"idleReplicaCount": 2, "minReplicaCount": 2}, "idleReplicaCount"),
    "fallback above max": (
        {"maxReplicaCount": 2, "fallback": {"failureThreshold": 3, "replicas": 5}},
        "fallback.replicas",
    ),
    "scale to zero with an idle count above 0": (
        {"scaleToZero": {"enabled": True}, "minReplicaCount": 3, "idleReplicaCount": 1},
        "conflicts with idleReplicaCount",
    ),
    "warm pool min above max": (
        {"warmPool": {"minReplicas": 3, "maxReplicas": 1}},
        "warmPool.minReplicas",
    ),
}


@pytest.mark.parametrize("case", list(INVALID))
async def test_cel_rejects_what_the_controller_rejects(
    kube: Kube, namespace: str, case: str
) -> None:
    spec, message = INVALID[case]
    obj = llmas("bad", namespace, **spec)
    with pytest.raises(ConfigError):
        object_to_spec(obj)  # the controller's own check agrees
    with pytest.raises(KubeError) as err:
        await kube.create(obj)
    assert err.value.status == 422
    assert message in str(err.value)


async def test_defaults_fill_mode_and_the_printer_columns_show_it(
    kube: Kube, namespace: str
) -> None:
    created = await kube.create(llmas("llama", namespace, minReplicaCount=1, maxReplicaCount=16))
    assert created["spec"]["mode"] == "direct"
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers"
    table = await _as_table(kube, path)
    names = [c["name"] for c in table["columnDefinitions"]]
    for column in ("Target", "Min", "Max", "Mode", "Ready", "Active", "Profile"):
        assert column in names
    (row,) = table["rows"]
    cells = dict(zip(names, row["cells"], strict=True))
    assert (cells["Target"], cells["Min"], cells["Max"], cells["Mode"]) == (
        "llama",
        1,
        16,
        "direct",
    )


async def _as_table(kube: Kube, path: str) -> dict[str, Any]:
    assert kube._session is not None
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    async with kube._session.get(kube.url + path, headers={"Accept": accept}) as resp:
        assert resp.status == 200
        table: dict[str, Any] = await resp.json()
        return table


async def test_rest_writes_keep_labels_and_annotations(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    obj = llmas("llama", namespace)
    obj["metadata"]["labels"] = {"team": "search"}
    obj["metadata"]["annotations"] = {"owner": "alice@example.com"}
    await kube.create(obj)
    store = CrdPolicyStore(controller_api)
    ref = TargetRef(namespace, "llama")
    current = await store.get(ref)
    policy = load_policy({**current.spec.policy.dump(), "maxReplicaCount": 6})
    stored = await store.put(replace(current.spec, policy=policy), if_match=current.version)
    await store.put(
        replace(stored.spec, policy=load_policy({**policy.dump(), "maxReplicaCount": 7}))
    )
    after = await kube.read(obj)
    assert after["spec"]["maxReplicaCount"] == 7
    assert after["metadata"]["labels"] == {"team": "search"}
    assert after["metadata"]["annotations"] == {"owner": "alice@example.com"}


async def test_status_records_the_generation_it_describes(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    obj = llmas("llama", namespace)
    await kube.create(obj)
    await kube.apply({**obj, "spec": {**obj["spec"], "maxReplicaCount": 9}})
    store = CrdPolicyStore(controller_api)
    await store.list(namespace)
    await store.write_status(TargetRef(namespace, "llama"), None)
    after = await kube.read(obj)
    assert after["metadata"]["generation"] == 2
    assert after["status"]["observedGeneration"] == 2


def bare(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """An LLMAutoscaler with no policy field but what ``spec`` sets."""
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": name}, **spec},
    }


async def test_unknown_profile_is_rejected_by_the_api_server(kube: Kube, namespace: str) -> None:
    obj = bare("bad", namespace, profile="cheap")
    with pytest.raises(ConfigError, match="profile: value 'cheap' must be one of"):
        object_to_spec(obj)  # the controller's own check agrees
    with pytest.raises(KubeError) as err:
        await kube.create(obj)
    assert err.value.status == 422
    assert "spec.profile" in str(err.value)
    for name in PROFILES:
        assert name in str(err.value)


async def test_an_object_without_policy_fields_runs_the_recommended_profile(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    created = await kube.create(bare("plain", namespace))
    # The API server fills no policy default (it would override the profile's values).
    assert set(created["spec"]) == {
        "scaleTargetRef",
        "mode",
        "metricsPort",
        "metricsPath",
        "engine",
    }
    stored = await CrdPolicyStore(controller_api).get(TargetRef(namespace, "plain"))
    assert stored.spec.policy == recommended()
    assert stored.spec.effective_policy()["profile"] == "recommended"


async def test_a_selected_profile_with_overrides_merges_per_field(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    await kube.create(
        bare(
            "cost",
            namespace,
            profile="cost-first",
            maxReplicaCount=12,
            behavior={
                "scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}
            },
        )
    )
    store = CrdPolicyStore(controller_api)
    stored = await store.get(TargetRef(namespace, "cost"))
    base = cost_first()
    assert base.behavior.scale_down is not None
    assert stored.spec.policy.metrics == base.metrics  # the profile's targets
    assert stored.spec.policy.max_replica_count == 12
    down = stored.spec.policy.behavior.scale_down
    assert down is not None  # deep merge: the profile's window, the object's rate policy
    assert (
        down.stabilization_window_seconds == base.behavior.scale_down.stabilization_window_seconds
    )
    assert down.policies is not None and down.policies[0].value == 1
    # A write through the store puts back the document, not the effective policy.
    await store.put(stored.spec, if_match=stored.version)
    after = await kube.read(bare("cost", namespace))
    assert after["spec"]["profile"] == "cost-first" and "metrics" not in after["spec"]


async def test_null_survives_the_api_server_and_turns_prediction_off(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    created = await kube.create(bare("noforecast", namespace, prediction=None))
    assert created["spec"]["prediction"] is None
    stored = await CrdPolicyStore(controller_api).get(TargetRef(namespace, "noforecast"))
    assert stored.spec.policy.prediction is None
    assert stored.spec.policy == recommended().model_copy(update={"prediction": None})


async def test_a_policy_built_in_code_round_trips_through_the_api_server(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    """No profile: every field written, unset ones as null, and the CEL rules accept it."""
    policy = Policy(
        max_replica_count=5,
        metrics=(MetricSpec(signal="waiting", target=3),),
        behavior=Behavior(scale_down=ScalingRules(stabilization_window_seconds=30)),
    )
    spec = TargetSpec(
        ref=TargetRef(namespace, "coded"),
        policy=policy,
        scale_target_ref=ScaleTargetRef(name="coded"),
    )
    await kube.create(spec_to_object(spec))
    stored = await CrdPolicyStore(controller_api).get(spec.ref)
    assert stored.spec.policy == policy
    assert stored.spec.policy.prediction is None


@pytest.mark.parametrize(
    "patch",
    [
        {"maxReplicaCount": "5"},
        {"maxReplicaCount": True},
        {"cooldownPeriod": "300"},
        {"engine": "bogus"},
        {"metricsPath": "/metrics\r\nX: 1"},
        {"pollingInterval": 5e-324},
    ],
)
async def test_rest_patches_the_crd_refuses_are_422_not_500(
    kube: Kube, namespace: str, controller_api: ApiClient, patch: dict[str, Any]
) -> None:
    import httpx

    from autoscaler.api.app import create_app
    from autoscaler.api.security import ApiSettings
    from autoscaler.control.state import ControllerState

    obj = llmas("llama", namespace)
    await kube.create(obj)
    app = create_app(ControllerState(), CrdPolicyStore(controller_api), ApiSettings("t"))
    auth = {"Authorization": "Bearer t"}
    url = f"/v1/targets/{namespace}/llama"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        policy_level = next(iter(patch)) not in ("engine", "metricsPath")
        body = {"policy": patch} if policy_level else patch
        r = await c.patch(url, json=body, headers=auth)
        assert r.status_code == 422, r.text
        assert any(next(iter(patch)) in p for p in r.json()["problems"])
        ok = await c.patch(url, json={"policy": {"maxReplicaCount": 5}}, headers=auth)
        assert ok.status_code == 200, ok.text
    assert (await kube.read(obj))["spec"]["maxReplicaCount"] == 5


async def test_the_api_servers_422_becomes_a_rejection_naming_the_field(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    from autoscaler.policy.document import PolicySource
    from autoscaler.store.errors import ClusterRejected

    # A document that skipped our validation (as an older controller might send it).
    source = PolicySource(document={"maxReplicaCount": "5"}, policy=load_policy({}))
    spec = TargetSpec.from_source(
        TargetRef(namespace, "raw"), source, scale_target_ref=ScaleTargetRef(name="raw")
    )
    with pytest.raises(ClusterRejected) as err:
        await CrdPolicyStore(controller_api).put(spec)
    assert any(p.startswith("maxReplicaCount:") for p in err.value.problems), err.value.problems
