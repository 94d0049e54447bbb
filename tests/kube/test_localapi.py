"""The local API endpoint's own semantics, through kubernetes-asyncio over a socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.localapi.patch import json_patch, merge_patch
from autoscaler.kube.localapi.selectors import SelectorError, parse_label_selector
from autoscaler.kube.rbac import REQUIRED_RULES, allowed
from tests.kube.conftest import ALL_CALLS
from tests.support.workloads import deployment


def test_label_selector_operators() -> None:
    sel = parse_label_selector("app=llm,tier!=batch,zone in (a, b),gpu,!spot,env notin (dev)")
    assert sel({"app": "llm", "zone": "a", "gpu": "h100", "env": "prod"})
    assert not sel({"app": "llm", "zone": "c", "gpu": "h100"})
    assert not sel({"app": "llm", "zone": "a", "gpu": "h100", "spot": "1"})
    assert not sel({"app": "llm", "zone": "a", "gpu": "h100", "tier": "batch"})
    assert not sel({"app": "llm", "zone": "a", "gpu": "h100", "env": "dev"})
    with pytest.raises(SelectorError):
        parse_label_selector("app in app")


def test_patches_follow_rfc7386_and_rfc6902() -> None:
    doc = {"spec": {"replicas": 1, "paused": True}, "metadata": {"name": "x"}}
    assert merge_patch(doc, {"spec": {"replicas": 3, "paused": None}}) == {
        "spec": {"replicas": 3},
        "metadata": {"name": "x"},
    }
    ops = [
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 2},
    ]
    assert json_patch(doc, ops)["spec"]["replicas"] == 2


async def test_not_found_is_a_status_object(kapi: LocalKubeAPI, kclient: ApiClient) -> None:
    with pytest.raises(ApiException) as err:
        await client.AppsV1Api(kclient).read_namespaced_deployment_scale("nope", "default")
    body = json.loads(err.value.body)
    assert err.value.status == 404
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "NotFound", 404)
    assert body["message"] == 'deployments.apps "nope" not found'


async def test_negative_replicas_is_422_and_json_patch_works(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm"), "apps")
    apps = client.AppsV1Api(kclient)
    with pytest.raises(ApiException) as err:
        await apps.patch_namespaced_deployment_scale(
            "llm", "default", [{"op": "replace", "path": "/spec/replicas", "value": -1}]
        )
    assert err.value.status == 422
    scale = await apps.patch_namespaced_deployment_scale(
        "llm", "default", [{"op": "replace", "path": "/spec/replicas", "value": 4}]
    )
    assert scale.spec.replicas == 4


async def test_stale_replace_is_409_and_create_twice_is_already_exists(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create(
        "leases",
        {"metadata": {"name": "l", "namespace": "default"}, "spec": {}},
        "coordination.k8s.io",
    )
    coord = client.CoordinationV1Api(kclient)
    lease = await coord.read_namespaced_lease("l", "default")
    await coord.replace_namespaced_lease("l", "default", lease)
    with pytest.raises(ApiException) as err:
        await coord.replace_namespaced_lease("l", "default", lease)  # old resourceVersion
    assert (err.value.status, json.loads(err.value.body)["reason"]) == (409, "Conflict")
    with pytest.raises(ApiException) as err:
        await coord.create_namespaced_lease("default", {"metadata": {"name": "l"}, "spec": {}})
    assert json.loads(err.value.body)["reason"] == "AlreadyExists"


async def test_deployment_controller_creates_and_removes_pods() -> None:
    async with LocalKubeAPI(port=0, controller=True) as api:
        api.create("deployments", deployment("llm", replicas=3), "apps")
        assert len(api.list_objects("pods", "default")) == 3
        dep = api.get("deployments", "default", "llm", "apps")
        assert dep is not None
        dep["spec"]["replicas"] = 1
        api.update("deployments", dep, "apps")
        assert len(api.list_objects("pods", "default")) == 1


def test_rbac_rules_cover_every_call_the_suite_made() -> None:
    """Complements the per-test teardown check: the union over the tests run so far."""
    for call in ALL_CALLS:
        assert allowed(call.group, call.resource, call.verb), call
    assert all(r.verbs for r in REQUIRED_RULES)


# Fidelity tests call what a user or kubectl would, not only what the controller may (no
# RBAC check at teardown, unlike the `kapi` fixture).
@pytest.fixture
async def raw() -> AsyncIterator[tuple[LocalKubeAPI, ApiClient]]:
    async with LocalKubeAPI(port=0) as api, api_client_for(api.url) as kclient:
        yield api, kclient


async def test_event_field_selector_on_involved_object_uid_as_the_real_server(
    raw: tuple[LocalKubeAPI, ApiClient],
) -> None:
    kapi, kclient = raw
    core = client.CoreV1Api(kclient)
    for uid in ("u-1", "u-2"):
        kapi.create(
            "events",
            {
                "metadata": {"name": f"e-{uid}", "namespace": "default"},
                "involvedObject": {"kind": "Deployment", "name": "llm", "uid": uid},
                "reason": "ScaledUp",
            },
        )
    found = await core.list_namespaced_event("default", field_selector="involvedObject.uid=u-2")
    assert [e.metadata.name for e in found.items] == ["e-u-2"]
    # A path the real server does not index for pods is a 400, as there.
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod("default", field_selector="involvedObject.uid=u-2")
    assert err.value.status == 400


async def test_strategic_merge_patch_merges_containers_by_name_as_the_real_server(
    raw: tuple[LocalKubeAPI, ApiClient],
) -> None:
    kapi, kclient = raw
    dep = deployment("llm")
    dep["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s"})
    kapi.create("deployments", dep, "apps")
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "v2"}]}}}}
    apps = client.AppsV1Api(kclient)
    await apps.patch_namespaced_deployment(
        "llm", "default", patch, _content_type="application/strategic-merge-patch+json"
    )
    got = kapi.get("deployments", "default", "llm", "apps")
    assert got is not None
    containers = got["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("vllm", "v2"), ("sidecar", "s")]
    delete = {
        "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}
    }
    await apps.patch_namespaced_deployment(
        "llm", "default", delete, _content_type="application/strategic-merge-patch+json"
    )
    got = kapi.get("deployments", "default", "llm", "apps")
    assert got is not None
    assert [c["name"] for c in got["spec"]["template"]["spec"]["containers"]] == ["vllm"]


async def test_a_bare_replace_drops_labels_as_the_real_server(
    raw: tuple[LocalKubeAPI, ApiClient],
) -> None:
    kapi, kclient = raw
    dep = deployment("llm")
    dep["metadata"]["labels"] = {"team": "search"}
    created = kapi.create("deployments", dep, "apps")
    body = deployment("llm", replicas=2)
    body["metadata"]["resourceVersion"] = created["metadata"]["resourceVersion"]
    await client.AppsV1Api(kclient).replace_namespaced_deployment("llm", "default", body)
    got = kapi.get("deployments", "default", "llm", "apps")
    assert got is not None
    assert "labels" not in got["metadata"]  # so a writer must send the stored metadata back
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["metadata"]["generation"] == 2


async def test_list_pages_with_limit_and_continue_as_of_the_first_page(kapi: LocalKubeAPI) -> None:
    for i in range(5):
        kapi.create(
            "pods",
            {"metadata": {"name": f"p{i}", "namespace": "default"}, "spec": {"containers": []}},
        )
    rt = kapi.resource("pods")
    first = kapi._list(rt, None, {"limit": "2"})
    assert [o["metadata"]["name"] for o in first["items"]] == ["p0", "p1"]
    token = first["metadata"]["continue"]
    kapi.create("pods", {"metadata": {"name": "p9", "namespace": "default"}, "spec": {}})
    second = kapi._list(rt, None, {"limit": "2", "continue": token})
    assert [o["metadata"]["name"] for o in second["items"]] == ["p2", "p3"]
    assert second["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
    last = kapi._list(rt, None, {"limit": "10", "continue": second["metadata"]["continue"]})
    assert [o["metadata"]["name"] for o in last["items"]] == ["p4", "p9"]
    assert "continue" not in last["metadata"]
    everything = kapi._list(rt, None, {})
    assert len(everything["items"]) == 6 and "continue" not in everything["metadata"]
