"""The two install paths against a bare kube-apiserver 1.24 (no Prometheus Operator, no
KEDA unless the overlay needs it): every kustomize overlay applies, the monitoring
component is refused without its CRDs, and the Helm chart (rendered by Helm's Go SDK)
applies and its controller, under the chart's own ServiceAccount and RBAC, scales an
opted-in Deployment."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from autoscaler.app import Controller
from autoscaler.kube.config import load_api_client
from autoscaler.policy.status import PAUSED_REPLICAS_ANNOTATION
from autoscaler.settings import GrpcSettings, HttpSettings, Settings
from tests.deploy.chart import chart_crds, render_chart
from tests.deploy.manifests import (
    DEPLOY,
    MONITORED_OVERLAYS,
    OVERLAYS,
    UPSTREAM_CRDS,
    Obj,
    load_docs,
    render,
)
from tests.real.controlplane import ControlPlane, find_binaries, service_account_user
from tests.real.kubectl import MERGE_PATCH, Kube, KubeError
from tests.real.test_crd_real import llmas

CHART_RELEASE, CHART_NS = "chart", "llm-chart"
CHART_SA = f"{CHART_RELEASE}-llm-autoscaler"  # the chart's fullname for this release
CHART_USER = service_account_user(CHART_NS, CHART_SA)
SERVING = "serving-chart"  # the namespace the chart's values opt in


@pytest.fixture(scope="module")
def bare() -> Iterator[ControlPlane]:
    """A control plane of its own with nothing installed (the session's has CRDs)."""
    bins = find_binaries()
    if isinstance(bins, str):
        pytest.skip(bins)
    cp = ControlPlane(bins, service_accounts=((CHART_NS, CHART_SA),))
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()


@pytest.fixture
async def admin(bare: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube(bare.url, bare.tokens["admin"]) as k:
        yield k


async def _apply_all(kube: Kube, objs: list[Obj]) -> None:
    """As ``kubectl apply --server-side``: in order, each CRD established before use."""
    for obj in objs:
        await kube.apply(obj)
        if obj["kind"] == "CustomResourceDefinition":
            await kube.wait_established(obj["metadata"]["name"])


async def _keda_crds(kube: Kube) -> None:
    """The keda overlay's prerequisite (KEDA installed): its CRDs, nothing else."""
    await _apply_all(
        kube, [c for p in sorted(UPSTREAM_CRDS.glob("keda.sh_*.yaml")) for c in load_docs(p)]
    )


def test_kubectl_apply_k_direct_succeeds_on_the_bare_cluster(bare: ControlPlane) -> None:
    """The command docs/install.md gives, first thing on the bare cluster (the issue's
    three "no matches for kind" errors and exit 1 came from here)."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl not on PATH (the overlay itself is applied by the test above)")
    kubeconfig = bare.workdir / "admin.kubeconfig"
    run = subprocess.run(
        [kubectl, "--kubeconfig", str(kubeconfig), "apply", "-k",
         str(DEPLOY / "overlays" / "direct")],
        capture_output=True, text=True, timeout=120,
        env={**os.environ, "KUBECONFIG": str(kubeconfig)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr


@pytest.mark.parametrize("overlay", OVERLAYS)
async def test_every_overlay_applies_to_a_cluster_without_the_prometheus_operator(
    admin: Kube, overlay: str
) -> None:
    if overlay == "keda":
        await _keda_crds(admin)
    await _apply_all(admin, render(DEPLOY / "overlays" / overlay))
    dep = await admin.get("/apis/apps/v1/namespaces/llm-autoscaler/deployments/llm-autoscaler")
    assert dep["metadata"]["name"] == "llm-autoscaler"
    groups = {g["name"] for g in (await admin.get("/apis"))["groups"]}
    assert "monitoring.coreos.com" not in groups  # still bare: nothing needed it


@pytest.mark.parametrize("overlay", MONITORED_OVERLAYS)
async def test_the_monitoring_component_is_refused_without_the_operators_crds(
    admin: Kube, overlay: str
) -> None:
    monitoring = [
        o
        for o in render(DEPLOY / "overlays" / overlay)
        if o["apiVersion"].startswith("monitoring.")
    ]
    assert monitoring
    with pytest.raises((KubeError, KeyError)):
        await admin.apply(monitoring[0])


async def _blind_conditions(kube: Kube, target: Obj) -> dict[str, Obj]:
    for _ in range(100):
        obj = await kube.read(target)
        conds = {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}
        if conds.get("Fallback", {}).get("status") == "True":
            return conds
        await asyncio.sleep(0.2)
    raise AssertionError(f"no Fallback=True condition: {obj.get('status')}")


async def _table_row(cp: ControlPlane, target: Obj) -> dict[str, Any]:
    """``kubectl get llmas``: the server-side Table, columns by name."""
    meta = target["metadata"]
    url = f"{cp.url}/apis/{target['apiVersion']}/namespaces/{meta['namespace']}/llmautoscalers"
    headers = {
        "Authorization": f"Bearer {cp.tokens['admin']}",
        "Accept": "application/json;as=Table;v=v1;g=meta.k8s.io",
    }
    async with (
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=False)) as s,
        s.get(url, headers=headers) as resp,
    ):
        table = await resp.json()
    names = [c["name"] for c in table["columnDefinitions"]]
    (row,) = [r for r in table["rows"] if r["cells"][0] == meta["name"]]
    return dict(zip(names, row["cells"], strict=True))


def _chart_settings(objs: list[Obj]) -> Settings:
    """The settings the chart's pods would run with: its ConfigMap and its container env
    (local ports, the test's tick)."""
    (config,) = [o for o in objs if o["kind"] == "ConfigMap"]
    (dep,) = [o for o in objs if o["kind"] == "Deployment"]
    env = {
        e["name"]: e["value"]
        for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in e
    }
    return Settings(
        mode=config["data"]["AUTOSCALER_MODE"],
        shards=int(config["data"]["AUTOSCALER_SHARDS"]),
        lease_name=env["AUTOSCALER_LEASE_NAME"],
        lease_namespace=CHART_NS,
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=0.5,
        lease_duration_s=3.0,
    )


async def test_the_chart_installs_and_its_controller_scales_an_opted_in_deployment(
    bare: ControlPlane, admin: Kube
) -> None:
    values: dict[str, Any] = {"mode": "direct", "scaleNamespaces": [SERVING]}
    objs = render_chart(values, name=CHART_RELEASE, namespace=CHART_NS)
    for ns in (CHART_NS, SERVING):  # helm install --create-namespace; the opted-in one exists
        await admin.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await _apply_all(admin, chart_crds())  # helm installs crds/ first
    await _apply_all(admin, objs)

    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "llama", "namespace": SERVING},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "llama"}},
            "template": {
                "metadata": {"labels": {"app": "llama"}},
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
            },
        },
    }
    await admin.apply(dep)
    # No pod is ever read (no kubelet): after one failed read the fallback asks for 2.
    target = llmas(
        "llama", SERVING, maxReplicaCount=4, fallback={"failureThreshold": 1, "replicas": 2}
    )
    await admin.create(target)
    api = await load_api_client(str(bare.kubeconfig_for(CHART_USER)))
    async with api:
        ctl = Controller(_chart_settings(objs), api, identity="chart-a")
        await ctl.start()
        try:
            for _ in range(150):
                got = await admin.read(dep)
                if got["spec"]["replicas"] == 2:
                    break
                await asyncio.sleep(0.2)
            assert got["spec"]["replicas"] == 2, await admin.read(target)
            conds = await _blind_conditions(admin, target)
            blind_row = await _table_row(bare, target)
            # Pause at 3 (KEDA's paused-replicas): one write to 3, then nothing.
            await admin.request(
                "PATCH",
                await admin.path_for(target),
                {"metadata": {"annotations": {PAUSED_REPLICAS_ANNOTATION: "3"}}},
                content_type=MERGE_PATCH,
            )
            for _ in range(150):
                got = await admin.read(dep)
                if got["spec"]["replicas"] == 3:
                    break
                await asyncio.sleep(0.2)
            assert got["spec"]["replicas"] == 3, await admin.read(target)
            for _ in range(100):
                paused_row = await _table_row(bare, target)
                if paused_row["Paused"] == "True":
                    break
                await asyncio.sleep(0.2)
        finally:
            await ctl.stop()
    assert paused_row["Paused"] == "True"
    assert (await admin.read(target))["status"]["lastReason"] == "paused"
    # Blindness is visible from the real API server: conditions and printer columns.
    assert conds["MetricsAvailable"]["status"] == "False"
    assert conds["MetricsAvailable"]["reason"] == "NoPods"
    assert conds["Active"]["status"] == "Unknown" and conds["Active"]["reason"] != "Idle"
    assert conds["Fallback"]["status"] == "True"
    assert (blind_row["Metrics"], blind_row["Fallback"]) == ("False", "True")
    assert blind_row["Active"] == "Unknown"
    events = await admin.get(f"/api/v1/namespaces/{SERVING}/events")
    warnings = [e for e in events["items"] if e["reason"] == "MetricsUnavailable"]
    assert len(warnings) == 1 and warnings[0]["type"] == "Warning"  # once, not per tick
    assert "NoPods" in warnings[0]["message"]
    lease = await admin.get(f"/apis/coordination.k8s.io/v1/namespaces/{CHART_NS}/leases")
    assert any(item["metadata"]["name"].startswith(f"{CHART_SA}-leader") for item in lease["items"])


def test_the_skip_line_says_how_to_get_the_binaries_not_a_machine_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.real import controlplane

    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setattr(controlplane, "SHARED", tmp_path / "nowhere")
    reason = controlplane.find_binaries()
    assert isinstance(reason, str)
    assert "setup-envtest" in reason and "KUBEBUILDER_ASSETS" in reason
    assert str(tmp_path) not in reason
