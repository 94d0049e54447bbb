"""The real-Kubernetes tier: one control plane (etcd, kube-apiserver 1.24 with RBAC and the
CEL feature gate, kube-controller-manager, kube-scheduler) for the whole session.

Skipped, with the reason shown in the test summary (``pytest -rs``, as ``make test`` runs
it), when the binaries are not found (see `controlplane.find_binaries`). At start it
installs the upstream CRDs kept in ``tests/fixtures/crds`` and applies ``deploy/base``,
so every test sees the cluster as an operator would after ``kubectl apply -k``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.config import load_api_client
from tests.deploy.manifests import DEPLOY, ROOT, load_docs, render
from tests.real.controlplane import ControlPlane, find_binaries, service_account_user
from tests.real.kubectl import Kube
from tests.support.fake_kubelet import FakeKubelet

CRDS = ROOT / "tests" / "fixtures" / "crds"
CONTROLLER_NS = "llm-autoscaler"
CONTROLLER_SA = "llm-autoscaler"
CONTROLLER_USER = service_account_user(CONTROLLER_NS, CONTROLLER_SA)
GPU_TAINT = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
# CRDs the 1.24 API server does not load (newer CEL functions); validated with jsonschema.
NOT_LOADABLE_ON_124: dict[str, str] = {}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.real)


async def install(cp: ControlPlane) -> None:
    """Upstream CRDs, then deploy/base, as the admin."""
    async with Kube(cp.url, cp.tokens["admin"]) as k:
        for path in sorted(CRDS.glob("*.yaml")):
            for crd in load_docs(path):
                try:
                    await k.apply(crd)
                except Exception as err:
                    NOT_LOADABLE_ON_124[crd["metadata"]["name"]] = str(err)
                    continue
                await k.wait_established(crd["metadata"]["name"])
        for obj in render(DEPLOY / "base"):
            await k.apply(obj)
            if obj["kind"] == "CustomResourceDefinition":
                await k.wait_established(obj["metadata"]["name"])


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    bins = find_binaries()
    if isinstance(bins, str):
        pytest.skip(bins)
    cp = ControlPlane(bins, service_accounts=((CONTROLLER_NS, CONTROLLER_SA),))
    try:
        cp.start()
        asyncio.run(install(cp))
        yield cp
    finally:
        cp.stop()


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[Kube]:
    """Admin access over plain HTTP (apply, dry-run, raw reads)."""
    async with Kube(control_plane.url, control_plane.tokens["admin"]) as k:
        yield k


@pytest.fixture
async def admin_api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    api = await load_api_client(str(control_plane.kubeconfig_for("admin")))
    async with api:
        yield api


@pytest.fixture
async def controller_api(control_plane: ControlPlane) -> AsyncIterator[ApiClient]:
    """The controller's ServiceAccount, through a kubeconfig (as ``run --kubeconfig``)."""
    api = await load_api_client(str(control_plane.kubeconfig_for(CONTROLLER_USER)))
    async with api:
        yield api


_namespaces = iter(range(1, 10_000))


@pytest.fixture
async def namespace(kube: Kube) -> AsyncIterator[str]:
    """A fresh namespace per test, opted in to scaling (RoleBinding to the scaler role)."""
    name = f"serving-{next(_namespaces)}"
    await kube.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    binding = load_docs(DEPLOY / "examples" / "opt-in-rolebinding.yaml")[0]
    binding["metadata"]["namespace"] = name
    await kube.apply(binding)
    yield name
    await kube.delete({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


_subnets = iter(range(10, 250))


@pytest.fixture
async def kubelet(admin_api: ApiClient) -> AsyncIterator[FakeKubelet]:
    subnet = next(_subnets)
    async with FakeKubelet(admin_api, f"gpu-node-{subnet}", subnet=subnet, taint=GPU_TAINT) as k:
        yield k


def vllm_deployment(
    name: str,
    namespace: str,
    replicas: int = 1,
    gpus: int = 1,
    port: int = 8000,
    resource: str = "nvidia.com/gpu",
) -> dict[str, Any]:
    """A vLLM-like Deployment whose pods land on a fake GPU node (``gpus`` of
    ``resource`` each: a full GPU, or a MIG profile such as nvidia.com/mig-2g.20gb)."""
    labels = {"app": name}
    res = {resource: str(gpus)}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "tolerations": [GPU_TAINT],
                    "terminationGracePeriodSeconds": 5,
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai",
                            "ports": [{"name": "http", "containerPort": port}],
                            "resources": {"limits": res, "requests": res},
                        }
                    ],
                },
            },
        },
    }
