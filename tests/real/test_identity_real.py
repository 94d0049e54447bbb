"""On a real API server the controller's writes are owned by its field manager
``llm-autoscaler`` in managedFields (kubernetes-asyncio would say ``OpenAPI-Generator``)."""

from __future__ import annotations

from kubernetes_asyncio.client import ApiClient

from autoscaler.errors import ConflictError
from autoscaler.kube.config import FIELD_MANAGER
from autoscaler.kube.scale import ScaleClient
from tests.real.conftest import vllm_deployment
from tests.real.kubectl import Kube


async def test_scale_patch_is_owned_by_the_llm_autoscaler_field_manager(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    await kube.apply(vllm_deployment("llama", namespace, replicas=1))
    sc = ScaleClient(controller_api)
    for _ in range(10):  # the deployment controller writes status meanwhile: re-read on 409
        info = await sc.get_scale("Deployment", namespace, "llama")
        try:
            await sc.set_replicas("Deployment", namespace, "llama", 2, info.resource_version)
            break
        except ConflictError:
            continue
    dep = await kube.get(f"/apis/apps/v1/namespaces/{namespace}/deployments/llama")
    owners = {
        e["manager"]: e
        for e in dep["metadata"]["managedFields"]
        if "f:replicas" in e.get("fieldsV1", {}).get("f:spec", {})
    }
    assert FIELD_MANAGER in owners, sorted(owners)
    assert owners[FIELD_MANAGER]["operation"] == "Update"
    assert not any(m.startswith("OpenAPI-Generator") for m in owners)
    assert dep["spec"]["replicas"] == 2
