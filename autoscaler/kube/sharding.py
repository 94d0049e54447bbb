"""Leadership through ``coordination.k8s.io/v1`` Leases: S shard Leases split among the
live controller replicas; leader election is the case S = 1.

One algorithm for one writer and for many (Knative's model: its autoscaler buckets are
Leases taken through the same leader election as its single leader):

- **Shards.** S is fixed (``--shards``, default 1). A target belongs to shard
  ``blake2b(namespace/name) mod S`` (`shard_of`: stable across processes and Python
  versions, unlike the salted built-in ``hash``). With S = 1 the one shard's Lease is the
  leader Lease users know (``lease_name``, default ``llm-autoscaler-leader``); with S > 1,
  shard k is the Lease ``<prefix>-shard-<k>``. A replica writes a target only while it
  holds the Lease of the target's shard (`can_write`).
- **Membership.** Every replica keeps a member Lease ``<prefix>-member-<identity>`` (the
  same renew cadence as a shard), annotated with its S. All replicas follow every Lease in
  the namespace with ONE list + watch (`Informer`), so knowing who is alive and who holds
  what costs no request: membership, shard holders and expiry are read from that cache.
  A Lease's holder is alive while its record changed within its lease duration on OUR
  clock (no cross-node clock comparison, as client-go's leaderelection).
- **Who wants what.** Rendezvous hashing with bounded load over the live members with the
  same S (`assign`): each member holds at most ceil(S/R) shards, each shard goes to the
  member with the highest ``blake2b(member#k)`` that still has room. So a few shards per
  replica already split the targets evenly, and Lease traffic stays small.
- **Moves.** A shard changes holder only through a release by its holder or an expiry,
  never a steal, so no target ever has two writers:
  - join: the holder sees the new member (watch, instant), stops writing the shard at
    once, keeps renewing it for ``drain_s`` (one retry period: writes started before are
    done), then releases it (holder ""); the joiner sees the release on the watch and
    takes it at once (the manager wakes on every Lease change).
  - loss: a member that stops renewing is dead for the others after ``lease_duration_s``
    (its member Lease unchanged that long); its shard Leases expire at the same time and
    their new owners take them at their next step: within ``lease_duration_s +
    retry_period_s``. Shutdown releases every Lease (bounded, 4 s) so a rolling update
    moves shards within one retry period.
  - every take and renew is a replace with the resourceVersion read, so two candidates
    cannot both win (409), and a holder counts as holder only until ``renew_deadline_s``
    after the start of its last successful renew (< ``lease_duration_s``): a stalled or
    partitioned replica stops writing before anyone can take its shards.
- **Cost.** Only held shards cost requests: one replace per held shard and retry period
  (no GET: the holder's own last write is its view), plus the member Lease: in all
  ``(S + R) / retry_period_s`` writes/s for the fleet, whatever the target count (the
  sizing rule is in docs/install.md). Moves cost one release and one take. At most
  ``max_in_flight`` Lease requests are in flight per replica (the Lease connection pool's
  size), and a request's timeout starts when it is sent, not while it waits its turn: a
  start-up burst of takes queues instead of timing out.
- **Guards** (`blocked`): no writes while a live replica uses a different S (its shard k is
  a different set of targets: a rolling change of ``--shards`` pauses writes until one S
  remains), nor, with S > 1, while someone who is not a member with our S holds the leader
  Lease (a controller version before this module, which knew only that Lease).
- **Upgrades.** With S = 1 the leader Lease keeps its name and its meaning (holder, renew
  time, duration, conflict-checked replace, release = empty holder), so a pair of old and
  new replicas never has two writers: each waits for the other's record to go unchanged
  for a lease duration, or to be released.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import math
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.kube.config import LEASE_POOL
from autoscaler.kube.informer import Informer, Key
from autoscaler.logging import get_logger
from autoscaler.settings import DNS_LABEL, MAX_SHARDS

log = get_logger(__name__)

GROUP_LABEL = "autoscaler.llmscaler.io/shard-group"
ROLE_LABEL = "autoscaler.llmscaler.io/lease-role"
SHARDS_ANNOTATION = "autoscaler.llmscaler.io/shards"


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
    ``resource_version``) or of a conflict-checked replace; a time given as None is left
    out (a release)."""
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


