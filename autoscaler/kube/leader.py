"""Leader election through a ``coordination.k8s.io/v1`` Lease: only the leader writes.

Same algorithm as client-go's leaderelection, with an injectable monotonic clock (the
kubernetes-asyncio one reads ``time.time`` and sleeps for real, so it cannot be tested
without waiting, and keeps acting as leader until a renew *fails*):

- a candidate takes the Lease only when it has seen the same record unchanged for
  ``lease_duration_s`` on its own clock (no cross-node clock comparison);
- every write is a replace with the read resourceVersion, so two candidates racing for an
  expired Lease cannot both win (the loser gets 409);
- the leader considers itself leader only until ``renew_deadline_s`` after the start of
  its last successful renew, which is shorter than ``lease_duration_s``: a stalled or
  partitioned leader stops writing before anyone else can take over.

Failover after a leader dies takes at most ``lease_duration_s + retry_period_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.errors import ConfigError
from autoscaler.logging import get_logger

log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    namespace: str
    name: str = "llm-autoscaler"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ConfigError(
                "leader election timings: need 0 < retryPeriod "
                f"({self.retry_period_s}) < renewDeadline ({self.renew_deadline_s}) < "
                f"leaseDuration ({self.lease_duration_s})"
            )


def micro_time(t: float) -> str:
    """A Lease's MicroTime (RFC 3339, microseconds, UTC) for the epoch time ``t``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(
    name: str,
    namespace: str,
    *,
    holder: str,
    duration_s: int,
    acquire_time: str | None,
    renew_time: str | None,
    transitions: int,
    resource_version: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A coordination.k8s.io/v1 Lease held by ``holder``: the body of a create (no
    ``resource_version``) or of a conflict-checked replace. Used by the single leader
    Lease and by the shard and member Leases (kube/sharding.py); a time given as None is
    left out (a release)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    if resource_version is not None:
        meta["resourceVersion"] = resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration_s,
            **({} if acquire_time is None else {"acquireTime": acquire_time}),
            **({} if renew_time is None else {"renewTime": renew_time}),
            "leaseTransitions": transitions,
        },
    }


