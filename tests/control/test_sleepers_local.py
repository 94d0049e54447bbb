"""Sleepers end to end over real sockets: the local Kubernetes API runs the Deployment's
pods as emulated vLLM replicas with sleep mode on, and the controller (`Controller`, the
process `llm-autoscaler run` starts) puts idle replicas to sleep on scale-down, keeps
the Deployment's replicas counting them, and wakes them on scale-up instead of a cold
start. Status, Events and pod labels are read back from the API."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp

from autoscaler.app import Controller
from autoscaler.domain import TargetRef
from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.runtime import PodEndpoint
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL, POD_DELETION_COST_ANNOTATION, SLEEPING_LABEL
from autoscaler.policy.schema import load_policy
from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object
from tests.support.waiting import until
from tests.support.workloads import controller_settings, deployment

REF = TargetRef("llm", "llama")


class SleepyRuntime:
    """`PodRuntime`: each pod is an emulated vLLM replica with sleep mode on (its own
    loopback port), Ready after a short cold start."""

    def __init__(self, fleet: EmulatorFleet) -> None:
        self.fleet = fleet
        self.replicas: dict[str, EmulatedReplica] = {}
        self.started = 0

    async def start(self, pod: dict[str, Any]) -> PodEndpoint:
        name = pod["metadata"]["name"]
        config = ReplicaConfig(sleep_mode=True, wake_s=0.05, cold_start_s=0.2, model="llama")
        rep = await self.fleet.start_replica(name, config=config)
        await until(lambda: rep.ready, 10, "emulated cold start")
        self.replicas[name] = rep
        self.started += 1
        return PodEndpoint("127.0.0.1", metrics_port=rep.port)

    async def stop(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        self.replicas.pop(name, None)
        await self.fleet.stop_replica(name, drain=False, timeout_s=5)


def _pods(kube: LocalKubeAPI) -> list[dict[str, Any]]:
    return [
        p
        for p in kube.list_objects("pods", "llm")
        if not (p.get("metadata") or {}).get("deletionTimestamp")
    ]


def _sleeping(kube: LocalKubeAPI) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in _pods(kube)
        if (p["metadata"].get("labels") or {}).get(SLEEPING_LABEL) == "true"
    )


async def test_idle_replicas_sleep_on_scale_down_and_wake_on_scale_up() -> None:
    async with EmulatorFleet(speed=1.0) as fleet:
        runtime = SleepyRuntime(fleet)
        async with LocalKubeAPI(controller=True, runtime=runtime) as kube:
            kube.create("deployments", deployment("llama", 3, "llm"), group="apps")
            await until(lambda: runtime.started == 3, 15, "three pods Ready")
            policy = {
                "minReplicaCount": 1,
                "maxReplicaCount": 4,
                "pollingInterval": 0.2,
                "metrics": [{"signal": "running", "target": 4}],
                "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
                "prediction": None,
                "sleep": {"maxSleeping": 2, "ttlSeconds": 3600},
            }
            spec = TargetSpec(
                ref=REF, policy=load_policy(policy), scale_target_ref=ScaleTargetRef(name="llama")
            )
            kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
            ctl = Controller(
                controller_settings(leader_election=False), api_client_for(kube.url), identity="c"
            )
            await ctl.start()
            try:

                def replicas() -> int:
                    dep = kube.get("deployments", "llm", "llama", group="apps")
                    assert dep is not None
                    return int(dep["spec"]["replicas"])

                # idle: down to minReplicaCount 1 awake, the other two asleep, replicas kept
                await until(lambda: len(_sleeping(kube)) == 2, 20, "two sleepers")
                asleep = _sleeping(kube)
                assert replicas() == 3 and len(_pods(kube)) == 3
                # labelled first (out of the endpoints), asleep after the settle time
                await until(
                    lambda: all(runtime.replicas[n].sleep.is_sleeping for n in asleep),
                    10,
                    "the engines asleep",
                )
                for name in asleep:
                    pod = kube.get("pods", "llm", name)
                    assert pod is not None
                    assert pod["metadata"]["annotations"][POD_DELETION_COST_ANNOTATION] == "-100"

                def status() -> dict[str, Any]:
                    obj = kube.get(CRD_PLURAL, "llm", "llama", group=CRD_GROUP)
                    assert obj is not None
                    return dict(obj.get("status") or {})

                await until(
                    lambda: (
                        status().get("sleepingReplicas") == 2 and status().get("awakeReplicas") == 1
                    ),
                    10,
                    "awake/sleeping counts in the status",
                )

                def reasons() -> list[str]:
                    return [str(e.get("reason")) for e in kube.list_objects("events", "llm")]

                await until(lambda: "ReplicasSlept" in reasons(), 10, "a ReplicasSlept Event")

                # load on the awake replica: the sleepers are woken, no cold start
                (awake,) = set(runtime.replicas) - set(asleep)
                url = runtime.replicas[awake].url + "/v1/completions"
                body = {"model": "llama", "prompt": "x", "max_tokens": 4000}
                async with aiohttp.ClientSession() as http:
                    load = [asyncio.create_task(http.post(url, json=body)) for _ in range(12)]
                    try:
                        await until(lambda: _sleeping(kube) == [], 20, "the sleepers woken")
                        assert not any(r.sleep.is_sleeping for r in runtime.replicas.values())
                        assert runtime.started == 3  # woken, not cold-started
                        await until(
                            lambda: "ReplicasWoken" in reasons(), 10, "a ReplicasWoken Event"
                        )
                    finally:
                        for task in load:
                            task.cancel()
                        for r in await asyncio.gather(*load, return_exceptions=True):
                            if isinstance(r, aiohttp.ClientResponse):
                                r.release()
            finally:
                await ctl.stop()
