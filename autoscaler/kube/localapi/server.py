"""A local Kubernetes-API-compatible endpoint (aiohttp on 127.0.0.1).

No kube-apiserver can run on the development machines, so tests and the demo talk through
kubernetes-asyncio to this server over a real socket. It keeps the real API's semantics
for the calls the controller makes: JSON shapes, `Status` error bodies with reason/code,
one global resourceVersion with 409 on mismatch, status and scale subresources, merge and
JSON patches, label/field selectors, and ``?watch=true`` streams (with replay from a
resourceVersion, BOOKMARKs and ``410 Gone`` after compaction).

It also records every call (`calls`) so a test can check the code's calls against RBAC,
injects faults (`inject`, `drop_watches`, `compact`), and optionally runs a small
deployment controller + scheduler (`controller=True`) that turns replicas into Pods and
hands each Pod to a `PodRuntime` (the demo attaches an emulated vLLM server per pod).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import re
import secrets
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from autoscaler.kube.localapi.patch import SUPPORTED, PatchError, apply_patch
from autoscaler.kube.localapi.resources import BY_PATH, RESOURCES, ResourceType
from autoscaler.kube.names import METRICS_PORT_ANNOTATION
from autoscaler.kube.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
    selector_string,
)

Obj = dict[str, Any]
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


def rfc3339(t: float) -> str:
    """Second precision, as the API server writes metav1.Time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class ApiError(Exception):
    """Answered as a `Status` object with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


_FAULT_REASONS = {
    409: "Conflict",
    410: "Gone",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One request as RBAC sees it: verb, group, resource[/subresource]."""

    verb: str
    group: str
    resource: str  # includes the subresource: "deployments/scale"
    namespace: str | None
    name: str | None
    status: int
    user_agent: str = ""
    field_manager: str | None = None  # the ``fieldManager`` query parameter, if any


@dataclass
class Fault:
    """Applies to the next ``times`` requests whose method/path match."""

    path_contains: str
    times: int = 1
    status: int | None = None
    method: str | None = None
    delay_s: float = 0.0
    after_apply: bool = False  # the write happens, then the error is returned
    retry_after_s: int | None = None

    def matches(self, method: str, path: str) -> bool:
        return (
            self.times > 0
            and self.path_contains in path
            and (self.method is None or self.method == method)
        )


@dataclass
class _WatchDrop:
    path_contains: str
    after_events: int
    times: int


