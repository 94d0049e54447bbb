"""Kubernetes Events (``core/v1``) on the scale target for every scale change.

``kubectl describe deployment`` then shows why each change happened, with the decision's
reason sentence as the message. ``describe`` finds Events by ``involvedObject.uid``, so the
target's uid is read once (then cached) and set on every Event.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any

from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.domain import Decision, Reason
from autoscaler.logging import get_logger
from autoscaler.names import COMPONENT
from autoscaler.target import TargetSpec

log = get_logger(__name__)
_MAX_MESSAGE = 1024


def _rfc3339(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _micro(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class EventLimiter:
    """Deduplicates and rate-limits one kind of Event per key: allowed when the key's
    reason changes, else at most once every ``interval_s`` (a blind target would otherwise
    post the same Warning every tick). ``now`` is passed in: no clock here."""

    def __init__(self, interval_s: float = 300.0) -> None:
        self.interval_s = interval_s
        self._last: dict[object, tuple[str, float]] = {}

    def allow(self, key: object, reason: str, now: float) -> bool:
        last = self._last.get(key)
        if last is not None and last[0] == reason and now - last[1] < self.interval_s:
            return False
        self._last[key] = (reason, now)
        return True

    def reset(self, key: object) -> None:
        """The condition cleared: the next occurrence is news again."""
        self._last.pop(key, None)


def event_reason(decision: Decision) -> str:
    """CamelCase event reason, as Kubernetes components use (``ScaledUp``...)."""
    if decision.desired_replicas > decision.current_replicas:
        return "ScaledUp"
    if decision.desired_replicas < decision.current_replicas:
        return "ScaledDown"
    return "".join(part.capitalize() for part in str(decision.reason).split("-"))


class EventRecorder:
    """`RecorderPort`: ``record(spec, decision, applied)`` emits one Event per change."""

    def __init__(
        self,
        api: ApiClient,
        *,
        instance: str | None = None,
        wall_clock: Callable[[], float] = time.time,
        request_timeout_s: float = 5.0,
    ) -> None:
        self._core: Any = client.CoreV1Api(api)
        self._apps: Any = client.AppsV1Api(api)
        self._uids: dict[tuple[str, str, str], str] = {}
        self.instance = instance or socket.gethostname()
        self._wall = wall_clock
        self._timeout = request_timeout_s
        self.emitted = 0

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        if not applied or not decision.changed:
            return
        warning = Reason.CAPACITY_LIMITED in decision.limits
        message = (
            f"{decision.current_replicas} -> {decision.desired_replicas} replicas: "
            f"{decision.message}"
        )
        await self.emit(spec, event_reason(decision), message, warning=warning)

    async def _target_uid(self, kind: str, namespace: str, name: str) -> str | None:
        """The workload's uid (cached: it only changes when the object is recreated)."""
        key = (kind, namespace, name)
        if key in self._uids:
            return self._uids[key]
        read = (
            self._apps.read_namespaced_stateful_set
            if kind == "StatefulSet"
            else self._apps.read_namespaced_deployment
        )
        try:
            resp = await read(
                name, namespace, _preload_content=False, _request_timeout=self._timeout
            )
            uid = json.loads(await resp.read())["metadata"].get("uid")
        except (ApiException, TimeoutError, OSError, ValueError, KeyError) as err:
            log.warning("event target uid not read", target=f"{namespace}/{name}", error=str(err))
            return None
        if uid:
            self._uids[key] = str(uid)
        return str(uid) if uid else None

    async def emit(self, spec: TargetSpec, reason: str, message: str, *, warning: bool) -> None:
        """An Event on the scale target. Best effort: a failed write is logged, never fatal."""
        ref = spec.scale_target_ref
        ns = spec.ref.namespace
        involved = {
            "apiVersion": ref.api_version,
            "kind": ref.kind,
            "name": ref.name,
            "namespace": ns,
        }
        uid = await self._target_uid(ref.kind, ns, ref.name)
        if uid:
            involved["uid"] = uid
        if not await self.emit_on(involved, reason, message, warning=warning):
            self._uids.pop((ref.kind, ns, ref.name), None)  # maybe recreated: read again

    async def emit_on(
        self, involved: dict[str, str], reason: str, message: str, *, warning: bool
    ) -> bool:
        """An Event on any object (``involvedObject``: apiVersion, kind, name, namespace,
        uid); returns whether it was written."""
        now = self._wall()
        ns = involved["namespace"]
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": f"{involved['name']}.{uuid.uuid4().hex[:16]}", "namespace": ns},
            "involvedObject": involved,
            "reason": reason,
            "message": message[:_MAX_MESSAGE],
            "type": "Warning" if warning else "Normal",
            "source": {"component": COMPONENT},
            "reportingComponent": COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": _rfc3339(now),
            "lastTimestamp": _rfc3339(now),
            "eventTime": _micro(now),
            "action": "Scale" if involved.get("kind") != "LLMAutoscaler" else "Validate",
            "count": 1,
        }
        try:
            await self._core.create_namespaced_event(ns, body, _request_timeout=self._timeout)
            self.emitted += 1
        except (ApiException, TimeoutError, OSError) as err:
            log.warning("event not written", involved=f"{ns}/{involved['name']}", error=str(err))
            return False
        return True
