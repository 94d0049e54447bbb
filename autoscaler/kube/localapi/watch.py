"""The watch machinery: ``?watch=true`` streams with replay from a resourceVersion,
BOOKMARKs, ``410 Gone`` after compaction, and the injected drops and garbage lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from autoscaler.kube.localapi.resources import ResourceType
from autoscaler.kube.localapi.status import ApiError, Obj, _parse_bool
from autoscaler.kube.selectors import (
    SelectorError,
    parse_field_selector,
    parse_label_selector,
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


class WatchStreams:
    """Watch streams of `LocalKubeAPI` (the state is set by `ObjectStore.__init__`)."""

    _objects: dict[ResourceType, dict[tuple[str, str], Obj]]
    _rv: int
    _oldest_rv: int
    _history: deque[tuple[int, ResourceType, str, Obj | None, Obj]]
    _watchers: list[_Watcher]
    _drops: list[_WatchDrop]
    _garbage: list[list[Any]]  # [path_contains, line, times]

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