@dataclass
class _Watcher:
    rt: ResourceType
    namespace: str | None
    labels: Callable[[Mapping[str, str]], bool]
    fields: Callable[[Mapping[str, Any]], bool]
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)

    def match(self, obj: Obj | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata", {})
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        return self.labels(meta.get("labels") or {}) and self.fields(obj)


@dataclass(frozen=True, slots=True)
class PodEndpoint:
    """Where a started pod answers: its IP and, on 127.0.0.1, its own metrics port."""

    ip: str
    metrics_port: int | None = None


class PodRuntime(Protocol):
    """What runs a pod once scheduled. ``start`` returns when the pod is Ready."""

    async def start(self, pod: Obj) -> PodEndpoint: ...

    async def stop(self, pod: Obj) -> None: ...


class DelayRuntime:
    """Pods become Ready ``ready_after_s`` after being scheduled (``None``: never, the test
    marks them Ready with `LocalKubeAPI.mark_pod_ready`)."""

    def __init__(self, ready_after_s: float | None = 0.0) -> None:
        self.ready_after_s = ready_after_s
        self._n = 0

    async def start(self, pod: Obj) -> PodEndpoint:
        if self.ready_after_s is None:
            await asyncio.Event().wait()
        await asyncio.sleep(self.ready_after_s or 0.0)
        self._n += 1
        return PodEndpoint(ip=f"10.244.{self._n // 250}.{self._n % 250 + 1}")

    async def stop(self, pod: Obj) -> None:
        return None


def _qty(value: Any) -> float:
    """Kubernetes quantity to a float (enough for GPU counts, cpu and memory)."""
    s = str(value)
    suffixes = {
        "m": 1e-3,
        "k": 1e3,
        "M": 1e6,
        "G": 1e9,
        "T": 1e12,
        "Ki": 1024.0,
        "Mi": 1024.0**2,
        "Gi": 1024.0**3,
        "Ti": 1024.0**4,
    }
    for suf in ("Ki", "Mi", "Gi", "Ti", "m", "k", "M", "G", "T"):
        if s.endswith(suf):
            return float(s[: -len(suf)]) * suffixes[suf]
    return float(s)


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    """Sum of container requests (limits stand in for extended resources)."""
    out: dict[str, float] = {}
    for c in pod_spec.get("containers") or []:
        res = c.get("resources") or {}
        merged = {**(res.get("limits") or {}), **(res.get("requests") or {})}
        for k, v in merged.items():
            out[k] = out.get(k, 0.0) + _qty(v)
    return out


class LocalKubeAPI:
    """``async with LocalKubeAPI(port=0) as api: api.url`` -- see the module docstring."""

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

    # ------------------------------------------------------------------ lifecycle
    async def __aenter__(self) -> LocalKubeAPI:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self) -> None:
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # access_log=None: a request line per call drowned the demo terminal (issue 19).
        self._runner = web.AppRunner(
            app, handle_signals=False, shutdown_timeout=1.0, access_log=None
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self._port)
        await site.start()
        server = site._server
        assert server is not None
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self.url = f"http://{self.host}:{port}"

    async def close(self) -> None:
        for w in self._watchers:
            w.queue.put_nowait(None)
        tasks = [*self._pod_tasks.values(), *self._bg]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ------------------------------------------------------------ fault injection
    def inject(
        self,
        path_contains: str,
        status: int | None = None,
        *,
        times: int = 1,
        method: str | None = None,
        delay_s: float = 0.0,
        after_apply: bool = False,
        retry_after_s: int | None = None,
    ) -> Fault:
        """The next ``times`` matching requests are delayed and/or answered ``status``."""
        fault = Fault(path_contains, times, status, method, delay_s, after_apply, retry_after_s)
        self.faults.append(fault)
        return fault

    def drop_watches(self, path_contains: str, *, after_events: int = 0, times: int = 1) -> None:
        """The next ``times`` matching watch streams close after ``after_events`` events."""
        self._drops.append(_WatchDrop(path_contains, after_events, times))

    def garble_watches(self, path_contains: str, line: str, *, times: int = 1) -> None:
        """The next ``times`` matching watch streams first send ``line`` (not a watch
        event: a raw string, an error page) and then go on as usual."""
        self._garbage.append([path_contains, line, times])

    def compact(self) -> None:
        """Forget history: watches from an older resourceVersion get ``410 Gone``."""
        self._history.clear()
        self._oldest_rv = self._rv

    def drop_all_watches(self) -> None:
        """Close every open watch stream now (an apiserver restart, an LB idle timeout)."""
        for w in self._watchers:
            w.queue.put_nowait(None)

    # ---------------------------------------------------------------- store API
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

    def mark_pod_ready(self, namespace: str, name: str, ip: str = "10.0.0.1") -> Obj:
        """Set a pod Running + Ready now (tests that drive readiness by hand)."""
        rt = self.resource("pods")
        cur = self._objects[rt][(namespace, name)]
        return copy.deepcopy(self._set_pod_ready(rt, cur, PodEndpoint(ip=ip)))

    # ------------------------------------------------------------- HTTP handling
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        method, path = request.method, request.path
        try:
            rt, ns, name, sub = self._route(path)
        except ApiError as err:
            return web.json_response(err.status(), status=err.code)
        watch = _parse_bool(request.query.get("watch"))
        verb = _VERBS.get(method, "get")
        if method == "GET":
            verb = "watch" if watch else ("get" if name else "list")
        resource = f"{rt.plural}/{sub}" if sub else rt.plural
        who = (request.headers.get("User-Agent", ""), request.query.get("fieldManager"))
        fault = next((f for f in self.faults if f.matches(method, path)), None)
        if fault is not None:
            fault.times -= 1
            if fault.delay_s:
                await asyncio.sleep(fault.delay_s)
        status = 200
        try:
            if fault is not None and fault.status is not None and not fault.after_apply:
                raise ApiError(
                    fault.status,
                    _FAULT_REASONS.get(fault.status, "InternalError"),
                    f"injected fault {fault.status}",
                )
            if watch:
                self.calls.append(ApiCall(verb, rt.group, resource, ns, name, 200, *who))
                return await self._watch(request, rt, ns)
            body, status = await self._dispatch(request, rt, ns, name, sub)
            if fault is not None and fault.status is not None:
                raise ApiError(
                    fault.status,
                    _FAULT_REASONS.get(fault.status, "InternalError"),
                    f"injected fault {fault.status} (after the write was applied)",
                )
            self.calls.append(ApiCall(verb, rt.group, resource, ns, name, status, *who))
            return web.json_response(body, status=status)
        except ApiError as err:
            self.calls.append(ApiCall(verb, rt.group, resource, ns, name, err.code, *who))
            headers = {}
            if fault is not None and fault.retry_after_s is not None:
                headers["Retry-After"] = str(fault.retry_after_s)
            return web.json_response(err.status(), status=err.code, headers=headers)

    def _route(self, path: str) -> tuple[ResourceType, str | None, str | None, str | None]:
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        ns: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            ns, rest = rest[1], rest[2:]
        if not rest or len(rest) > 3:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        rt = BY_PATH.get((group, version, rest[0]))
        if rt is None:
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and not (
            (sub == "status" and rt.status_subresource) or (sub == "scale" and rt.scale_subresource)
        ):
            raise ApiError(
                404, "NotFound", f"the server could not find the requested resource ({path})"
            )
        if ns is not None and not rt.namespaced:
            raise ApiError(404, "NotFound", f"{rt.qualified} is not namespaced")
        if rt.namespaced and name is not None and ns is None:
            raise ApiError(404, "NotFound", f"{rt.qualified} {name!r} needs a namespace")
        return rt, ns, name, sub

    async def _body(self, request: web.Request) -> Any:
        try:
            return await request.json(loads=json.loads)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ApiError(400, "BadRequest", f"invalid JSON body: {err}") from None

    async def _dispatch(
        self,
        request: web.Request,
        rt: ResourceType,
        ns: str | None,
        name: str | None,
        sub: str | None,
    ) -> tuple[Obj, int]:
        method = request.method
        if name is None:
            if method == "GET":
                return self._list(rt, ns, request.query), 200
            if method == "POST":
                if ns is None and rt.namespaced:
                    raise ApiError(405, "MethodNotAllowed", "create needs a namespace")
                body = await self._body(request)
                self._check_body(rt, body, ns, None)
                return self._create(rt, ns, body), 201
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported on a collection")
        current = self._objects[rt].get((ns or "", name))
        if current is None:
            raise ApiError(
                404,
                "NotFound",
                f'{rt.qualified} "{name}" not found',
                {"name": name, "group": rt.group, "kind": rt.plural},
            )
        if sub == "scale":
            return self._scale(
                request,
                rt,
                current,
                await self._body(request) if method in ("PUT", "PATCH") else None,
            )
        if method == "GET":
            return copy.deepcopy(current), 200
        if method == "DELETE":
            body = await self._body(request) if request.can_read_body else None
            pre = (body or {}).get("preconditions") or {}
            if (
                pre.get("resourceVersion")
                and pre["resourceVersion"] != current["metadata"]["resourceVersion"]
            ):
                raise self._conflict(rt, name)
            if pre.get("uid") and pre["uid"] != current["metadata"]["uid"]:
                raise self._conflict(rt, name)
            return self._delete(rt, ns, name), 200
        body = await self._body(request)
        if method == "PATCH":
            ctype = request.content_type
            if ctype not in SUPPORTED:
                raise ApiError(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types "
                    "include: " + ", ".join(sorted(SUPPORTED)),
                )
            try:
                body = apply_patch(ctype, copy.deepcopy(current), body)
            except PatchError as err:
                raise ApiError(422, "Invalid", f'{rt.kind} "{name}" is invalid: {err}') from None
            if not isinstance(body, dict):
                raise ApiError(
                    422,
                    "Invalid",
                    f'{rt.kind} "{name}" is invalid: the patch result is not an object',
                )
        elif method != "PUT":
            raise ApiError(405, "MethodNotAllowed", f"{method} is not supported")
        self._check_body(rt, body, ns, name)
        rv = body.get("metadata", {}).get("resourceVersion")
        if rv and rv != current["metadata"]["resourceVersion"]:
            raise self._conflict(rt, name)
        new = copy.deepcopy(current)
        if sub == "status":
            new["status"] = body.get("status")
        else:
            keep_status = current.get("status")
            new = body
            new.setdefault("metadata", {})
            for k in ("uid", "creationTimestamp", "generation", "namespace"):
                if k in current["metadata"]:
                    new["metadata"][k] = current["metadata"][k]
            new["apiVersion"], new["kind"] = rt.api_version, rt.kind
            if rt.status_subresource:
                if keep_status is None:
                    new.pop("status", None)
                else:
                    new["status"] = keep_status
        self._validate(rt, new)
        return self._store(rt, current, new), 200

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

    def _emit(self, rt: ResourceType, kind: str, old: Obj | None, new: Obj) -> None:
        rv = int(new["metadata"]["resourceVersion"])
        self._history.append((rv, rt, kind, old, new))
        for w in self._watchers:
            if w.rt is rt:
                self._deliver(w, kind, old, new)

    def _deliver(self, w: _Watcher, kind: str, old: Obj | None, new: Obj) -> None:
        was, now = w.match(old), w.match(new)
        if kind == "DELETED":
            if was or now:
                w.queue.put_nowait({"type": "DELETED", "object": copy.deepcopy(new)})
        elif now:
            ev = "MODIFIED" if (kind == "MODIFIED" and was) else "ADDED"
            w.queue.put_nowait({"type": ev, "object": copy.deepcopy(new)})
        elif was:
            w.queue.put_nowait({"type": "DELETED", "object": copy.deepcopy(new)})

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
        items = [copy.deepcopy(o) for o in self._objects[rt].values() if w.match(o)]
        items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        return {
            "kind": f"{rt.kind}List",
            "apiVersion": rt.api_version,
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _watch(
        self, request: web.Request, rt: ResourceType, ns: str | None
    ) -> web.StreamResponse:
        q = request.query
        try:
            w = _Watcher(
                rt,
                ns,
                parse_label_selector(q.get("labelSelector")),
                parse_field_selector(q.get("fieldSelector"), rt.plural),
            )
        except SelectorError as err:
            raise ApiError(400, "BadRequest", str(err)) from None
        rv_param = q.get("resourceVersion") or "0"
        bookmarks = _parse_bool(q.get("allowWatchBookmarks"))
        timeout_s = float(q["timeoutSeconds"]) if "timeoutSeconds" in q else None
        drop = next(
            (d for d in self._drops if d.times > 0 and d.path_contains in request.path), None
        )
        if drop is not None:
            drop.times -= 1
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            since = int(rv_param)
        except ValueError:
            since = -1
        if rv_param != "0" and (since < self._oldest_rv or since > self._rv):
            gone = ApiError(
                410, "Expired", f"too old resource version: {rv_param} ({self._oldest_rv})"
            )
            await resp.write(
                (json.dumps({"type": "ERROR", "object": gone.status()}) + "\n").encode()
            )
            await resp.write_eof()
            return resp
        for g in self._garbage:
            if g[2] > 0 and g[0] in request.path:
                g[2] -= 1
                await resp.write((g[1] + "\n").encode())
        self._watchers.append(w)
        if rv_param == "0":
            for o in sorted(
                self._objects[rt].values(), key=lambda o: int(o["metadata"]["resourceVersion"])
            ):
                if w.match(o):
                    w.queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(o)})
        else:
            for rv, hrt, kind, old, new in list(self._history):
                if hrt is rt and rv > since:
                    self._deliver(w, kind, old, new)
        if bookmarks:
            bm = {
                "kind": rt.kind,
                "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(self._rv)},
            }
            w.queue.put_nowait({"type": "BOOKMARK", "object": bm})
        sent = 0
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        try:
            while True:
                if drop is not None and sent >= drop.after_events:
                    break
                remaining = None if deadline is None else deadline - loop.time()
                if remaining is not None and remaining <= 0:
                    break
                try:
                    ev = await asyncio.wait_for(w.queue.get(), remaining)
                except TimeoutError:
                    break
                if ev is None:
                    break
                await resp.write((json.dumps(ev) + "\n").encode())
                if ev["type"] != "BOOKMARK":
                    sent += 1
        except (ConnectionResetError, asyncio.CancelledError):
            pass
        finally:
            self._watchers.remove(w)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp

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

    def _owned_pods(self, owner: Obj) -> list[Obj]:
        uid = owner["metadata"]["uid"]
        return [
            p
            for p in self._objects[self.resource("pods")].values()
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])
        ]

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


def _parse_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool truthy spellings (the client sends ``True``)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _pod_ready(pod: Mapping[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or []
    )


def _victims(pods: list[Obj], n: int) -> list[Obj]:
    """Like the ReplicaSet controller: unscheduled, then not-ready, then newest first."""
    ranked = sorted(
        pods,
        key=lambda p: (
            bool((p.get("spec") or {}).get("nodeName")),
            _pod_ready(p),
            _neg_ts(p["metadata"]["creationTimestamp"]),
        ),
    )
    return ranked[:n]


def _neg_ts(ts: str) -> tuple[int, ...]:
    return tuple(-ord(c) for c in ts)