def stable_hash(text: str) -> int:
    """64 bits of blake2b: the same in every process, Python version and platform."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


@functools.lru_cache(maxsize=1 << 16)  # the loop asks per target per tick
def shard_of(namespace: str, name: str, shards: int) -> int:
    """The shard of target ``namespace/name`` among ``shards``."""
    return stable_hash(f"{namespace}/{name}") % shards


def rendezvous_owner(shard: int, members: Iterable[str]) -> str | None:
    """The member with the highest weight for ``shard`` (None without members)."""
    return max(members, key=lambda m: (stable_hash(f"{m}#{shard}"), m), default=None)


def assign(shards: int, members: Iterable[str]) -> dict[str, list[int]]:
    """Every member's shards: rendezvous hashing with bounded load. The (shard, member)
    pairs are taken by decreasing weight; a pair is kept while its shard is free and its
    member holds fewer than ceil(S/R). Every replica computes the same answer from the same
    member set; a join or a loss moves the shards whose top member changed and the few
    that the bound pushes along."""
    ms = sorted(set(members))
    out: dict[str, list[int]] = {m: [] for m in ms}
    if not ms:
        return out
    cap = -(-shards // len(ms))
    pairs = sorted(
        ((stable_hash(f"{m}#{k}"), m, k) for k in range(shards) for m in ms), reverse=True
    )
    owner: dict[int, str] = {}
    for _, m, k in pairs:
        if k not in owner and len(out[m]) < cap:
            owner[k] = m
            out[m].append(k)
            if len(owner) == shards:
                break
    for m in ms:
        out[m].sort()
    return out


def member_lease_name(prefix: str, identity: str) -> str:
    """``<prefix>-member-<identity>``, made a valid object name (a pod name already is;
    a workstation's hostname may not be: lowercased, other characters -> ``-``, and a hash
    suffix when it had to be changed or shortened)."""
    clean = re.sub(r"[^a-z0-9-]+", "-", identity.lower()).strip("-") or "x"
    name = f"{prefix}-member-{clean}"
    if clean != identity or len(name) > 63:
        name = f"{name[:54].rstrip('-')}-{stable_hash(identity) % 16**8:08x}"
    return name


@dataclass(frozen=True, slots=True)
class ShardConfig:
    namespace: str
    shards: int = 1
    prefix: str = "llm-autoscaler"
    # The leader Lease: the one shard's Lease when shards = 1; with shards > 1, nobody
    # writes while someone who is not a member with our S holds it (an older controller).
    leader_lease: str = "llm-autoscaler-leader"
    lease_duration_s: float = 15.0
    renew_deadline_s: float = 10.0
    retry_period_s: float = 2.0
    drain_s: float | None = None  # stop writing a shard this long before releasing it
    max_in_flight: int = LEASE_POOL  # Lease requests in flight at once (the pool's size)

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ConfigError(f"shards: {self.shards}: must be between 1 and {MAX_SHARDS}")
        if not DNS_LABEL.match(self.prefix) or len(self.prefix) > 40:
            raise ConfigError(
                f"shard_lease_prefix: {self.prefix!r}: must be a DNS label (lowercase "
                "letters, digits, '-') of at most 40 characters"
            )
        if not 0 < self.retry_period_s < self.renew_deadline_s < self.lease_duration_s:
            raise ConfigError(
                "lease timings: need 0 < retryPeriod "
                f"({self.retry_period_s}) < renewDeadline ({self.renew_deadline_s}) < "
                f"leaseDuration ({self.lease_duration_s})"
            )
        if self.max_in_flight < 1:
            raise ConfigError(f"max_in_flight: {self.max_in_flight}: must be at least 1")

    @property
    def drain(self) -> float:
        return self.retry_period_s if self.drain_s is None else self.drain_s

    def shard_lease(self, k: int) -> str:
        """Shard k's Lease: the leader Lease when there is one shard."""
        return self.leader_lease if self.shards == 1 else f"{self.prefix}-shard-{k}"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The few fields of a Lease the manager reads (the informer keeps only these)."""

    name: str
    holder: str
    renew_time: str
    duration_s: float
    acquire_time: str
    transitions: int
    resource_version: str
    group: str | None = None  # GROUP_LABEL
    role: str | None = None  # ROLE_LABEL: member | shard
    shards: int | None = None  # SHARDS_ANNOTATION on member Leases

    @property
    def renewal(self) -> tuple[str, str, float]:
        """What changes on every renew: compared to decide whether the holder is alive."""
        return (self.holder, self.renew_time, self.duration_s)


def lease_record(obj: Mapping[str, Any]) -> LeaseRecord:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    labels = meta.get("labels") or {}
    annotations = meta.get("annotations") or {}
    try:
        shards: int | None = int(annotations[SHARDS_ANNOTATION])
    except (KeyError, TypeError, ValueError):
        shards = None
    return LeaseRecord(
        name=str(meta["name"]),
        holder=str(spec.get("holderIdentity") or ""),
        renew_time=str(spec.get("renewTime") or ""),
        duration_s=float(spec.get("leaseDurationSeconds") or 0),
        acquire_time=str(spec.get("acquireTime") or ""),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        group=labels.get(GROUP_LABEL),
        role=labels.get(ROLE_LABEL),
        shards=shards,
    )


@dataclass
class _Held:
    """A Lease this replica holds (a shard or its member Lease)."""

    resource_version: str  # of our own last write: the holder's view, no GET needed
    renewed_at: float  # start of the last successful take/renew (our clock)
    acquire_time: str
    transitions: int
    draining_since: float | None = None


@dataclass(frozen=True, slots=True)
class ShardStatus:
    """What /readyz and /v1 show about this replica's leadership."""

    shards: int
    identity: str
    held: tuple[int, ...]
    writable: tuple[int, ...]
    members: tuple[str, ...]
    blocked: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "shards": self.shards,
            "identity": self.identity,
            "held": list(self.held),
            "writable": list(self.writable),
            "members": list(self.members),
            "blocked": self.blocked,
        }


