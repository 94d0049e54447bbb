"""The apps group's behaviour: the scale subresource, a small deployment/StatefulSet
controller turning replicas into Pods, and a scheduler placing them on nodes by extended
resources (preempting lower-priority pods) and handing each to the `PodRuntime`.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
from collections.abc import Mapping
from typing import Any

from aiohttp import web

from autoscaler.kube.localapi.objects import ObjectStore
from autoscaler.kube.localapi.patch import SUPPORTED, PatchError, apply_patch
from autoscaler.kube.localapi.resources import ResourceType
from autoscaler.kube.localapi.runtime import PodEndpoint, _qty, pod_requests
from autoscaler.kube.localapi.status import ApiError, Obj, rfc3339
from autoscaler.kube.selectors import (
    selector_string,
)
from autoscaler.names import METRICS_PORT_ANNOTATION, POD_DELETION_COST_ANNOTATION


class WorkloadController(ObjectStore):
    """Controllers of `LocalKubeAPI` (``controller=True``) and the scale subresource."""

    def mark_pod_ready(self, namespace: str, name: str, ip: str = "10.0.0.1") -> Obj:
        """Set a pod Running + Ready now (tests that drive readiness by hand)."""
        rt = self.resource("pods")
        cur = self._objects[rt][(namespace, name)]
        return copy.deepcopy(self._set_pod_ready(rt, cur, PodEndpoint(ip=ip)))

    # ----------------------------------------------------------- scale subresource
    def _scale_obj(self, rt: ResourceType, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta["uid"],
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta["creationTimestamp"],
            },
            "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 0))},
            "status": {
                "replicas": int((obj.get("status") or {}).get("replicas", 0)),
                "selector": selector_string((obj.get("spec") or {}).get("selector")),
            },
        }

    def _scale(
        self, request: web.Request, rt: ResourceType, current: Obj, body: Any
    ) -> tuple[Obj, int]:
        scale = self._scale_obj(rt, current)
        name = current["metadata"]["name"]
        if request.method == "GET":
            return scale, 200
        if request.method == "PATCH":
            if request.content_type not in SUPPORTED:
                raise ApiError(
                    415, "UnsupportedMediaType", f"unsupported patch type {request.content_type}"
                )
            try:
                body = apply_patch(request.content_type, scale, body)
            except PatchError as err:
                raise ApiError(
                    422, "Invalid", f'Scale.autoscaling "{name}" is invalid: {err}'
                ) from None
        elif request.method != "PUT":
            raise ApiError(405, "MethodNotAllowed", f"{request.method} is not supported on scale")
        self._check_body(rt, body, current["metadata"]["namespace"], name)
        rv = body["metadata"].get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(rt, name)
        replicas = (body.get("spec") or {}).get("replicas")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 0:
            raise ApiError(
                422,
                "Invalid",
                f'Scale.autoscaling "{name}" is invalid: spec.replicas: Invalid value: '
                f"{replicas!r}: must be greater than or equal to 0",
                {
                    "name": name,
                    "kind": "Scale",
                    "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas"}],
                },
            )
        new = copy.deepcopy(current)
        new["spec"]["replicas"] = replicas
        stored = self._store(rt, current, new)
        return self._scale_obj(rt, stored), 200

    # --------------------------------------------------- deployment controller
    def _after_write(self, rt: ResourceType, obj: Obj) -> None:
        if not self.controller:
            return
        if rt.kind in ("Deployment", "StatefulSet"):
            self._reconcile_workload(rt, obj)
        if rt.kind in ("Pod", "Node"):
            self._schedule_pending()

    def _reconcile_workload(self, rt: ResourceType, owner: Obj) -> None:
        pods_rt = self.resource("pods")
        want = int(owner["spec"].get("replicas", 0))
        pods = self._owned_pods(owner)
        meta = owner["metadata"]
        template = owner["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        for i in range(len(pods), want):
            suffix = (
                str(i)
                if rt.kind == "StatefulSet"
                else f"{secrets.token_hex(5)}-{secrets.token_hex(3)[:5]}"
            )
            pod: Obj = {
                "metadata": {
                    "name": f"{meta['name']}-{suffix}",
                    "namespace": meta["namespace"],
                    "labels": dict(tmeta.get("labels") or {}),
                    "annotations": dict(tmeta.get("annotations") or {}),
                    "ownerReferences": [
                        {
                            "apiVersion": rt.api_version,
                            "kind": rt.kind,
                            "name": meta["name"],
                            "uid": meta["uid"],
                            "controller": True,
                        }
                    ],
                },
                "spec": copy.deepcopy(template.get("spec") or {}),
                "status": {"phase": "Pending"},
            }
            self._create(pods_rt, meta["namespace"], pod)
        if len(pods) > want:
            victims = _victims(pods, len(pods) - want)
            for p in victims:
                key = (p["metadata"]["namespace"], p["metadata"]["name"])
                if key in self._objects[pods_rt]:  # a nested reconcile may have taken it
                    self._delete(pods_rt, *key)
        self._update_workload_status(rt, owner)

    def _update_workload_status(self, rt: ResourceType, owner: Obj) -> None:
        pods = self._owned_pods(owner)
        ready = sum(1 for p in pods if _pod_ready(p))
        status = {
            "observedGeneration": owner["metadata"].get("generation", 1),
            "replicas": len(pods),
            "updatedReplicas": len(pods),
            "readyReplicas": ready,
            "availableReplicas": ready,
        }
        key = (owner["metadata"]["namespace"], owner["metadata"]["name"])
        current = self._objects[rt].get(key)
        if current is None or current.get("status") == status:
            return
        new = copy.deepcopy(current)
        new["status"] = status
        new["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[rt][key] = new
        self._emit(rt, "MODIFIED", current, new)

    def _owner_of(self, pod: Obj) -> tuple[ResourceType, Obj] | None:
        for ref in pod["metadata"].get("ownerReferences") or []:
            for kind in ("deployments", "statefulsets"):
                rt = self.resource(kind, "apps")
                owner = self._objects[rt].get((pod["metadata"]["namespace"], ref.get("name")))
                if owner is not None and owner["metadata"]["uid"] == ref.get("uid"):
                    return rt, owner
        return None

    def _node_free(self) -> dict[str, dict[str, float]]:
        nodes = self._objects[self.resource("nodes")]
        free = {
            name: {
                k: _qty(v) for k, v in ((n.get("status") or {}).get("allocatable") or {}).items()
            }
            for (_, name), n in nodes.items()
            if not (n.get("spec") or {}).get("unschedulable")
        }
        for p in self._objects[self.resource("pods")].values():
            node = (p.get("spec") or {}).get("nodeName")
            if node in free and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                for k, v in pod_requests(p["spec"]).items():
                    free[node][k] = free[node].get(k, 0.0) - v
        return free

    def _schedule_pending(self) -> None:
        pods_rt = self.resource("pods")
        pending = [
            p
            for p in self._objects[pods_rt].values()
            if not (p.get("spec") or {}).get("nodeName") and p["status"].get("phase") == "Pending"
        ]
        if not pending:
            return
        has_nodes = bool(self._objects[self.resource("nodes")])
        pending.sort(
            key=lambda p: (-int(p["spec"].get("priority", 0)), p["metadata"]["creationTimestamp"])
        )
        for stale in pending:
            # Preempting a victim re-enters this method (its deletion schedules pending
            # pods), so a pod of this list may already be placed: re-read it first.
            meta = stale["metadata"]
            pod = self._objects[pods_rt].get((meta["namespace"], meta["name"]))
            if pod is None or (pod.get("spec") or {}).get("nodeName"):
                continue
            node = "local-node" if not has_nodes else self._fit(pod)
            if node is None:
                self._mark_unschedulable(pods_rt, pod)
                continue
            new = copy.deepcopy(pod)
            new["spec"]["nodeName"] = node
            new["status"]["conditions"] = [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": rfc3339(self.clock()),
                }
            ]
            self._store_quiet(pods_rt, pod, new)
            self._start_pod(new)

    def _mark_unschedulable(self, rt: ResourceType, pod: Obj) -> None:
        """kube-scheduler's verdict on a pod no node fits: ``PodScheduled=False``, reason
        ``Unschedulable`` (written once, as the scheduler does not rewrite an unchanged
        condition)."""
        conds = pod["status"].get("conditions") or []
        if any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conds):
            return
        new = copy.deepcopy(pod)
        new["status"]["conditions"] = [
            *(c for c in conds if c.get("type") != "PodScheduled"),
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0 nodes are available: insufficient extended resources",
                "lastTransitionTime": rfc3339(self.clock()),
            },
        ]
        self._store_quiet(rt, pod, new)

    def _fit(self, pod: Obj) -> str | None:
        """First node that fits the pod's extended resources, preempting lower-priority pods
        (pause pods of the warm pool) when the pod's preemptionPolicy allows."""
        want = {k: v for k, v in pod_requests(pod["spec"]).items() if "/" in k}
        selector = pod["spec"].get("nodeSelector") or {}
        nodes = self._objects[self.resource("nodes")]
        free = self._node_free()
        candidates = [
            name
            for name in sorted(free)
            if all(
                ((nodes[("", name)]["metadata"].get("labels") or {}).get(k) == v)
                for k, v in selector.items()
            )
        ]
        for name in candidates:
            if all(free[name].get(k, 0.0) >= v for k, v in want.items()):
                return name
        if pod["spec"].get("preemptionPolicy") == "Never":
            return None
        prio = int(pod["spec"].get("priority", 0))
        pods_rt = self.resource("pods")
        for name in candidates:
            victims = sorted(
                (
                    p
                    for p in self._objects[pods_rt].values()
                    if p["spec"].get("nodeName") == name
                    and int(p["spec"].get("priority", 0)) < prio
                ),
                key=lambda p: int(p["spec"].get("priority", 0)),
            )
            avail = dict(free[name])
            chosen: list[Obj] = []
            for v in victims:
                if all(avail.get(k, 0.0) >= q for k, q in want.items()):
                    break
                chosen.append(v)
                for k, q in pod_requests(v["spec"]).items():
                    avail[k] = avail.get(k, 0.0) + q
            if all(avail.get(k, 0.0) >= q for k, q in want.items()):
                for v in chosen:
                    self._delete(pods_rt, v["metadata"]["namespace"], v["metadata"]["name"])
                return name
        return None

    def _store_quiet(self, rt: ResourceType, current: Obj, new: Obj) -> None:
        """Store + emit without re-running the controller hooks (no recursion)."""
        new["metadata"]["resourceVersion"] = self._next_rv()
        meta = new["metadata"]
        self._objects[rt][(meta.get("namespace", ""), meta["name"])] = new
        self._emit(rt, "MODIFIED", current, new)

    def _start_pod(self, pod: Obj) -> None:
        uid = pod["metadata"]["uid"]

        async def run() -> None:
            endpoint = await self.runtime.start(copy.deepcopy(pod))
            rt = self.resource("pods")
            cur = self._objects[rt].get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
            if cur is not None and cur["metadata"]["uid"] == uid:
                self._set_pod_ready(rt, cur, endpoint)

        task = asyncio.get_running_loop().create_task(run())
        self._pod_tasks[uid] = task
        task.add_done_callback(lambda _t: self._pod_tasks.pop(uid, None))

    def _set_pod_ready(self, rt: ResourceType, cur: Obj, endpoint: PodEndpoint) -> Obj:
        now = rfc3339(self.clock())
        new = copy.deepcopy(cur)
        if endpoint.metrics_port is not None:
            new["metadata"].setdefault("annotations", {})[METRICS_PORT_ANNOTATION] = str(
                endpoint.metrics_port
            )
        new["spec"].setdefault("nodeName", "local-node")
        conds = [
            c
            for c in new["status"].get("conditions") or []
            if c["type"] not in ("Ready", "ContainersReady")
        ]
        conds += [
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
        ]
        new["status"].update(
            {
                "phase": "Running",
                "podIP": endpoint.ip,
                "podIPs": [{"ip": endpoint.ip}],
                "startTime": new["status"].get("startTime", now),
                "conditions": conds,
            }
        )
        self._store_quiet(rt, cur, new)
        owner = self._owner_of(new)
        if owner is not None:
            self._update_workload_status(*owner)
        return new

    def _on_pod_deleted(self, pod: Obj) -> None:
        task = self._pod_tasks.pop(pod["metadata"]["uid"], None)
        if task is not None:
            task.cancel()
        if not self.controller:
            return
        if pod["spec"].get("nodeName"):
            stop = asyncio.get_running_loop().create_task(self.runtime.stop(copy.deepcopy(pod)))
            self._bg.add(stop)
            stop.add_done_callback(self._bg.discard)
        owner = self._owner_of(pod)
        if owner is not None:
            rt, obj = owner
            self._reconcile_workload(rt, obj)
        self._schedule_pending()


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _victims(pods: list[Obj], n: int) -> list[Obj]:
    """Like the ReplicaSet controller: unscheduled, then not-ready, then the lower
    ``controller.kubernetes.io/pod-deletion-cost``, then newest first."""
    ranked = sorted(
        pods,
        key=lambda p: (
            bool((p.get("spec") or {}).get("nodeName")),
            _pod_ready(p),
            _deletion_cost(p),
            _neg_ts(p["metadata"]["creationTimestamp"]),
        ),
    )
    return ranked[:n]


def _deletion_cost(pod: Obj) -> int:
    raw = ((pod.get("metadata") or {}).get("annotations") or {}).get(
        POD_DELETION_COST_ANNOTATION, "0"
    )
    try:
        return int(raw)
    except ValueError:  # the API server refuses such a value; read it as unset
        return 0


def _neg_ts(ts: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in ts)
