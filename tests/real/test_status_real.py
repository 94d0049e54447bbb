"""The policy in use in an LLMAutoscaler's status, on kube-apiserver 1.24: the status
subresource keeps ``profile``, ``policyHash`` and the ``OverridesProfile`` condition
(structural pruning drops unknown status fields, not these), ``kubectl get`` shows the
Profile column (and the hash with ``-o wide``), a steady target is written once, and
what the pre-profiles CRD itself writes into a spec is what ``OverridesProfile`` names."""

from __future__ import annotations

from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.control.adapters import KubeCluster
from autoscaler.control.clock import FakeClock
from autoscaler.domain import Decision, Reason
from autoscaler.policy.document import policy_hash
from autoscaler.policy.profiles import cost_first, recommended
from autoscaler.policy.status import Override
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.target import API_VERSION, object_to_spec
from tests.fixtures import crd_before_profiles
from tests.real.kubectl import Kube

STEADY = Decision(1.0, 1, 1, Reason.STEADY, "steady at 1", True)


def bare(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": name}, **spec},
    }


async def _record(controller_api: ApiClient, namespace: str) -> CrdPolicyStore:
    """What the controller does at a tick: read the targets, record one decision each."""
    store = CrdPolicyStore(controller_api, namespace)
    cluster = KubeCluster(controller_api, status=store, clock=FakeClock())
    try:
        for stored in await store.list(namespace):
            await cluster.record(stored.spec, STEADY, applied=False)
    finally:
        await cluster.close()
    return store


async def _table(kube: Kube, namespace: str) -> dict[str, dict[str, Any]]:
    """``kubectl get llmas -o wide``: every column (priority 0 and 1), per object name."""
    assert kube._session is not None
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers"
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    async with kube._session.get(kube.url + path, headers={"Accept": accept}) as resp:
        assert resp.status == 200
        table = await resp.json()
    columns = table["columnDefinitions"]
    names = [c["name"] for c in columns]
    assert {c["name"]: c["priority"] for c in columns if c["name"] in ("Profile", "Policy")} == {
        "Profile": 0,  # in plain `kubectl get`
        "Policy": 1,  # with -o wide
    }
    return {
        row["object"]["metadata"]["name"]: dict(zip(names, row["cells"], strict=True))
        for row in table["rows"]
    }


