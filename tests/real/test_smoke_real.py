"""The tier's own moving parts: the real ReplicaSet controller makes pods, the real
scheduler binds them to the fake GPU node, the fake kubelet serves them."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.real.conftest import vllm_deployment
from tests.real.kubectl import Kube
from tests.support.fake_kubelet import FakeKubelet
from tests.support.waiting import until


async def test_deployment_pods_run_as_emulated_vllm_on_their_own_ip(
    kube: Kube, namespace: str, kubelet: FakeKubelet
) -> None:
    await kube.apply(vllm_deployment("smoke", namespace, replicas=2))
    await until(lambda: len(kubelet.ready_pods()) == 2, 30, "two pods running")
    # The kubelet's view leads the API server's: wait until the API shows both pod IPs.
    ips: set[str] = set()
    for _ in range(200):
        pods = await kube.get(f"/api/v1/namespaces/{namespace}/pods")
        ips = {p["status"].get("podIP", "") for p in pods["items"]} - {""}
        if len(ips) == 2 and len(pods["items"]) == 2:
            break
        await asyncio.sleep(0.1)
    assert len(ips) == 2 and all(ip.startswith("127.") for ip in ips)
    async with aiohttp.ClientSession() as s:
        for ip in ips:
            async with s.get(f"http://{ip}:8000/metrics") as resp:
                assert resp.status == 200
                assert "vllm:num_requests_waiting" in await resp.text()
