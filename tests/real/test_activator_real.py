"""Scale from zero against the real control plane: a Deployment at 0 replicas, one
request through the activator, then the controller (as its ServiceAccount) scales it
from the held count, the real ReplicaSet makes the pod, the scheduler binds it to the
fake kubelet's node, the pod turns Ready, the activator sees it and the request is
answered, with nothing dropped.

The fake kubelet serves pods on loopback addresses, which the API server refuses in an
EndpointSlice ("may not be in the loopback range"), so the activator finds the pod as it
does outside a cluster: a fixed endpoint (the address the kubelet gives its first pod)
counted Ready while its ``/health`` answers 200. EndpointSlices through the informer are
covered against the local API (tests/activator/test_endpointslices.py)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from kubernetes_asyncio.client import ApiClient

from autoscaler.activator.config import parse_config
from autoscaler.activator.runtime import ActivatorProcess
from autoscaler.app import Controller
from autoscaler.emulator.server import ReplicaConfig
from autoscaler.settings import GrpcSettings, HttpSettings, Settings
from autoscaler.target import API_VERSION
from tests.real.conftest import CONTROLLER_NS, vllm_deployment
from tests.real.kubectl import Kube
from tests.real.test_crd_real import _as_table, llmas
from tests.support.fake_kubelet import FakeKubelet
from tests.support.waiting import until

MODEL = ReplicaConfig().model  # what the fake kubelet's emulated vLLM serves


async def test_one_request_at_zero_is_held_the_real_replicaset_makes_the_pod_and_it_is_answered(
    kube: Kube,
    namespace: str,
    kubelet: FakeKubelet,
    controller_api: ApiClient,
    admin_api: ApiClient,
) -> None:
    dep = vllm_deployment("llama", namespace, replicas=0)
    await kube.apply(dep)
    await kube.create(
        llmas(
            "llama",
            namespace,
            minReplicaCount=1,
            maxReplicaCount=2,
            scaleToZero={"enabled": True, "idlePeriodSeconds": 600, "holdCap": 50},
        )
    )
    ctl = Controller(
        Settings(
            http=HttpSettings(host="127.0.0.1", port=0),
            grpc=GrpcSettings(host="127.0.0.1", port=0),
            tick_interval_s=0.5,
            lease_duration_s=3.0,
            lease_namespace=CONTROLLER_NS,
        ),
        controller_api,
        identity="ctrl-zero",
    )
    await ctl.start()
    act: ActivatorProcess | None = None
    try:
        await until(lambda: ctl.state.is_leader, 15, "leadership")
        assert ctl.http is not None
        subnet = kubelet.node.rsplit("-", 1)[1]  # the kubelet's pods: 127.<subnet>.0.2, ...
        config = {
            "controller": {"url": ctl.http.url, "resendS": 0.5},
            "targets": [
                {
                    "model": MODEL,
                    "namespace": namespace,
                    "autoscaler": "llama",
                    "endpoints": [f"127.{subnet}.0.2:8000"],
                }
            ],
        }
        act = ActivatorProcess(parse_config(config), host="127.0.0.1", port=0, probe_interval_s=0.1)
        await act.start()
        gate = act.activator.gates[f"{namespace}/llama"]  # type: ignore[union-attr]
        assert gate.ready == () and kubelet.ready_pods() == []
        await until(lambda: gate.cap == 50, 10, "holdCap 50 from the LLMAutoscaler")
        t0 = time.monotonic()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=90)) as http:
            body = {"model": MODEL, "prompt": "hello", "max_tokens": 4}
            request = asyncio.create_task(http.post(act.url + "/v1/completions", json=body))
            await until(lambda: len(kubelet.ready_pods()) == 1, 60, "the pod, served")
            await until(lambda: gate.ready != (), 30, "the pod Ready at the activator")
            async with await request as r:
                text = await r.text()
                assert r.status == 200, text
                held_s = float(r.headers["X-Activator-Held-Seconds"])
        elapsed = time.monotonic() - t0
        assert 0 < held_s <= elapsed  # it was held through the cold start, then answered
        assert len(kubelet.ready_pods()) == 1  # the pod the real ReplicaSet made
        scaled = await kube.read(dep)
        assert scaled["spec"]["replicas"] == 1
        assert gate.stats.forwarded_after_hold == 1
        assert (gate.stats.rejected_full, gate.stats.timed_out, gate.stats.abandoned) == (0, 0, 0)

        path = f"/api/v1/namespaces/{namespace}/events"
        uid = scaled["metadata"]["uid"]

        async def reasons() -> dict[str, str]:
            events = await kube.get(path, fieldSelector=f"involvedObject.uid={uid}")
            return {e["reason"]: e["message"] for e in events["items"]}

        end = time.monotonic() + 15
        while True:
            found = await reasons()
            if "ScaledFromZero" in found or time.monotonic() > end:
                break
            await asyncio.sleep(0.2)
        assert found["ScaledFromZero"].startswith("scaled from zero for 1 held requests;")
        assert "0 -> 1" in found["ScaledUp"]
        # kubectl get llmas: the Held column, from status.held (the held count at a decision)
        table = await _as_table(kube, f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers")
        names = [c["name"] for c in table["columnDefinitions"]]
        (row,) = table["rows"]
        held_cell = dict(zip(names, row["cells"], strict=True))["Held"]
        assert isinstance(held_cell, int) and held_cell in (0, 1)
    finally:
        if act is not None:
            await act.stop()
        await ctl.stop()
