"""The object store behind the local API: one global resourceVersion, create/replace/
delete with the API server's validation, conflicts and defaults, lists by selector.
Controllers react through the `_after_write` / `_on_pod_deleted` hooks (see `workloads`).
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from autoscaler.kube.localapi.resources import RESOURCES, ResourceType
from autoscaler.kube.localapi.runtime import DelayRuntime, PodRuntime
from autoscaler.kube.localapi.status import ApiCall, ApiError, Fault, Obj, rfc3339
from autoscaler.kube.localapi.watch import WatchStreams, _WatchDrop, _Watcher
from autoscaler.kube.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
)

_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")


class ObjectStore(WatchStreams):
    """Objects by resource type and key, written as the API server writes them."""

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        *,
        controller: bool = False,
        runtime: PodRuntime | None = None,
        clock: Callable[[], float] = time.time,
        history_limit: int = 5000,
    ) -> None:
        self.host, self._port = host, port
        self.controller = controller
        self.runtime: PodRuntime = runtime or DelayRuntime()
        self.clock = clock
        self.calls: list[ApiCall] = []
        self.faults: list[Fault] = []
        self._drops: list[_WatchDrop] = []
        self._garbage: list[list[Any]] = []  # [path_contains, line, times]
        self._objects: dict[ResourceType, dict[tuple[str, str], Obj]] = {r: {} for r in RESOURCES}
        self._rv = 100
        self._history: deque[tuple[int, ResourceType, str, Obj | None, Obj]] = deque(
            maxlen=history_limit
        )
        self._oldest_rv = self._rv
        self._watchers: list[_Watcher] = []
        self._pod_tasks: dict[str, asyncio.Task[None]] = {}
        self._bg: set[asyncio.Task[None]] = set()
        self._runner: web.AppRunner | None = None
        self.url = ""

    def resource(self, plural: str, group: str = "") -> ResourceType:
        for r in RESOURCES:
            if r.plural == plural and r.group == group:
                return r
        raise KeyError(f"{plural}.{group}")

    def get(self, plural: str, namespace: str | None, name: str, group: str = "") -> Obj | None:
        obj = self._objects[self.resource(plural, group)].get((namespace or "", name))
        return copy.deepcopy(obj) if obj is not None else None

    def list_objects(self, plural: str, namespace: str | None = None, group: str = "") -> list[Obj]:
        rt = self.resource(plural, group)
        return [
            copy.deepcopy(o)
            for (ns, _), o in self._objects[rt].items()
            if namespace is None or ns == namespace
        ]

    def create(self, plural: str, obj: Obj, group: str = "") -> Obj:
        """Create directly (test set-up and the demo); emits watch events as the API does."""
        rt = self.resource(plural, group)
        ns = obj.get("metadata", {}).get("namespace") if rt.namespaced else None
        return copy.deepcopy(self._create(rt, ns, copy.deepcopy(obj)))

    def update(self, plural: str, obj: Obj, group: str = "") -> Obj:
        """Unconditional replace, status included (test set-up)."""
        rt = self.resource(plural, group)
        meta = obj["metadata"]
        key = (meta.get("namespace", "") if rt.namespaced else "", meta["name"])
        current = self._objects[rt][key]
        new = copy.deepcopy(obj)
        new["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        return copy.deepcopy(self._store(rt, current, new))

    def delete(self, plural: str, namespace: str | None, name: str, group: str = "") -> None:
        rt = self.resource(plural, group)
        self._delete(rt, namespace if rt.namespaced else None, name)

    def _conflict(self, rt: ResourceType, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {rt.qualified} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            {"name": name, "group": rt.group, "kind": rt.plural},
        )

    def _check_body(self, rt: ResourceType, body: Any, ns: str | None, name: str | None) -> None:
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the request body must be a JSON object")
        meta = body.get("metadata")
        if not isinstance(meta, dict):
            raise ApiError(422, "Invalid", f"{rt.kind} is invalid: metadata: Required value")
        if name is not None and meta.get("name") not in (None, name):
            raise ApiError(
                400,
                "BadRequest",
                f"the name of the object ({meta.get('name')}) does not match the name on "
                f"the URL ({name})",
            )
        if ns is not None and meta.get("namespace") not in (None, ns):
            raise ApiError(
                400,
                "BadRequest",
                "the namespace of the provided object does not match the namespace sent "
                "on the request",
            )

    def _validate(self, rt: ResourceType, obj: Obj) -> None:
        name = obj["metadata"].get("name", "")
        if not _NAME_RE.match(name or ""):
            raise ApiError(
                422,
                "Invalid",
                f'{rt.kind} "{name}" is invalid: metadata.name: Invalid value: "{name}": '
                "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
                "characters, '-' or '.'",
                {
                    "name": name,
                    "kind": rt.kind,
                    "causes": [{"reason": "FieldValueInvalid", "field": "metadata.name"}],
                },
            )
        replicas = (obj.get("spec") or {}).get("replicas")
        if (
            rt.scale_subresource
            and replicas is not None
            and (not isinstance(replicas, int) or replicas < 0)
        ):
            raise ApiError(
                422,
                "Invalid",
                f'{rt.kind} "{name}" is invalid: spec.replicas: Invalid value: {replicas!r}: '
                "must be greater than or equal to 0",
                {
                    "name": name,
                    "kind": rt.kind,
                    "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas"}],
                },
            )
        if rt.kind == "Lease":
            spec = obj.get("spec") or {}
            lds = spec.get("leaseDurationSeconds")
            if lds is not None and (not isinstance(lds, int) or lds <= 0):
                raise ApiError(
                    422,
                    "Invalid",
                    f'Lease "{name}" is invalid: spec.leaseDurationSeconds: Invalid value: '
                    f"{lds!r}: must be greater than 0",
                )

    # ------------------------------------------------------------- operations
    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _create(self, rt: ResourceType, ns: str | None, obj: Obj) -> Obj:
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + secrets.token_hex(3)[:5]
        name = meta.get("name", "")
        if rt.namespaced:
            meta["namespace"] = ns or meta.get("namespace") or "default"
        else:
            meta.pop("namespace", None)
        key = (meta.get("namespace", ""), name)
        obj["apiVersion"], obj["kind"] = rt.api_version, rt.kind
        self._validate(rt, obj)
        if key in self._objects[rt]:
            raise ApiError(
                409,
                "AlreadyExists",
                f'{rt.qualified} "{name}" already exists',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = rfc3339(self.clock())
        meta["resourceVersion"] = self._next_rv()
        if rt.has_generation:
            meta["generation"] = 1
        self._default(rt, obj)
        self._objects[rt][key] = obj
        self._emit(rt, "ADDED", None, obj)
        self._after_write(rt, obj)
        return copy.deepcopy(obj)

    def _default(self, rt: ResourceType, obj: Obj) -> None:
        if rt.kind in ("Deployment", "StatefulSet"):
            obj.setdefault("spec", {}).setdefault("replicas", 1)
            obj.setdefault("status", {})
        elif rt.kind == "Pod":
            spec = obj.setdefault("spec", {})
            obj.setdefault("status", {}).setdefault("phase", "Pending")
            pcn = spec.get("priorityClassName")
            if pcn and "priority" not in spec:
                pc = self._objects[self.resource("priorityclasses", "scheduling.k8s.io")].get(
                    ("", pcn)
                )
                spec["priority"] = int(pc.get("value", 0)) if pc else 0
                spec["preemptionPolicy"] = (pc or {}).get(
                    "preemptionPolicy", "PreemptLowerPriority"
                )
            spec.setdefault("priority", 0)
        elif rt.kind == "PriorityClass":
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")

    def _store(self, rt: ResourceType, current: Obj, new: Obj) -> Obj:
        if rt.has_generation and new.get("spec") != current.get("spec"):
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        new["metadata"]["resourceVersion"] = self._next_rv()
        meta = new["metadata"]
        self._objects[rt][(meta.get("namespace", ""), meta["name"])] = new
        self._emit(rt, "MODIFIED", current, new)
        self._after_write(rt, new)
        return copy.deepcopy(new)

    def _delete(self, rt: ResourceType, ns: str | None, name: str) -> Obj:
        obj = self._objects[rt].pop((ns or "", name), None)
        if obj is None:
            raise ApiError(404, "NotFound", f'{rt.qualified} "{name}" not found')
        final = copy.deepcopy(obj)
        final["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(rt, "DELETED", obj, final)
        if rt.kind == "Pod":
            self._on_pod_deleted(final)
        elif rt.kind in ("Deployment", "StatefulSet") and self.controller:
            for pod in self._owned_pods(final):
                self._delete(
                    self.resource("pods"), pod["metadata"]["namespace"], pod["metadata"]["name"]
                )
        return final

    def _list(self, rt: ResourceType, ns: str | None, query: Mapping[str, str]) -> Obj:
        try:
            labels = parse_label_selector(query.get("labelSelector"))
            fields = parse_field_selector(query.get("fieldSelector"), rt.plural)
        except SelectorError as err:
            raise ApiError(400, "BadRequest", str(err)) from None
        w = _Watcher(rt, ns, labels, fields)
        rv, after = str(self._rv), None
        token = query.get("continue")
        if token:  # a later page: as of the first page's resourceVersion, after its key
            try:
                rv, after_ns, after_name = json.loads(base64.urlsafe_b64decode(token))
            except (ValueError, TypeError) as err:
                raise ApiError(400, "BadRequest", f"continue: invalid token ({err})") from None
            after = (str(after_ns), str(after_name))
        limit = _limit(query.get("limit"))

        def key(o: Obj) -> tuple[str, str]:
            return (o["metadata"].get("namespace", ""), o["metadata"]["name"])

        matched = sorted(
            (
                o
                for o in self._objects[rt].values()
                if w.match(o) and (after is None or key(o) > after)
            ),
            key=key,
        )
        meta: dict[str, Any] = {"resourceVersion": rv}
        if limit is not None and len(matched) > limit:
            matched = matched[:limit]
            last = key(matched[-1])
            meta["continue"] = base64.urlsafe_b64encode(json.dumps([rv, *last]).encode()).decode()
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": meta,
            "items": [copy.deepcopy(o) for o in matched],
        }

    def _owned_pods(self, owner: Obj) -> list[Obj]:
        uid = owner["metadata"]["uid"]
        return [
            p
            for p in self._objects[self.resource("pods")].values()
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
        ]

    def _after_write(self, rt: ResourceType, obj: Obj) -> None:
        """Hook after every stored write (the workload controller reconciles here)."""

    def _on_pod_deleted(self, pod: Obj) -> None:
        """Hook after a pod's deletion (its runtime is stopped, its owner reconciled)."""


def _limit(value: str | None) -> int | None:
    """``limit`` of a list: a positive integer (0 or absent: everything)."""
    if not value:
        return None
    try:
        n = int(value)
    except ValueError:
        raise ApiError(400, "BadRequest", f"limit: value {value!r} must be an integer") from None
    if n < 0:
        raise ApiError(400, "BadRequest", f"limit: value {n} must be >= 0")
    return n or None
