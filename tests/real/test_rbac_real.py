"""The shipped RBAC on a real API server, as the controller's ServiceAccount: reads
everywhere, workload writes only in namespaces opted in with a RoleBinding."""

from __future__ import annotations

import pytest

from tests.real.conftest import CONTROLLER_USER, vllm_deployment
from tests.real.controlplane import ControlPlane
from tests.real.kubectl import Kube, KubeError


async def _status(k: Kube, method: str, path: str, body: dict[str, object] | None) -> int:
    ctype = "application/merge-patch+json" if method == "PATCH" else "application/json"
    try:
        await k.request(method, path, body, content_type=ctype)
    except KubeError as err:
        return err.status
    return 200  # any 2xx


@pytest.mark.parametrize("opted_in", [True, False])
async def test_workload_writes_need_the_opt_in_rolebinding(
    kube: Kube, namespace: str, control_plane: ControlPlane, opted_in: bool
) -> None:
    ns = namespace
    if not opted_in:
        await kube.request(
            "DELETE",
            f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings/llm-autoscaler-scaler",
        )
    await kube.apply(vllm_deployment("llama", ns))
    async with Kube(control_plane.url, control_plane.tokens[CONTROLLER_USER]) as sa:
        scale = f"/apis/apps/v1/namespaces/{ns}/deployments/llama/scale"
        assert await _status(sa, "GET", scale, None) == 200  # reads: cluster-wide
        assert await _status(sa, "GET", f"/api/v1/namespaces/{ns}/pods", None) == 200
        patched = await _status(sa, "PATCH", scale, {"spec": {"replicas": 2}})
        warm = vllm_deployment("llama-warm-pool", ns)
        created = await _status(sa, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", warm)
        elsewhere = await _status(
            sa,
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            vllm_deployment("x", "default"),
        )
    assert (patched, created) == ((200, 200) if opted_in else (403, 403))
    assert elsewhere == 403  # never cluster-wide