@dataclass
class RequestCounts:
    """Lease API requests this manager made, by verb (tests and bench_shards)."""

    by_verb: dict[str, int] = field(default_factory=dict)

    def add(self, verb: str) -> None:
        self.by_verb[verb] = self.by_verb.get(verb, 0) + 1

    @property
    def total(self) -> int:
        return sum(self.by_verb.values())


class ShardManager:
    """Holds this replica's share of the shard Leases; see the module docstring.

    ``start`` starts the Lease informer, ``run`` steps every retry period (and on every
    Lease change), ``release_all`` gives everything back on shutdown. Tests call ``step``
    with injected clocks instead of ``run``.
    """

    def __init__(
        self,
        api: ApiClient,
        config: ShardConfig,
        identity: str,
        *,
        watch_api: ApiClient | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``api`` for the Lease writes, ``watch_api`` (default ``api``) for the Lease
        informer's long-lived watch, so the watch never holds a renewal's connection."""
        if not identity:
            raise ConfigError("shard identity: must be non-empty (use the pod name)")
        self.config = config
        self.identity = identity
        self.member_lease = member_lease_name(config.prefix, identity)
        self._api: Any = client.CoordinationV1Api(api)
        self._clock, self._wall = clock, wall_clock
        watch: Any = client.CoordinationV1Api(watch_api or api)
        self.informer: Informer[LeaseRecord] = Informer(
            f"leases/{config.namespace}",
            partial(watch.list_namespaced_lease, config.namespace),
            lease_record,
        )
        self.informer.add_handler(self._on_lease)
        self._observed_at: dict[str, float] = {}  # Lease name -> when its renewal changed
        self._held: dict[int, _Held] = {}
        self._member: _Held | None = None
        self._closing = False
        self._wake = asyncio.Event()
        self.requests = RequestCounts()
        self.blocked: str | None = None
        self.members: tuple[str, ...] = (identity,)
        self._mine: frozenset[int] | None = None  # our shards under `members`
        self._joined_at: float | None = None  # first member Lease write (our clock)
        self._deleting: set[str] = set()  # resourceVersions of dead members' Leases sent
        self._slots = asyncio.Semaphore(config.max_in_flight)
        self._names = {config.shard_lease(k): k for k in range(config.shards)}
        self.transitions = 0  # shards taken
        self.write_failures = 0  # Lease writes with an unknown outcome (timeout, network)

    # ------------------------------------------------------------------ reading
    def shard_of(self, ref: TargetRef) -> int:
        return shard_of(ref.namespace, ref.name, self.config.shards)

    def holds(self, shard: int) -> bool:
        """True only while the last successful renew is younger than the renew deadline."""
        held = self._held.get(shard)
        return (
            held is not None
            and not self._closing
            and self._clock() - held.renewed_at < self.config.renew_deadline_s
        )

    def writable(self, shard: int) -> bool:
        """Held, not draining towards another replica, and no guard in the way."""
        held = self._held.get(shard)
        return (
            self.blocked is None
            and held is not None
            and held.draining_since is None
            and self.holds(shard)
        )

    def can_write(self, ref: TargetRef) -> bool:
        return self.writable(self.shard_of(ref))

    @property
    def is_leader(self) -> bool:
        """Writes at least one shard (what ``state.is_leader`` and the old gauge show)."""
        return any(self.writable(k) for k in self._held)

    @property
    def held(self) -> tuple[int, ...]:
        return tuple(sorted(k for k in self._held if self.holds(k)))

    def status(self) -> ShardStatus:
        held = self.held
        return ShardStatus(
            shards=self.config.shards,
            identity=self.identity,
            held=held,
            writable=tuple(k for k in held if self.writable(k)),
            members=self.members,
            blocked=self.blocked,
        )

    # ------------------------------------------------------------------ informer
    def _on_lease(self, key: Key, old: LeaseRecord | None, new: LeaseRecord | None) -> None:
        name = key[1]
        if new is None:
            self._observed_at.pop(name, None)
        elif old is None or old.renewal != new.renewal:
            self._observed_at[name] = self._clock()
        # Wake the manager on what may let it act now (a release, a join, a delete), not on
        # the others' renewals (one per held shard and retry period across the fleet).
        if old is None or new is None or old.holder != new.holder:
            self._wake.set()

    def _record(self, name: str) -> LeaseRecord | None:
        return self.informer.get(self.config.namespace, name)

    def _fresh(self, rec: LeaseRecord, now: float) -> bool:
        """The holder renewed within its lease duration, as seen on our clock."""
        if not rec.holder:
            return False
        seen = self._observed_at.get(rec.name, now)
        return now - seen < (rec.duration_s or self.config.lease_duration_s)

    def _view(self, now: float) -> tuple[list[str], str | None, list[LeaseRecord]]:
        """Live members with our S (us included), why writes are blocked (if they are), and
        the member Leases of dead replicas (to delete)."""
        cfg = self.config
        live = {self.identity}
        foreign: list[str] = []
        dead: list[LeaseRecord] = []
        for rec in self.informer.items.values():
            if rec.group != cfg.prefix or rec.role != "member" or rec.name == self.member_lease:
                continue
            if not self._fresh(rec, now):
                dead.append(rec)
                continue
            if rec.holder == self.identity:
                continue
            if rec.shards == cfg.shards:
                live.add(rec.holder)
            else:
                foreign.append(f"{rec.holder} (shards={rec.shards})")
        blocked = None
        if foreign:
            blocked = (
                f"live replicas with another shard count: {', '.join(sorted(foreign))}; "
                f"this one has shards={cfg.shards}: no writes until one count remains"
            )
        elif cfg.shards > 1:
            legacy = self._record(cfg.leader_lease)
            if legacy is not None and self._fresh(legacy, now) and legacy.holder not in live:
                blocked = (
                    f"Lease {cfg.leader_lease} is held by {legacy.holder} (a single-Lease "
                    "controller, shards=1): no writes until it is released or expires"
                )
        return sorted(live), blocked, dead

    # ------------------------------------------------------------------ writing
    def _body(
        self,
        name: str,
        role: str,
        holder: str,
        duration_s: float,
        rv: str | None,
        transitions: int,
        times: tuple[str, str] | None,
    ) -> dict[str, Any]:
        """Our Lease ``name`` (labelled for the one Lease watch); ``times`` = (acquire,
        renew), None for a release."""
        acquire, renew = times if times is not None else (None, None)
        member = role == "member"
        return lease_body(
            name,
            self.config.namespace,
            holder=holder,
            duration_s=max(1, math.ceil(duration_s)),
            acquire_time=acquire,
            renew_time=renew,
            transitions=transitions,
            resource_version=rv,
            labels={
                "app.kubernetes.io/name": "llm-autoscaler",
                GROUP_LABEL: self.config.prefix,
                ROLE_LABEL: role,
            },
            annotations={SHARDS_ANNOTATION: str(self.config.shards)} if member else None,
        )

    async def _write(
        self,
        name: str,
        role: str,
        rv: str | None,
        acquire_time: str | None,
        transitions: int,
        started: float,
    ) -> _Held | None:
        """Create (``rv`` None) or replace the Lease as ours; None when we did not win."""
        now = micro_time(self._wall())
        acquired = acquire_time or now
        body = self._body(
            name,
            role,
            self.identity,
            self.config.lease_duration_s,
            rv,
            transitions,
            (acquired, now),
        )
        kw = {"_request_timeout": self.config.retry_period_s}
        ns = self.config.namespace
        try:
            if rv is None:
                self.requests.add("create")
                out = await self._call(self._api.create_namespaced_lease, ns, body, **kw)
            else:
                self.requests.add("update")
                out = await self._call(self._api.replace_namespaced_lease, name, ns, body, **kw)
        except ApiException as err:
            level = log.info if err.status in (404, 409) else log.warning
            hint = (
                f"the ServiceAccount may not write Leases in namespace {ns!r}; set "
                "--lease-namespace (AUTOSCALER_LEASE_NAMESPACE) or POD_NAMESPACE to the "
                "namespace whose Role grants them (llm-autoscaler as shipped)"
                if err.status == 403
                else str(err.reason)
            )
            level(
                "lease write lost",
                lease=f"{ns}/{name}",
                namespace=ns,
                status=err.status,
                identity=self.identity,
                hint=hint,
            )
            return None
        except (TimeoutError, aiohttp.ClientError, OSError) as err:
            self.write_failures += 1
            log.warning("lease write failed", lease=name, error=str(err) or type(err).__name__)
            raise _Unknown from None
        return _Held(str(out.metadata.resource_version), started, acquired, transitions)

    async def _renew(self, name: str, role: str, held: _Held, started: float) -> bool:
        """Renew a Lease we hold; False when it is no longer ours (409/404)."""
        try:
            fresh = await self._write(
                name, role, held.resource_version, held.acquire_time, held.transitions, started
            )
        except _Unknown:
            return True  # unknown outcome: still ours until the renew deadline
        if fresh is None:
            return False
        held.resource_version, held.renewed_at = fresh.resource_version, started
        return True

    async def _call(self, fn: Callable[..., Awaitable[Any]], *args: Any, **kw: Any) -> Any:
        """One Lease request once a slot is free: the request timeout runs from the send,
        so a burst of takes waits its turn instead of timing out in the pool's queue."""
        async with self._slots:
            return await fn(*args, **kw)

    async def _take(self, name: str, role: str, rec: LeaseRecord | None, started: float) -> bool:
        same = rec is not None and rec.holder == self.identity
        transitions = 0 if rec is None else rec.transitions + (0 if same else 1)
        try:
            won = await self._write(
                name,
                role,
                None if rec is None else rec.resource_version,
                rec.acquire_time if same and rec is not None else None,
                transitions,
                started,
            )
        except _Unknown:
            return False
        if won is None:
            return False
        if role == "member":
            self._member = won
            if self._joined_at is None:
                self._joined_at = started
        else:
            k = self._names[name]
            self._held[k] = won
            self.transitions += 1
            log.info("shard taken", shard=k, identity=self.identity, lease=name)
        return True

    async def _release(self, name: str, held: _Held) -> None:
        body = self._body(
            name,
            "shard",
            "",
            1,
            held.resource_version,
            held.transitions,
            None,
        )
        kw = {"_request_timeout": self.config.retry_period_s}
        self.requests.add("update")
        with contextlib.suppress(ApiException, TimeoutError, aiohttp.ClientError, OSError):
            await self._call(
                self._api.replace_namespaced_lease, name, self.config.namespace, body, **kw
            )

    # ------------------------------------------------------------------ stepping
    async def step(self) -> None:
        """One round: renew what is due, release what another member should hold (after
        draining), take what is ours and free. No-op until the Lease cache is synced."""
        if self._closing or not self.informer.synced.is_set():
            return
        cfg = self.config
        started = self._clock()
        due = cfg.retry_period_s * 0.9  # steps also run on Lease changes: renew on cadence
        jobs: list[Any] = []
        if self._member is None or started - self._member.renewed_at >= due:
            jobs.append(self._step_member(started))
        live, self.blocked, dead = self._view(started)
        for gone in dead:
            # A crashed replica's member Lease (a clean stop deletes its own): gone, so a
            # replica starting now does not count it alive for one more lease duration
            # (it cannot know how long the record has been unchanged) and leave the shards
            # it would rank first unheld meanwhile. Precondition: not renewed since.
            if gone.resource_version not in self._deleting:
                self._deleting.add(gone.resource_version)
                jobs.append(self._delete(gone.name, gone.resource_version))
        if tuple(live) != self.members or self._mine is None:
            self.members = tuple(live)
            self._mine = frozenset(assign(cfg.shards, live)[self.identity])
        for k in range(cfg.shards):
            name = cfg.shard_lease(k)
            want = k in self._mine
            held = self._held.get(k)
            if held is not None and not self.holds(k):
                # Past the renew deadline: no longer ours to write; re-take below if free.
                log.info("shard lost", shard=k, identity=self.identity)
                del self._held[k]
                held = None
            if held is not None:
                if want:
                    held.draining_since = None
                elif held.draining_since is None:
                    held.draining_since = started  # stop writing now, release after drain
                elif started - held.draining_since >= cfg.drain:
                    del self._held[k]
                    jobs.append(self._release(name, held))
                    log.info("shard released", shard=k, identity=self.identity, lease=name)
                    continue
                if started - held.renewed_at >= due:
                    jobs.append(self._step_renew(k, name, held, started))
            elif want and self._settled(started):
                rec = self._record(name)
                if rec is None or not self._fresh(rec, started) or rec.holder == self.identity:
                    jobs.append(self._take(name, "shard", rec, started))
        if jobs:
            await asyncio.gather(*jobs)

    def _settled(self, now: float) -> bool:
        """Takes wait one retry period after our member Lease first exists, so replicas
        starting together see each other first instead of all taking every free shard
        and handing most of them on (each hand-over costs a drain)."""
        return self._joined_at is not None and now - self._joined_at >= self.config.retry_period_s

    async def _step_member(self, started: float) -> None:
        if self._member is not None:
            if await self._renew(self.member_lease, "member", self._member, started):
                return
            self._member = None
        await self._take(self.member_lease, "member", self._record(self.member_lease), started)

    async def _step_renew(self, k: int, name: str, held: _Held, started: float) -> None:
        if not await self._renew(name, "shard", held, started):
            if self._held.get(k) is held:
                del self._held[k]
            log.info("shard lost", shard=k, identity=self.identity, lease=name)

    def start(self) -> None:
        self.informer.start()

    async def run(self, on_change: Callable[[ShardStatus], None] | None = None) -> None:
        """Step every retry period and on every Lease change; ``on_change`` on any change
        of the held/writable shards or the guard."""
        last: ShardStatus | None = None
        try:
            while True:
                self._wake.clear()
                await self.step()
                now = self.status()
                if on_change is not None and now != last:
                    on_change(now)
                last = now
                # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancel that
                # arrives as the wait ends, and the task would never stop.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self.config.retry_period_s):
                        await self._wake.wait()
        finally:
            if on_change is not None and last is not None and last.held:
                on_change(ShardStatus(self.config.shards, self.identity, (), (), (), None))

    async def release_all(self, timeout_s: float = 4.0) -> None:
        """On shutdown: stop writing at once, give every shard back and delete the member
        Lease, so the others take over within one retry period; bounded by ``timeout_s``."""
        self._closing = True
        held, self._held = self._held, {}
        member, self._member = self._member, None
        jobs = [self._release(self.config.shard_lease(k), h) for k, h in held.items()]
        # A take cancelled mid-request (the run task stopped) may have been applied: the
        # cache shows such Leases as ours; release those too rather than let them expire.
        for k in range(self.config.shards):
            rec = self._record(self.config.shard_lease(k))
            if k not in held and rec is not None and rec.holder == self.identity:
                orphan = _Held(rec.resource_version, 0.0, rec.acquire_time, rec.transitions)
                jobs.append(self._release(rec.name, orphan))
        mine = self._record(self.member_lease)
        if member is None and mine is not None and mine.holder == self.identity:
            member = _Held(mine.resource_version, 0.0, mine.acquire_time, mine.transitions)
        if member is not None:
            jobs.append(self._delete(self.member_lease, member.resource_version))
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):
                await asyncio.gather(*jobs)

    async def _delete(self, name: str, resource_version: str) -> None:
        """Delete a member Lease unless it changed since ``resource_version`` (409)."""
        self.requests.add("delete")
        body = {"preconditions": {"resourceVersion": resource_version}}
        with contextlib.suppress(ApiException, TimeoutError, aiohttp.ClientError, OSError):
            await self._call(
                self._api.delete_namespaced_lease,
                name,
                self.config.namespace,
                body=body,
                _request_timeout=self.config.retry_period_s,
            )

    async def stop(self) -> None:
        await self.informer.stop()


class _Unknown(Exception):
    """A Lease write whose outcome is unknown (timeout, connection error)."""
