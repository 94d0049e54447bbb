"""A target with variants end to end over real sockets: the local Kubernetes API schedules
two Deployments of one model (full GPUs, MIG slices) onto GPU nodes by their extended
resources and runs every pod as an emulated vLLM replica; the controller (`Controller`, as
`llm-autoscaler run` starts it) decides the model's replicas once from all pods and splits
them: the cheaper variant first while it can place pods, the other when its slices run out
or its pods are unschedulable, the expensive one first on the way down. Status, Events and
the REST view are read back."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

import httpx

from autoscaler.app import Controller
from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.engine import Role
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.runtime import PodEndpoint
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL
from autoscaler.target import API_VERSION
from tests.support.waiting import until
from tests.support.workloads import controller_settings, deployment

NS = "llm"
GPU = "nvidia.com/gpu"
MIG = "nvidia.com/mig-2g.20gb"
ONE_PER_SECOND = {
    "stabilizationWindowSeconds": 0,
    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}],
}


class EmulatedRuntime:
    """`PodRuntime`: each scheduled pod is an emulated vLLM replica on loopback, doing the
    work ``role_of(pod name)`` says (default: both prefill and decode)."""

    def __init__(self, fleet: EmulatorFleet, role_of: Callable[[str], Role] | None = None) -> None:
        self.fleet = fleet
        self.role_of = role_of
        self.replicas: dict[str, EmulatedReplica] = {}

    async def start(self, pod: dict[str, Any]) -> PodEndpoint:
        name = pod["metadata"]["name"]
        config = ReplicaConfig(cold_start_s=0.0)
        if self.role_of is not None:
            config = replace(config, role=self.role_of(name))
        rep = await self.fleet.start_replica(name, config=config)
        await until(lambda: rep.ready, 10, "emulated replica ready")
        self.replicas[name] = rep
        return PodEndpoint("127.0.0.1", metrics_port=rep.port)

    async def stop(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.replicas.pop(name, None)
        await self.fleet.stop_replica(name, drain=False, timeout_s=5)


def gpu_node(name: str, resource: str, count: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {
            "allocatable": {resource: str(count), "cpu": "64"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def variant_deployment(
    name: str, replicas: int, resource: str, node_selector: dict[str, str] | None = None
) -> dict[str, Any]:
    dep = deployment(name, replicas, NS, gpu={resource: "1"})
    if node_selector:
        dep["spec"]["template"]["spec"]["nodeSelector"] = node_selector
    return dep


def llama_target(max_replicas: int, namespace: str = NS, **spec: Any) -> dict[str, Any]:
    """LLMAutoscaler llama over llama-h100 (cost 4, at least 1) and llama-mig (1.33)."""
    body: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": "llama-h100"},
        "variants": [
            {
                "name": "h100",
                "scaleTargetRef": {"kind": "Deployment", "name": "llama-h100"},
                "costPerReplicaHour": 4.0,
                "minReplicas": 1,
            },
            {
                "name": "mig",
                "scaleTargetRef": {"kind": "Deployment", "name": "llama-mig"},
                "costPerReplicaHour": 1.33,
            },
        ],
        "minReplicaCount": 1,
        "maxReplicaCount": max_replicas,
        "pollingInterval": 0.2,
        "prediction": None,
        "metrics": [{"signal": "waiting", "target": 4}],
        "behavior": {"scaleUp": ONE_PER_SECOND, "scaleDown": ONE_PER_SECOND},
        **spec,
    }
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": "llama", "namespace": namespace},
        "spec": body,
    }


class Cluster:
    """The local API with its runtime, and the replicas of two Deployments (``names``) as
    they changed (sampled every 20 ms)."""

    def __init__(
        self,
        kube: LocalKubeAPI,
        runtime: EmulatedRuntime,
        names: tuple[str, str] = ("llama-h100", "llama-mig"),
    ) -> None:
        self.kube = kube
        self.runtime = runtime
        self.names = names
        self.seen: list[tuple[int, int]] = []  # spec.replicas of ``names``, on change

    def replicas(self) -> tuple[int, int]:
        counts = []
        for name in self.names:
            dep = self.kube.get("deployments", NS, name, group="apps")
            assert dep is not None
            counts.append(int(dep["spec"]["replicas"]))
        return counts[0], counts[1]

    async def sample(self) -> None:
        while True:
            now = self.replicas()
            if not self.seen or self.seen[-1] != now:
                self.seen.append(now)
            await asyncio.sleep(0.02)

    def status(self) -> dict[str, Any]:
        obj = self.kube.get(CRD_PLURAL, NS, "llama", group=CRD_GROUP)
        assert obj is not None
        return dict(obj.get("status") or {})

    def condition(self, kind: str) -> dict[str, Any]:
        conds = {c["type"]: c for c in self.status().get("conditions") or []}
        return dict(conds.get(kind) or {})

    def events(self, reason: str) -> list[dict[str, Any]]:
        return [e for e in self.kube.list_objects("events", NS) if e.get("reason") == reason]

    def load(
        self, deployment_name: str, n: int = 600, prompt: int = 512, output: int = 4096
    ) -> None:
        """A queue of ``n`` requests on one pod of ``deployment_name`` (by default 600 long
        requests: ~340 waiting)."""
        name = next(x for x in sorted(self.runtime.replicas) if x.startswith(deployment_name))
        self.runtime.replicas[name].engine.inject(n, prompt, output)

    def pods_ready(self, deployment_name: str) -> int:
        return sum(1 for x in self.runtime.replicas if x.startswith(deployment_name))


@contextlib.asynccontextmanager
async def cluster(
    *, h100: int, mig: int, mig_selector: dict[str, str] | None = None
) -> AsyncIterator[Cluster]:
    """Nodes: one with 4 GPUs, one with 3 MIG 2g.20gb slices; Deployments llama-h100 and
    llama-mig with ``h100`` and ``mig`` replicas."""
    async with EmulatorFleet(speed=1.0) as fleet:
        runtime = EmulatedRuntime(fleet)
        async with LocalKubeAPI(controller=True, runtime=runtime) as kube:
            kube.create("nodes", gpu_node("gpu-node", GPU, 4))
            kube.create("nodes", gpu_node("mig-node", MIG, 3))
            kube.create("deployments", variant_deployment("llama-h100", h100, GPU), group="apps")
            kube.create(
                "deployments",
                variant_deployment("llama-mig", mig, MIG, mig_selector),
                group="apps",
            )
            c = Cluster(kube, runtime)
            sampler = asyncio.create_task(c.sample())
            try:
                yield c
            finally:
                sampler.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sampler


@contextlib.asynccontextmanager
async def controller(kube: LocalKubeAPI) -> AsyncIterator[Controller]:
    api = api_client_for(kube.url)
    ctl = Controller(controller_settings(leader_election=False), api, identity="c")
    await ctl.start()
    try:
        yield ctl
    finally:
        await ctl.stop()
        await api.close()


async def test_under_load_the_cheaper_variant_grows_until_its_slices_run_out_then_the_other_and_the_expensive_one_shrinks_first() -> (  # noqa: E501
    None
):
    async with cluster(h100=1, mig=0) as c:
        await until(lambda: len(c.runtime.replicas) == 1, 15, "the h100 pod Ready")
        c.kube.create(CRD_PLURAL, llama_target(5), group=CRD_GROUP)
        async with controller(c.kube) as ctl:
            c.load("llama-h100")
            await until(lambda: c.seen[-1] == (2, 3), 30, "h100=2, mig=3")
            # one replica a second: every slice was taken before the second H100
            assert c.seen == [(1, 0), (1, 1), (1, 2), (1, 3), (2, 3)], c.seen
            await until(
                lambda: c.status().get("variantSummary") == "h100=2,mig=3", 10, "the summary"
            )
            rows = {v["name"]: v for v in c.status()["variants"]}
            assert rows["mig"]["desiredReplicas"] == 3 and rows["mig"]["cost"] == 1.33
            assert rows["h100"]["desiredReplicas"] == 2 and rows["h100"]["cost"] == 4.0
            ups = c.events("VariantScaledUp")
            on = {(e["involvedObject"]["name"], e["message"].split(" (")[0]) for e in ups}
            assert ("llama-mig", "variant mig: 0 -> 1 replicas") in on
            assert ("llama-h100", "variant h100: 1 -> 2 replicas") in on
            (h100_up,) = [e for e in ups if e["involvedObject"]["name"] == "llama-h100"]
            assert "skipped cheaper: mig (no free slot in the capacity book)" in h100_up["message"]
            # the REST view of the target carries the same per-variant status
            assert ctl.http is not None
            async with httpx.AsyncClient(base_url=ctl.http.url) as http:
                doc = (await http.get(f"/v1/targets/{NS}/llama")).json()
            rest = {v["name"]: v["desiredReplicas"] for v in doc["status"]["variants"]}
            assert rest == {"h100": 2, "mig": 3}

            # the load goes: the H100 (most expensive) shrinks first, then the slices
            await asyncio.sleep(1.2)  # out of the scale-up's rate period: one step at a time
            mark = len(c.seen)
            for rep in c.runtime.replicas.values():
                rep.engine.abort_all()
            await until(lambda: c.seen[-1] == (1, 0), 30, "back to h100=1, mig=0")
            assert c.seen[mark:] == [(1, 3), (1, 2), (1, 1), (1, 0)], c.seen
            downs = c.events("VariantScaledDown")
            assert any(
                "variant h100: 2 -> 1 replicas (scale-down: most expensive variant per unit"
                " of capacity first" in e["message"]
                for e in downs
            )


async def test_a_variant_with_unschedulable_pods_is_skipped_for_scale_up() -> None:
    # capacity not enforced: only the scheduler's verdict can stop the cheaper variant
    async with cluster(h100=1, mig=1, mig_selector={"pool": "nowhere"}) as c:
        await until(lambda: len(c.runtime.replicas) == 1, 15, "the h100 pod Ready")
        target = llama_target(3, capacity={"enforce": False})
        c.kube.create(CRD_PLURAL, target, group=CRD_GROUP)
        async with controller(c.kube):
            c.load("llama-h100")
            # max 3 replicas that can run: the stuck slice comes on top of three H100s
            await until(lambda: c.seen[-1] == (3, 1), 30, "h100=3 with the mig pod stuck")
            await until(
                lambda: c.status().get("variantSummary") == "h100=3,mig=1", 10, "the summary"
            )
            rows = {v["name"]: v for v in c.status()["variants"]}
            assert rows["mig"]["unschedulableReplicas"] == 1
            assert rows["mig"]["blocked"] == "1 pod(s) Pending"
            ups = c.events("VariantScaledUp")
            assert {e["involvedObject"]["name"] for e in ups} == {"llama-h100"}
            assert all("skipped cheaper: mig (1 pod(s) Pending)" in e["message"] for e in ups)
            await asyncio.sleep(1.5)  # more ticks: the stuck variant is never grown
            assert c.seen[-1] == (3, 1) and all(m == 1 for _, m in c.seen), c.seen


async def test_long_prompts_grow_the_full_gpu_variant_by_capacity_and_never_the_slices() -> None:
    # issue 37: the H100 serves three reference replicas (capacity 3), a slice one at a
    # lower price per unit, but only prompts up to 8192 tokens. Every prompt is 12000
    # tokens: the slices are never grown; the H100s take the demand, three units each.
    async with cluster(h100=1, mig=0) as c:
        await until(lambda: len(c.runtime.replicas) == 1, 15, "the h100 pod Ready")
        (pod,) = c.runtime.replicas.values()
        pod.engine.inject(600, 12000, 32)
        await until(lambda: sum(pod.engine.counters.finished.values()) > 0, 15, "requests done")
        target = llama_target(
            9,  # reference replicas: three H100s
            variants=[
                {
                    "name": "h100",
                    "scaleTargetRef": {"kind": "Deployment", "name": "llama-h100"},
                    "costPerReplicaHour": 4.0,
                    "capacityPerReplica": 3,
                    "minReplicas": 1,
                },
                {
                    "name": "mig",
                    "scaleTargetRef": {"kind": "Deployment", "name": "llama-mig"},
                    "costPerReplicaHour": 1.0,
                    "capacityPerReplica": 1,
                    "maxModelLen": 8192,
                },
            ],
            # the first tick has no window of lengths yet (unknown counts as servable by
            # all): a one-second scale-up window lets the histogram fill first
            behavior={
                "scaleUp": {**ONE_PER_SECOND, "stabilizationWindowSeconds": 1},
                "scaleDown": ONE_PER_SECOND,
            },
        )
        c.kube.create(CRD_PLURAL, target, group=CRD_GROUP)
        async with controller(c.kube):
            await until(lambda: c.seen[-1] == (3, 0), 30, "h100=3, mig=0")
            assert all(m == 0 for _, m in c.seen), c.seen
            await until(
                lambda: c.status().get("variantSummary") == "h100=3,mig=0", 10, "the summary"
            )
            rows = {v["name"]: v for v in c.status()["variants"]}
            assert rows["h100"]["capacityPerReplica"] == 3
            assert rows["mig"]["maxModelLen"] == 8192 and rows["mig"]["tooLongShare"] == 1.0
            ups = c.events("VariantScaledUp")
            assert ups and {e["involvedObject"]["name"] for e in ups} == {"llama-h100"}
            assert any(
                "requests over 8192 tokens: only h100 serves them" in e["message"] for e in ups
            ), [e["message"] for e in ups]
            await asyncio.sleep(1.0)  # more ticks: the slices stay at 0
            assert all(m == 0 for _, m in c.seen), c.seen
