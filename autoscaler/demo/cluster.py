"""The demo's emulated GPU cluster: one node pool per fleet and a node provisioner.

Each fleet's pods (its vLLM Deployment and, for ours, the warm pool's pause pods) select
their own pool with ``nodeSelector: {pool: <fleet>}``, so the fleets never share GPUs.
A pod that fits no node stays Pending; the provisioner (as Karpenter or the cluster
autoscaler would) adds a node for it after ``provision_s`` emulated seconds (calibration:
node provisioning median 120 s). A pod placed on a warm GPU (a free slot, or a pause pod's
slot that it preempts) only pays the container cold start; that is what the warm pool buys.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

from autoscaler.control.clock import Clock
from autoscaler.kube.localapi.server import LocalKubeAPI

GPU = "nvidia.com/gpu"
POOL_LABEL = "pool"


def deployment(
    namespace: str,
    name: str,
    pool: str,
    replicas: int = 1,
    template_labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": {**labels, **(template_labels or {})}},
                "spec": {
                    "nodeSelector": {POOL_LABEL: pool},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai:v0.11.0",
                            "ports": [{"containerPort": 8000, "name": "http"}],
                            "resources": {"limits": {GPU: "1"}},
                        }
                    ],
                },
            },
        },
    }


def node(name: str, pool: str, gpus: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {POOL_LABEL: pool, "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
        },
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", GPU: str(gpus)},
            "capacity": {"cpu": "64", "memory": "512Gi", GPU: str(gpus)},
        },
    }


def _pool_of(pod: dict[str, Any]) -> str | None:
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    pool = selector.get(POOL_LABEL)
    return str(pool) if pool is not None else None


def _live(pod: dict[str, Any]) -> bool:
    phase = (pod.get("status") or {}).get("phase")
    return phase not in ("Succeeded", "Failed") and not pod["metadata"].get("deletionTimestamp")


def gpus_held(kube: LocalKubeAPI, pool: str) -> int:
    """GPUs a pool's pods request, Pending ones included (a pod waiting for a new node is
    billed from the node's launch, as in the simulator's cost model; pause pods count)."""
    return sum(1 for p in kube.list_objects("pods") if _live(p) and _pool_of(p) == pool)


class NodeProvisioner:
    """Adds a ``gpus_per_node`` node to a pool for Pending pods that fit nowhere, ready
    ``provision_s`` emulated seconds later; never two nodes for the same Pending pods."""

    def __init__(
        self, kube: LocalKubeAPI, clock: Clock, *, gpus_per_node: int, provision_s: float
    ) -> None:
        self.kube = kube
        self.clock = clock
        self.gpus_per_node = gpus_per_node
        self.provision_s = provision_s
        self.provisioning: dict[str, int] = {}  # pool -> GPUs on nodes not ready yet
        self._names = itertools.count(1)
        self._tasks: set[asyncio.Task[None]] = set()

    def add_ready(self, pool: str, nodes: int) -> None:
        for _ in range(nodes):
            self.kube.create(
                "nodes", node(f"gpu-{pool}-{next(self._names)}", pool, self.gpus_per_node)
            )

    def _pending(self, pool: str) -> int:
        return sum(
            1
            for p in self.kube.list_objects("pods")
            if _live(p) and _pool_of(p) == pool and not (p.get("spec") or {}).get("nodeName")
        )

    def reconcile(self, pools: list[str]) -> None:
        for pool in pools:
            short = self._pending(pool) - self.provisioning.get(pool, 0)
            while short > 0:
                self.provisioning[pool] = self.provisioning.get(pool, 0) + self.gpus_per_node
                short -= self.gpus_per_node
                task = asyncio.get_running_loop().create_task(self._launch(pool))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)

    async def _launch(self, pool: str) -> None:
        await self.clock.sleep(self.provision_s)
        self.provisioning[pool] -= self.gpus_per_node
        self.add_ready(pool, 1)  # the local API schedules Pending pods on a new Node

    async def run(self, pools: list[str], every_s: float = 1.0) -> None:
        while True:
            self.reconcile(pools)
            await self.clock.sleep(every_s)

    async def close(self) -> None:
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
