"""The controller's view of the cluster: one shared informer per resource kind.

Pods, Deployments, StatefulSets and Nodes are each listed once and then watched (four
long-lived connections whatever the number of targets), so a tick reads memory:

- a target's pods come from `PodIndex` (per-target views fed by the pod informer);
- its scale (spec/status replicas and the resourceVersion for the conflict-checked
  write) from the Deployment/StatefulSet cache;
- GPU capacity from `GpuLedger`, kept incrementally from the node and pod informers.

Steady-state API traffic is the watches alone (a reconnect every ``watch_timeout_s``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.capacity import GpuLedger, NodeRecord, node_record
from autoscaler.kube.informer import Informer
from autoscaler.kube.pods import PodIndex, PodRecord, TargetPods, pod_record
from autoscaler.kube.scale import WorkloadRecord, workload_record
from autoscaler.retry import RetryPolicy
from autoscaler.target import TargetSpec


def spec_selector(spec: TargetSpec, work: WorkloadRecord | None) -> str:
    """The target's pod selector: the policy's own, else the workload's."""
    if spec.selector:
        return ",".join(f"{k}={v}" for k, v in sorted(spec.selector.items()))
    return work.selector if work is not None else ""


class ClusterCache:
    """Informers for pods, deployments, statefulsets and nodes over one ``ApiClient``
    (give it a client of its own so the watches never wait behind other requests)."""

    def __init__(
        self,
        api: ApiClient,
        *,
        retry: RetryPolicy | None = None,
        watch_timeout_s: int = 300,
    ) -> None:
        core, apps = client.CoreV1Api(api), client.AppsV1Api(api)
        kw: dict[str, Any] = {"retry": retry, "watch_timeout_s": watch_timeout_s}
        self.pods: Informer[PodRecord] = Informer(
            "pods", core.list_pod_for_all_namespaces, pod_record, **kw
        )
        self.deployments: Informer[WorkloadRecord] = Informer(
            "deployments",
            apps.list_deployment_for_all_namespaces,
            workload_record("Deployment"),
            **kw,
        )
        self.statefulsets: Informer[WorkloadRecord] = Informer(
            "statefulsets",
            apps.list_stateful_set_for_all_namespaces,
            workload_record("StatefulSet"),
            **kw,
        )
        self.nodes: Informer[NodeRecord] = Informer("nodes", core.list_node, node_record, **kw)
        self.index = PodIndex()
        self._gpus = GpuLedger()
        self.pods.add_handler(self.index.on_event)
        self.pods.add_handler(self._gpus.on_pod)
        self.nodes.add_handler(self._gpus.on_node)
        self._started = False

    @property
    def informers(self) -> tuple[Informer[Any], ...]:
        return (self.pods, self.deployments, self.statefulsets, self.nodes)

    @property
    def gpus(self) -> GpuLedger:
        return self._gpus

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def start(self) -> None:
        if not self._started:
            self._started = True
            for i in self.informers:
                i.start()

    async def wait_synced(self, timeout_s: float = 10.0) -> None:
        self.start()
        async with asyncio.timeout(timeout_s):
            await asyncio.gather(*(i.synced.wait() for i in self.informers))

    async def stop(self) -> None:
        for i in self.informers:
            await i.stop()
        self._started = False

    # ------------------------------------------------------------------ reading
    def workload(self, kind: str, namespace: str, name: str) -> WorkloadRecord | None:
        informer = self.deployments if kind == "Deployment" else self.statefulsets
        return informer.get(namespace, name)

    def target_pods(self, spec: TargetSpec, work: WorkloadRecord | None) -> TargetPods:
        return self.index.view(
            spec.ref.namespace, spec_selector(spec, work), spec.metrics_port, spec.metrics_path
        )

    def api_requests(self) -> Mapping[str, int]:
        """Requests made by the informers (lists + watch connections), per kind."""
        return {i.name: i.lists + i.watches for i in self.informers}
