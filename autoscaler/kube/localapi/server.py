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

Modules: `status` (errors), `runtime` (what runs a pod), `watch` (streams), `objects`
(the store), `workloads` (scale subresource, controllers, scheduler), this one (HTTP, faults).
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

from aiohttp import web

from autoscaler.kube.localapi.patch import SUPPORTED, PatchError, apply_patch
from autoscaler.kube.localapi.resources import BY_PATH, ResourceType
from autoscaler.kube.localapi.runtime import DelayRuntime, PodEndpoint, PodRuntime, pod_requests
from autoscaler.kube.localapi.status import (
    _FAULT_REASONS,
    ApiCall,
    ApiError,
    Fault,
    Obj,
    _parse_bool,
    rfc3339,
)
from autoscaler.kube.localapi.workloads import WorkloadController

_VERBS = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}


class LocalKubeAPI(WorkloadController):
    """``async with LocalKubeAPI(port=0) as api: api.url`` -- see the module docstring."""

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


__all__ = [
    "ApiCall",
    "ApiError",
    "DelayRuntime",
    "Fault",
    "LocalKubeAPI",
    "Obj",
    "PodEndpoint",
    "PodRuntime",
    "pod_requests",
    "rfc3339",
]