async def test_the_status_subresource_keeps_the_profile_and_the_policy_hash(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    await kube.create(bare("plain", namespace))
    await kube.create(bare("cheap", namespace, profile="cost-first"))
    await _record(controller_api, namespace)
    plain = (await kube.read(bare("plain", namespace)))["status"]
    cheap = (await kube.read(bare("cheap", namespace)))["status"]
    assert (plain["profile"], plain["policyHash"]) == ("recommended", policy_hash(recommended()))
    assert (cheap["profile"], cheap["policyHash"]) == ("cost-first", policy_hash(cost_first()))
    assert plain["observedGeneration"] == 1
    rows = await _table(kube, namespace)
    assert (rows["plain"]["Profile"], rows["plain"]["Policy"]) == (
        "recommended",
        plain["policyHash"],
    )
    assert rows["cheap"]["Profile"] == "cost-first"


async def test_pruning_drops_unknown_status_fields_but_not_the_policy_ones(
    kube: Kube, namespace: str
) -> None:
    obj = bare("pruned", namespace)
    await kube.create(obj)
    path = await kube.path_for(obj)
    patch = {"status": {"profile": "cost-first", "policyHash": "0123456789ab", "bogus": 1}}
    await kube.request(
        "PATCH", path + "/status", patch, content_type="application/merge-patch+json"
    )
    status = (await kube.read(obj))["status"]
    assert "bogus" not in status  # the schema prunes what it does not declare
    assert (status["profile"], status["policyHash"]) == ("cost-first", "0123456789ab")


async def test_an_old_crd_default_over_the_profile_is_a_condition_on_the_object(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    # The spec the pre-profiles CRD stored for an object that set only its metrics.
    old = {
        "metrics": [{"signal": "waiting", "target": 4, "type": "AverageValue"}],
        "minReplicaCount": 1,
        "maxReplicaCount": 16,
        "cooldownPeriod": 300,
        "pollingInterval": 1,
        "allowFractionAverageValue": False,
    }
    await kube.create(bare("legacy", namespace, **old))
    await kube.create(bare("deliberate", namespace, **{**old, "maxReplicaCount": 24}))
    await _record(controller_api, namespace)
    legacy = (await kube.read(bare("legacy", namespace)))["status"]
    conditions = {c["type"]: c for c in legacy["conditions"]}
    cond = conditions["OverridesProfile"]
    assert (cond["status"], cond["reason"]) == ("True", "OldCRDDefault")
    assert "maxReplicaCount=16 (profile: 64)" in cond["message"]
    assert "if the old CRD wrote them, remove them" in cond["message"]
    assert cond["lastTransitionTime"]
    deliberate = (await kube.read(bare("deliberate", namespace)))["status"]
    assert "OverridesProfile" not in {c["type"] for c in deliberate["conditions"]}


async def test_a_second_tick_with_nothing_changed_writes_nothing(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    await kube.create(bare("steady", namespace))
    store = CrdPolicyStore(controller_api, namespace)
    cluster = KubeCluster(controller_api, status=store, clock=FakeClock())
    try:
        (stored,) = await store.list(namespace)
        await cluster.record(stored.spec, STEADY, applied=False)
        written = (await kube.read(bare("steady", namespace)))["metadata"]["resourceVersion"]
        (stored,) = await store.list(namespace)  # re-read, as after a watch restart
        await cluster.record(stored.spec, STEADY, applied=False)
    finally:
        await cluster.close()
    after = (await kube.read(bare("steady", namespace)))["metadata"]["resourceVersion"]
    assert after == written  # no status write: the object did not change


LEGACY_GROUP = "legacy.llmscaler.io"  # the old CRD, served apart from the current one


def _old_crd() -> dict[str, Any]:
    """deploy/base/crd.yaml before profiles (73d98bd^, the copy in tests/fixtures), moved
    to `LEGACY_GROUP`."""
    crd = crd_before_profiles()
    crd["spec"]["group"] = LEGACY_GROUP
    crd["metadata"]["name"] = f"{crd['spec']['names']['plural']}.{LEGACY_GROUP}"
    return crd


async def test_what_the_old_crd_wrote_into_a_spec_is_what_overrides_profile_names(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    """The old CRD on the same API server fills its defaults into a one-metric spec;
    that stored spec, moved to the current CRD, gets the condition naming exactly the
    field that changes what the target runs."""
    crd = _old_crd()
    await kube.apply(crd)
    try:
        await kube.wait_established(crd["metadata"]["name"])
        written = bare("upgraded", namespace, metrics=[{"signal": "waiting", "target": 4}])
        written["apiVersion"] = f"{LEGACY_GROUP}/v1alpha1"
        stored_by_old = (await kube.create(written))["spec"]
    finally:
        await kube.delete(crd)
    assert stored_by_old["maxReplicaCount"] == 16  # filled in by the old API server schema
    filled = set(stored_by_old) - {"scaleTargetRef", "metrics"}
    assert {"minReplicaCount", "cooldownPeriod", "pollingInterval"} <= filled

    moved = bare("upgraded", namespace)
    moved["spec"] = stored_by_old
    assert object_to_spec(moved).policy_status().overrides == (Override("maxReplicaCount", 16, 64),)
    await kube.create(moved)
    await _record(controller_api, namespace)
    status = (await kube.read(moved))["status"]
    (cond,) = [c for c in status["conditions"] if c["type"] == "OverridesProfile"]
    assert cond["status"] == "True"
    assert "maxReplicaCount=16 (profile: 64)" in cond["message"]
    for harmless in sorted(filled - {"maxReplicaCount"}):
        assert f"{harmless}=" not in cond["message"]  # the profile's own value: no effect
