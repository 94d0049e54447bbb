"""The LLMAutoscaler CRD on a real API server: CEL rules (1.24 with the feature gate),
defaults and printer columns, REST writes that keep metadata, observedGeneration."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.kube.crd import API_VERSION, object_to_spec
from autoscaler.policy.schema import load_policy
from autoscaler.store.crd import CrdPolicyStore
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
    created = await kube.create(llmas("llama", namespace))
    assert created["spec"]["mode"] == "direct"
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers"
    table = await _as_table(kube, path)
    names = [c["name"] for c in table["columnDefinitions"]]
    for column in ("Target", "Min", "Max", "Mode", "Ready", "Active"):
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
