"""Prefill/decode roles end to end over real sockets: the local Kubernetes API schedules a
prefill Deployment and a decode Deployment of one model and runs every pod as an emulated
vLLM replica of its role; the controller (`Controller`, as `llm-autoscaler run` starts
it) sizes each role from its own pods (prefill: prompt-token rate; decode: running
requests, KV usage), with HPA behaviour per role, and one role's unschedulable pods never
stall the other's scale-down. Status, Events and the REST view are read back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx

from autoscaler.emulator import EmulatorFleet
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL
from autoscaler.target import API_VERSION
from tests.control.test_variants_local import (
    ONE_PER_SECOND,
    Cluster,
    EmulatedRuntime,
    controller,
    gpu_node,
)
from tests.support.waiting import until
from tests.support.workloads import deployment

NS = "llm"
GPU = "nvidia.com/gpu"
PREFILL, DECODE = "llama-prefill", "llama-decode"


def role_target(max_replicas: int, **roles: Any) -> dict[str, Any]:
    """LLMAutoscaler llama: prefill over llama-prefill, decode over llama-decode; a
    prefill replica serves 2000 prompt tokens/s, a decode replica 16 running requests."""
    body: dict[str, Any] = {
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
        "roles": {
            "promptTokensPerSecondPerPrefill": 2000,
            "runningPerDecode": 16,
            "kvUsageTarget": 0.9,
            **roles,
        },
        "minReplicaCount": 1,
        "maxReplicaCount": max_replicas,
        "pollingInterval": 0.2,
        "prediction": None,
        "capacity": {"enforce": False},
        "behavior": {"scaleUp": ONE_PER_SECOND, "scaleDown": ONE_PER_SECOND},
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": "llama", "namespace": NS},
        "spec": body,
    }


@contextlib.asynccontextmanager
async def cluster(*, prefill: int, decode: int, prefill_gpus: int = 4) -> AsyncIterator[Cluster]:
    """Nodes: prefill-node with ``prefill_gpus`` GPUs (prefill pods only), decode-node
    with 4; Deployments llama-prefill and llama-decode."""
    async with EmulatorFleet(speed=1.0) as fleet:
        runtime = EmulatedRuntime(
            fleet, lambda name: "prefill" if name.startswith(PREFILL) else "decode"
        )
        async with LocalKubeAPI(controller=True, runtime=runtime) as kube:
            kube.create("nodes", gpu_node("prefill-node", GPU, prefill_gpus))
            kube.create("nodes", gpu_node("decode-node", GPU, 4))
            for name, n, node in (
                (PREFILL, prefill, "prefill-node"),
                (DECODE, decode, "decode-node"),
            ):
                dep = deployment(name, n, NS, gpu={GPU: "1"})
                dep["spec"]["template"]["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
                kube.create("deployments", dep, group="apps")
            c = Cluster(kube, runtime, (PREFILL, DECODE))  # (prefill, decode)
            sampler = asyncio.create_task(c.sample())
            try:
                yield c
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler


async def test_prefill_grows_with_the_prompt_token_rate_while_decode_holds() -> None:
    async with cluster(prefill=1, decode=1) as c:
        await until(lambda: len(c.runtime.replicas) == 2, 15, "both pods Ready")
        c.kube.create(CRD_PLURAL, role_target(3), group=CRD_GROUP)
        async with controller(c.kube) as ctl:
            # long prompts on the prefill pod: thousands of prompt tokens a second
            c.load(PREFILL, 400, 4000, 16)
            await until(lambda: c.seen[-1] == (3, 1), 30, "prefill=3, decode=1")
            # one replica a second, decode never moved
            assert c.seen == [(1, 1), (2, 1), (3, 1)], c.seen
            await until(
                lambda: c.status().get("variantSummary") == "P:prefill-h100=3,D:decode-h100=1",
                10,
                "the summary",
            )
            roles = {r["role"]: r for r in c.status()["roles"]}
            assert roles["prefill"]["desiredReplicas"] == 3
            assert roles["decode"]["desiredReplicas"] == 1
            rows = {v["name"]: v for v in c.status()["variants"]}
            assert rows["prefill-h100"]["role"] == "prefill"
            ups = c.events("VariantScaledUp")
            assert {e["involvedObject"]["name"] for e in ups} == {PREFILL}
            assert any(
                "role prefill 1 -> 2: prompt tokens" in e["message"]
                and "at 2000/s per replica" in e["message"]
                for e in ups
            ), [e["message"] for e in ups]
            assert ctl.http is not None
            async with httpx.AsyncClient(base_url=ctl.http.url) as http:
                doc = (await http.get(f"/v1/targets/{NS}/llama")).json()
            rest = {r["role"]: r["desiredReplicas"] for r in doc["status"]["roles"]}
            assert rest == {"prefill": 3, "decode": 1}
            last = doc["status"]["lastDecision"]
            assert last["numbers"]["roles.prefill.prompt_tokens_per_s"] > 4000


async def test_decode_grows_with_running_requests_while_prefill_holds() -> None:
    async with cluster(prefill=1, decode=1) as c:
        await until(lambda: len(c.runtime.replicas) == 2, 15, "both pods Ready")
        c.kube.create(CRD_PLURAL, role_target(3), group=CRD_GROUP)
        async with controller(c.kube):
            # 48 long generations on the decode pod: 48 running at 16 per replica
            c.load(DECODE, 48, 64, 8000)
            await until(lambda: c.seen[-1] == (1, 3), 30, "prefill=1, decode=3")
            assert c.seen == [(1, 1), (1, 2), (1, 3)], c.seen
            ups = c.events("VariantScaledUp")
            assert {e["involvedObject"]["name"] for e in ups} == {DECODE}
            assert any(
                "role decode 1 -> 2: running 48 at 16 per replica" in e["message"] for e in ups
            )


async def test_the_ratio_band_raises_the_lagging_role() -> None:
    async with cluster(prefill=1, decode=1) as c:
        await until(lambda: len(c.runtime.replicas) == 2, 15, "both pods Ready")
        target = role_target(3, ratioBand={"min": 1, "max": 2})
        c.kube.create(CRD_PLURAL, target, group=CRD_GROUP)
        async with controller(c.kube):
            c.load(DECODE, 48, 64, 8000)  # decode wants 3; prefill has no load at all
            await until(lambda: c.seen[-1] == (3, 3), 30, "prefill=3, decode=3")
            # prefill follows decode step for step (at most the one write in between)
            assert all(p <= d + 1 for p, d in c.seen), c.seen
            raised = c.events("RoleRaised")
            assert any("prefill: raised to 3 by the ratio band" in e["message"] for e in raised)
            await until(
                lambda: "raised to 3 by the ratio band" in c.condition("Roles").get("message", ""),
                10,
                "the Roles condition",
            )


async def test_a_prefill_pod_stuck_unschedulable_does_not_stop_decode_scale_down() -> None:
    # the prefill node has one GPU: the second prefill pod can never be placed
    async with cluster(prefill=2, decode=3, prefill_gpus=1) as c:
        await until(
            lambda: c.pods_ready(PREFILL) == 1 and c.pods_ready(DECODE) == 3, 15, "4 pods Ready"
        )
        c.kube.create(CRD_PLURAL, role_target(4), group=CRD_GROUP)
        async with controller(c.kube):
            c.load(PREFILL, 400, 4000, 16)  # prefill wants more; decode has no load
            await until(lambda: c.seen[-1] == (2, 1), 30, "decode back to 1")
            assert c.seen == [(2, 3), (2, 2), (2, 1)], c.seen  # prefill never grew
            blocked = c.events("RoleGrowthBlocked")
            assert any("prefill: 1 pod(s) Pending, not growing" in e["message"] for e in blocked)
            downs = c.events("VariantScaledDown")
            assert {e["involvedObject"]["name"] for e in downs} == {DECODE}
            await until(
                lambda: (
                    {r["role"]: r.get("unschedulableReplicas") for r in c.status()["roles"]}
                    == {"prefill": 1, "decode": 0}
                ),
                10,
                "the roles rows",
            )