class LeaderElector:
    def __init__(
        self,
        api: ApiClient,
        config: LeaseConfig,
        identity: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        if not identity:
            raise ConfigError("leader election identity: must be non-empty (use the pod name)")
        # Any: the stubs want V1Lease models; the client serialises plain dicts the same way.
        self._api: Any = client.CoordinationV1Api(api)
        self.config = config
        self.identity = identity
        self._clock, self._wall, self._sleep = clock, wall_clock, sleep
        self._observed: tuple[Any, ...] | None = None
        self._observed_at = 0.0
        self._renewed_at: float | None = None  # start of the last successful acquire/renew
        self.transitions = 0

    @property
    def is_leader(self) -> bool:
        """True only while the last successful renew is younger than the renew deadline."""
        return (
            self._renewed_at is not None
            and self._clock() - self._renewed_at < self.config.renew_deadline_s
        )

    def can_write(self, ref: object) -> bool:
        """One Lease for every target: the leader writes them all."""
        return self.is_leader

    @property
    def holder(self) -> str | None:
        return None if self._observed is None else self._observed[0]

    async def try_acquire_or_renew(self) -> bool:
        """One election step; returns whether we hold the Lease now."""
        started = self._clock()
        cfg = self.config
        timeout = {"_request_timeout": cfg.retry_period_s}
        try:
            lease: Any = await self._api.read_namespaced_lease(cfg.name, cfg.namespace, **timeout)
        except ApiException as err:
            if err.status != 404:
                self._warn("read", err)
                return self.is_leader
            return await self._create(started, timeout)
        except (TimeoutError, aiohttp.ClientError) as err:
            log.warning("lease read failed", error=str(err) or type(err).__name__)
            return self.is_leader
        spec = lease.spec or client.V1LeaseSpec()
        record = (spec.holder_identity or "", spec.renew_time, spec.lease_duration_seconds)
        if record != self._observed:
            self._observed, self._observed_at = record, started
        holder = spec.holder_identity or ""
        duration_s = float(spec.lease_duration_seconds or cfg.lease_duration_s)
        if holder and holder != self.identity and started < self._observed_at + duration_s:
            self._renewed_at = None
            return False
        now = self._wall()
        same = holder == self.identity
        body = lease_body(
            cfg.name,
            cfg.namespace,
            holder=self.identity,
            duration_s=int(cfg.lease_duration_s),
            acquire_time=(
                micro_time(spec.acquire_time.timestamp())
                if same and spec.acquire_time
                else micro_time(now)
            ),
            renew_time=micro_time(now),
            transitions=int(spec.lease_transitions or 0) + (0 if same else 1),
            resource_version=lease.metadata.resource_version,
        )
        try:
            await self._api.replace_namespaced_lease(cfg.name, cfg.namespace, body, **timeout)
        except ApiException as err:
            log.info("lease update lost", status=err.status, identity=self.identity)
            return self.is_leader if err.status != 409 else self._lose()
        except (TimeoutError, aiohttp.ClientError) as err:
            log.warning("lease update failed", error=str(err) or type(err).__name__)
            return self.is_leader
        return self._won(started, same)

    async def _create(self, started: float, kw: dict[str, Any]) -> bool:
        cfg = self.config
        now = micro_time(self._wall())
        body = lease_body(
            cfg.name,
            cfg.namespace,
            holder=self.identity,
            duration_s=int(cfg.lease_duration_s),
            acquire_time=now,
            renew_time=now,
            transitions=0,
        )
        try:
            await self._api.create_namespaced_lease(cfg.namespace, body, **kw)
        except ApiException as err:
            if err.status == 409:
                log.info("lease create lost", status=err.status)
            else:
                self._warn("create", err)
            return False
        except (TimeoutError, aiohttp.ClientError):
            return False
        return self._won(started, False)

    def _warn(self, verb: str, err: ApiException) -> None:
        """Name the Lease and its namespace: a 403 almost always means the wrong namespace."""
        cfg = self.config
        hint = (
            f"the ServiceAccount may not {verb} Leases in namespace {cfg.namespace!r}; set "
            "--lease-namespace (AUTOSCALER_LEASE_NAMESPACE) or POD_NAMESPACE to the namespace "
            "whose Role grants them (llm-autoscaler as shipped)"
            if err.status == 403
            else str(err.reason)
        )
        log.warning(
            f"lease {verb} failed",
            status=err.status,
            lease=f"{cfg.namespace}/{cfg.name}",
            namespace=cfg.namespace,
            hint=hint,
        )

    def _won(self, started: float, renewed: bool) -> bool:
        if not renewed and not self.is_leader:
            self.transitions += 1
            log.info("became leader", identity=self.identity, lease=self.config.name)
        self._renewed_at = started
        return True

    def _lose(self) -> bool:
        if self._renewed_at is not None:
            log.info("lost leadership", identity=self.identity)
        self._renewed_at = None
        return False

    async def release(self, timeout_s: float = 4.0) -> None:
        """On clean shutdown: stop leading and expire the Lease so failover is immediate.

        Bounded by ``timeout_s`` in all (each call also has its own request timeout), so
        shutdown stays well inside the pod's termination grace period even when the API
        server does not answer; the Lease then simply expires.
        """
        if self._renewed_at is None:
            return
        self._renewed_at = None
        cfg = self.config
        kw = {"_request_timeout": min(timeout_s, self.config.retry_period_s * 2)}
        with contextlib.suppress(ApiException, TimeoutError, aiohttp.ClientError, OSError):
            async with asyncio.timeout(timeout_s):
                lease: Any = await self._api.read_namespaced_lease(cfg.name, cfg.namespace, **kw)
                if lease.spec and lease.spec.holder_identity == self.identity:
                    body = {
                        "metadata": {
                            "name": cfg.name,
                            "namespace": cfg.namespace,
                            "resourceVersion": lease.metadata.resource_version,
                        },
                        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1},
                    }
                    await self._api.replace_namespaced_lease(cfg.name, cfg.namespace, body, **kw)

    async def run(self, on_change: Callable[[bool], None] | None = None) -> None:
        """Step every ``retry_period_s`` forever; calls ``on_change(is_leader)`` on flips."""
        was = False
        try:
            while True:
                await self.try_acquire_or_renew()
                now = self.is_leader
                if now != was and on_change is not None:
                    on_change(now)
                was = now
                await self._sleep(self.config.retry_period_s)
        finally:
            if was and on_change is not None:
                on_change(False)
