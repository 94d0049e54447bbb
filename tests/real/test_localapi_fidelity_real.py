"""What the local API endpoint's fidelity tests (tests/kube/test_localapi.py) assert, checked
against the real server: the two must agree, or the local tier proves nothing."""

from __future__ import annotations

from tests.real.kubectl import STRATEGIC, Kube, KubeError
from tests.support.workloads import deployment


def _dep(name: str, namespace: str, replicas: int = 1) -> dict[str, object]:
    body = deployment(name, replicas=replicas, namespace=namespace)
    return {"apiVersion": "apps/v1", "kind": "Deployment", **body}


async def test_a_bare_replace_drops_labels_keeps_uid_and_bumps_generation(
    kube: Kube, namespace: str
) -> None:
    dep = _dep("llm", namespace)
    dep["metadata"]["labels"] = {"team": "search"}  # type: ignore[index]
    created = await kube.create(dep)
    body = _dep("llm", namespace, replicas=2)
    path = await kube.path_for(body)
    # The real deployment controller writes the new object right after the create (status,
    # the revision annotation), so the create's resourceVersion may already be stale: a 409
    # there is optimistic concurrency working, not what this test is about. Replace as of
    # the object's current resourceVersion, re-read on a conflict (a few times at most).
    for attempt in range(5):
        current = created if attempt == 0 else await kube.get(path)
        body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]  # type: ignore[index]
        try:
            got = await kube.request("PUT", path, body)
            break
        except KubeError as err:
            if err.status != 409 or attempt == 4:
                raise
    assert "labels" not in got["metadata"]
    assert got["metadata"]["uid"] == created["metadata"]["uid"]
    assert got["metadata"]["generation"] == 2


async def test_strategic_merge_patch_merges_containers_by_name(kube: Kube, namespace: str) -> None:
    dep = _dep("llm", namespace)
    dep["spec"]["template"]["spec"]["containers"].append({"name": "sidecar", "image": "s"})  # type: ignore[index]
    await kube.create(dep)
    path = await kube.path_for(dep)
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "v2"}]}}}}
    got = await kube.request("PATCH", path, patch, content_type=STRATEGIC)
    containers = got["spec"]["template"]["spec"]["containers"]
    assert [(c["name"], c["image"]) for c in containers] == [("vllm", "v2"), ("sidecar", "s")]
    delete = {
        "spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}
    }
    got = await kube.request("PATCH", path, delete, content_type=STRATEGIC)
    assert [c["name"] for c in got["spec"]["template"]["spec"]["containers"]] == ["vllm"]


async def test_field_selectors_are_per_resource(kube: Kube, namespace: str) -> None:
    await kube.get(f"/api/v1/namespaces/{namespace}/events", fieldSelector="involvedObject.uid=x")
    try:
        await kube.get(f"/api/v1/namespaces/{namespace}/pods", fieldSelector="involvedObject.uid=x")
    except KubeError as err:
        assert err.status == 400
    else:
        raise AssertionError("pods accepted an events-only field selector")
