"""Prefill/decode roles on kube-apiserver 1.24 with the real scheduler: one model as a
prefill Deployment and a decode Deployment, each on its own fake-kubelet node whose pods
are emulated vLLM replicas of that role. The controller, as its ServiceAccount, grows
prefill on its prompt-token rate while decode, idle, shrinks in the same seconds (each
role with its own rate limits); ``status.roles``, the ``Variants`` column and the
per-variant Events naming the role are read back from the API server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.app import Controller
from autoscaler.emulator.server import ReplicaConfig
from autoscaler.target import API_VERSION
from tests.control.test_variants_local import GPU, ONE_PER_SECOND
from tests.real.conftest import GPU_TAINT
from tests.real.kubectl import Kube
from tests.real.test_controller_real import settings
from tests.real.test_variants_real import Sampler, variant_deployment
from tests.support.fake_kubelet import FakeKubelet
from tests.support.waiting import until

PREFILL, DECODE = "llama-prefill", "llama-decode"


def role_deployment(name: str, namespace: str, replicas: int, node: str) -> dict[str, Any]:
    dep = variant_deployment(name, namespace, replicas, GPU)
    dep["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return dep


def llama(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": "llama", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": PREFILL},
            "variants": [
                {
                    "name": "prefill-h100",
                    "scaleTargetRef": {"kind": "Deployment", "name": PREFILL},
                    "costPerReplicaHour": 4.0,
                    "role": "prefill",
                },
                {
                    "name": "decode-h100",
                    "scaleTargetRef": {"kind": "Deployment", "name": DECODE},
                    "costPerReplicaHour": 4.0,
                    "role": "decode",
                },
            ],
            "roles": {"promptTokensPerSecondPerPrefill": 2000, "runningPerDecode": 16},
            "minReplicaCount": 1,
            "maxReplicaCount": 3,
            "pollingInterval": 0.5,
            "prediction": None,
            "behavior": {"scaleUp": ONE_PER_SECOND, "scaleDown": ONE_PER_SECOND},
        },
    }


async def test_prefill_grows_on_prompt_tokens_while_idle_decode_shrinks(
    kube: Kube, namespace: str, admin_api: ApiClient, controller_api: ApiClient
) -> None:
    started = time.monotonic()
    async with (
        FakeKubelet(
            admin_api,
            "prefill-node",
            subnet=253,
            taint=GPU_TAINT,
            gpus=4,
            config=ReplicaConfig(cold_start_s=0.0, role="prefill"),
        ) as pre,
        FakeKubelet(
            admin_api,
            "decode-node",
            subnet=254,
            taint=GPU_TAINT,
            gpus=4,
            config=ReplicaConfig(cold_start_s=0.0, role="decode"),
        ) as dec,
    ):
        await kube.apply(role_deployment(PREFILL, namespace, 1, "prefill-node"))
        await kube.apply(role_deployment(DECODE, namespace, 3, "decode-node"))
        await until(
            lambda: len(pre.ready_pods()) == 1 and len(dec.ready_pods()) == 3, 30, "4 pods Ready"
        )
        target = llama(namespace)
        await kube.create(target)
        ctl = Controller(settings(), controller_api, identity="ctrl-roles")
        sampler = Sampler(
            kube, [role_deployment(n, namespace, 0, "x") for n in (PREFILL, DECODE)]
        )  # (prefill, decode)
        sampling = asyncio.create_task(sampler.run())
        await ctl.start()
        try:
            await until(lambda: ctl.state.is_leader, 15, "leadership")
            (pod,) = pre.replicas.values()
            pod.engine.inject(400, 4000, 16)  # long prompts: thousands of tokens a second
            await until(lambda: sampler.seen[-1:] == [(3, 1)], 30, "prefill=3, decode=1")
            seen = sampler.seen
            # each role one step a second, in its own direction
            assert [p for p, _ in seen] == sorted(p for p, _ in seen), seen
            assert [d for _, d in seen] == sorted((d for _, d in seen), reverse=True), seen

            obj = await kube.read(target)
            deadline = time.monotonic() + 10
            summary = "P:prefill-h100=3,D:decode-h100=1"
            while obj.get("status", {}).get("variantSummary") != summary:
                assert time.monotonic() < deadline, obj.get("status")
                await asyncio.sleep(0.2)
                obj = await kube.read(target)
            roles = {r["role"]: r for r in obj["status"]["roles"]}
            assert (roles["prefill"]["desiredReplicas"], roles["decode"]["desiredReplicas"]) == (
                3,
                1,
            )
            conds = {c["type"]: c for c in obj["status"]["conditions"]}
            assert conds["Roles"]["status"] == "True"

            assert kube._session is not None  # `kubectl get llmas`: the Variants column
            path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers"
            accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
            async with kube._session.get(kube.url + path, headers={"Accept": accept}) as resp:
                table: dict[str, Any] = await resp.json()
            names = [c["name"] for c in table["columnDefinitions"]]
            row = dict(zip(names, table["rows"][0]["cells"], strict=True))
            assert row["Variants"] == summary

            events = await kube.get(f"/api/v1/namespaces/{namespace}/events")
            ours = [e for e in events["items"] if e["reason"].startswith("VariantScaled")]
            ups = [e for e in ours if e["reason"] == "VariantScaledUp"]
            downs = [e for e in ours if e["reason"] == "VariantScaledDown"]
            assert {e["involvedObject"]["name"] for e in ups} == {PREFILL}
            assert {e["involvedObject"]["name"] for e in downs} == {DECODE}
            assert any("role prefill 1 -> 2: prompt tokens" in e["message"] for e in ups)
            assert any("role decode 3 -> 2: running 0" in e["message"] for e in downs)
        finally:
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling
            await ctl.stop()
    assert time.monotonic() - started < 30
