"""A shared informer: one list + watch per resource kind, kept as an in-memory cache.

client-go's reflector in miniature, over raw JSON (no model deserialisation):

- list, then watch from the list's resourceVersion; a stream that ends (server timeout,
  dropped connection) resumes from the last resourceVersion seen, so no event is missed;
- ``410 Gone`` (history compacted) re-lists, and handlers see the difference between the
  old cache and the new list as adds, updates and deletes;
- a line that is not a watch event (a raw string, an HTML error page, JSON without
  ``type``/``object``) is logged and skipped: the watch goes on;
- every request has a client-side timeout (the watch: the server's ``timeoutSeconds`` plus
  slack), so a dead connection can never hang it;
- ``transform`` turns each object into a compact record before it is stored (a pod's JSON
  is kilobytes; the controller needs a few fields), like client-go's ``SetTransform``.

Handlers run synchronously on the event loop for every change, in order; they must be
cheap and must not raise (an exception is logged and the informer goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Generic, TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.logging import get_logger
from autoscaler.retry import RetryPolicy, Sleep, backoff_s, describe, read_json

log = get_logger(__name__)

T = TypeVar("T")
Key = tuple[str, str]  # (namespace or "", name)
Handler = Callable[[Key, T | None, T | None], None]  # (key, old, new); new None: deleted
ListFn = Callable[..., Awaitable[Any]]


def object_key(obj: Mapping[str, Any]) -> Key:
    meta = obj["metadata"]
    return (str(meta.get("namespace") or ""), str(meta["name"]))


class Informer(Generic[T]):
    """List + watch one kind; ``items`` is the cache, ``synced`` is set after the first list.

    ``list_fn`` is a kubernetes-asyncio list method with its positional arguments bound
    (e.g. ``CoreV1Api(api).list_pod_for_all_namespaces``); it is called with
    ``_preload_content=False`` for both the list and the watch.
    """

    def __init__(
        self,
        name: str,
        list_fn: ListFn,
        transform: Callable[[Mapping[str, Any]], T],
        *,
        label_selector: str | None = None,
        retry: RetryPolicy | None = None,
        watch_timeout_s: int = 300,
        sleep: Sleep = asyncio.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self.name = name
        self._list_fn = list_fn
        self._transform = transform
        self._label_selector = label_selector
        self._retry = retry or RetryPolicy()
        self._watch_timeout_s = watch_timeout_s
        self._sleep, self._rand = sleep, rand
        self._handlers: list[Handler[T]] = []
        self.items: dict[Key, T] = {}
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self._changed = asyncio.Event()  # set and replaced after every list/event
        self._task: asyncio.Task[None] | None = None
        # Counters for tests and the scale benchmark (API traffic from this informer).
        self.lists = 0
        self.watches = 0
        self.events = 0
        self.malformed = 0

    # ------------------------------------------------------------------ reading
    def get(self, namespace: str, name: str) -> T | None:
        return self.items.get((namespace, name))

    def add_handler(self, handler: Handler[T]) -> None:
        """Called for every change from now on (not for what is already cached)."""
        self._handlers.append(handler)

    async def wait_synced(self, timeout_s: float = 10.0) -> None:
        async with asyncio.timeout(timeout_s):
            await self.synced.wait()

    async def wait_for(self, predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
        """Wait until ``predicate()`` holds after some list or event (TimeoutError)."""
        async with asyncio.timeout(timeout_s):
            while not predicate():
                await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self.run(), name=f"informer/{self.name}"
            )

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def run(self) -> None:
        """List, then watch from the list's resourceVersion; forever (cancel to stop)."""
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._relist()
                await self._watch_once()
                failures = 0
            except ApiException as err:
                if err.status == 410:
                    log.info("watch expired, re-listing", informer=self.name)
                    self.resource_version = None
                    continue
                failures += 1
                log.warning("watch failed", informer=self.name, error=describe(err))
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))
            except (TimeoutError, aiohttp.ClientError, OSError, ValueError, KeyError) as err:
                # ValueError/KeyError: a list answer that is not a list (re-list next time).
                failures += 1
                log.warning("watch failed", informer=self.name, error=describe(err))
                if isinstance(err, ValueError | KeyError):
                    self.resource_version = None
                await self._sleep(backoff_s(min(failures, 6), self._retry, self._rand))

    # ------------------------------------------------------------------ list/watch
    def _kw(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"_preload_content": False}
        if self._label_selector:
            kw["label_selector"] = self._label_selector
        return kw

    async def _relist(self) -> None:
        resp = await self._list_fn(**self._kw(), _request_timeout=self._retry.request_timeout_s)
        self.lists += 1
        body = await read_json(resp)
        fresh: dict[Key, T] = {}
        for obj in body.get("items") or []:
            fresh[object_key(obj)] = self._transform(obj)
        old, self.items = self.items, fresh
        self.resource_version = str(body["metadata"]["resourceVersion"])
        for key, item in fresh.items():
            prev = old.get(key)
            if prev != item:
                self._fire(key, prev, item)
        for key, prev in old.items():
            if key not in fresh:
                self._fire(key, prev, None)
        self.synced.set()
        self._notify()

    async def _watch_once(self) -> None:
        # Client-side: connect within the request timeout; a read silent for longer than
        # the server's own timeout plus slack is a dead connection.
        timeout = aiohttp.ClientTimeout(
            sock_connect=self._retry.request_timeout_s,
            connect=self._retry.request_timeout_s,
            sock_read=self._watch_timeout_s + 30,
        )
        resp = await self._list_fn(
            **self._kw(),
            watch=True,
            resource_version=self.resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=self._watch_timeout_s,
            _request_timeout=timeout,
        )
        self.watches += 1
        try:
            if not 200 <= int(resp.status) <= 299:
                await read_json(resp)  # raises ApiException with the status
            while line := await resp.content.readline():
                self._on_line(line)
                self._notify()
        finally:
            resp.release()

    def _on_line(self, line: bytes) -> None:
        if not line.strip():
            return
        try:
            event = json.loads(line)
        except ValueError:
            event = None
        if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
            self.malformed += 1
            log.warning(
                "malformed watch event skipped",
                informer=self.name,
                line=line[:200].decode(errors="replace"),
            )
            return
        kind, obj = event.get("type"), event["object"]
        if kind == "ERROR":
            code = int(obj.get("code") or 500)
            raise ApiException(status=code, reason=str(obj.get("message") or obj.get("reason")))
        rv = (obj.get("metadata") or {}).get("resourceVersion")
        if kind == "BOOKMARK":
            if rv:
                self.resource_version = str(rv)
            return
        if kind not in ("ADDED", "MODIFIED", "DELETED") or rv is None:
            self.malformed += 1
            log.warning("malformed watch event skipped", informer=self.name, type=str(kind))
            return
        try:
            key = object_key(obj)
            item = None if kind == "DELETED" else self._transform(obj)
        except (KeyError, TypeError, ValueError) as err:
            self.malformed += 1
            log.warning("malformed watch object skipped", informer=self.name, error=repr(err))
            self.resource_version = str(rv)
            return
        self.resource_version = str(rv)
        self.events += 1
        if item is None:
            prev = self.items.pop(key, None)
            if prev is not None:
                self._fire(key, prev, None)
        else:
            prev = self.items.get(key)
            self.items[key] = item
            if prev != item:
                self._fire(key, prev, item)

    def _fire(self, key: Key, old: T | None, new: T | None) -> None:
        for handler in self._handlers:
            try:
                handler(key, old, new)
            except Exception:  # a handler bug must not stop the cache
                log.exception("informer handler failed", informer=self.name, key="/".join(key))
