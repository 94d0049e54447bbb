"""Sharded leadership (`kube.sharding`): replicas split shard Leases over the local API
(real HTTP, kubernetes-asyncio, the real Lease watch), driven step by step on a fake clock.

The invariant checked after EVERY single step of every replica: no target is writable by
two replicas, counting a replica that stopped stepping (dead, stalled) for as long as its
own clock still lets it write."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kubernetes_asyncio.client import ApiClient

from autoscaler.domain import TargetRef
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.sharding import (
    GROUP_LABEL,
    ShardConfig,
    ShardManager,
    assign,
    member_lease_name,
    rendezvous_owner,
    shard_of,
)

NS = "default"
CFG = ShardConfig(
    namespace=NS, shards=16, lease_duration_s=15, renew_deadline_s=10, retry_period_s=2
)
TARGETS = [TargetRef(f"ns{i % 3}", f"model-{i}") for i in range(20)]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make(kclient: ApiClient, identity: str, clock: Clock, cfg: ShardConfig = CFG) -> ShardManager:
    m = ShardManager(kclient, cfg, identity, clock=clock, wall_clock=lambda: 1.7e9 + clock.t)
    m.start()
    return m


def leases(kapi: LocalKubeAPI) -> dict[str, str]:
    return {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in kapi.list_objects("leases", NS, group="coordination.k8s.io")
    }


async def settle(kapi: LocalKubeAPI, managers: Sequence[ShardManager]) -> None:
    """Wait (bounded, real time) until every manager's Lease cache matches the server."""
    want = leases(kapi)
    for m in managers:

        def seen(m: ShardManager = m) -> bool:
            return {k[1]: r.resource_version for k, r in m.informer.items.items()} == want

        await m.informer.wait_for(seen, 5)


def writers(ref: TargetRef, managers: Sequence[ShardManager]) -> list[str]:
    return [m.identity for m in managers if m.can_write(ref)]


def assert_one_writer_at_most(everyone: Sequence[ShardManager], when: str) -> None:
    for ref in TARGETS:
        w = writers(ref, everyone)
        assert len(w) <= 1, f"{ref} has two writers {w} {when}"


async def rounds(
    kapi: LocalKubeAPI,
    clock: Clock,
    alive: Sequence[ShardManager],
    everyone: Sequence[ShardManager],
    until: Callable[[], bool],
    limit: int = 20,
) -> int:
    """Step the live replicas one after another every retry period until ``until()``;
    checks the one-writer invariant after each step. Returns the rounds taken."""
    for n in range(1, limit + 1):
        clock.t += CFG.retry_period_s
        for m in alive:
            await m.step()
            await settle(kapi, alive)
            assert_one_writer_at_most(everyone, f"after {m.identity} stepped at t={clock.t}")
        if until():
            return n
    raise AssertionError(f"not converged after {limit} rounds")


def converged(managers: Sequence[ShardManager]) -> Callable[[], bool]:
    """Every target writable by exactly one replica, and each holds its rendezvous share."""

    def check() -> bool:
        ids = [m.identity for m in managers]
        share = assign(CFG.shards, ids)
        return all(len(writers(r, managers)) == 1 for r in TARGETS) and all(
            m.status().writable == tuple(share[m.identity]) for m in managers
        )

    return check


async def stop_all(managers: Sequence[ShardManager]) -> None:
    for m in managers:
        await m.stop()


def test_a_target_maps_to_the_same_shard_in_every_process() -> None:
    # blake2b of "namespace/name": golden values (Python's salted hash() would differ per run)
    assert [shard_of("llm", f"m{i}", 64) for i in range(8)] == [33, 1, 16, 21, 33, 33, 46, 15]
    assert shard_of("llm", "llama", 64) == 32
    spread = {shard_of("ns", f"t{i}", 64) for i in range(2000)}
    assert spread == set(range(64))


def test_losing_a_member_moves_only_its_own_shards() -> None:
    before = {k: rendezvous_owner(k, ["a", "b", "c"]) for k in range(64)}
    after = {k: rendezvous_owner(k, ["a", "b"]) for k in range(64)}
    moved = {k for k in range(64) if before[k] != after[k]}
    assert moved == {k for k in range(64) if before[k] == "c"}


def test_member_lease_names_are_valid_object_names() -> None:
    assert member_lease_name("llm-autoscaler", "llm-autoscaler-5d8f-x2") == (
        "llm-autoscaler-member-llm-autoscaler-5d8f-x2"
    )
    odd = member_lease_name("llm-autoscaler", "My_Laptop.local")
    assert odd.startswith("llm-autoscaler-member-my-laptop-local-") and len(odd) <= 63
    assert member_lease_name("p", "x" * 300) != member_lease_name("p", "x" * 299)


async def test_three_replicas_split_the_shards_and_every_target_has_exactly_one_writer(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    ms = [make(kclient, name, clock) for name in ("a", "b", "c")]
    try:
        for m in ms:
            await m.informer.wait_synced()
        await rounds(kapi, clock, ms, ms, converged(ms))
        held = [set(m.held) for m in ms]
        assert set().union(*held) == set(range(CFG.shards))
        assert sum(len(h) for h in held) == CFG.shards  # disjoint
        # Steady: renewals only, one replace per held shard and member per retry period.
        before = sum(m.requests.total for m in ms)
        await rounds(kapi, clock, ms, ms, lambda: True)
        assert sum(m.requests.total for m in ms) - before == CFG.shards + len(ms)
        lease = kapi.get("leases", NS, CFG.shard_lease(0), "coordination.k8s.io")
        assert lease is not None and lease["metadata"]["labels"][GROUP_LABEL] == CFG.prefix
    finally:
        await stop_all(ms)


async def test_a_stopped_replicas_targets_move_within_the_lease_window_without_two_writers(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a, b, c = ms = [make(kclient, name, clock) for name in ("a", "b", "c")]
    try:
        for m in ms:
            await m.informer.wait_synced()
        await rounds(kapi, clock, ms, ms, converged(ms))
        orphans = [r for r in TARGETS if c.can_write(r)]
        assert orphans, "c holds no target of the 20 (pick other names)"
        died_at = clock.t  # c stops stepping (killed, partitioned): it renews nothing more
        n = await rounds(kapi, clock, [a, b], ms, converged([a, b]))
        moved_after_s = n * CFG.retry_period_s
        assert moved_after_s <= CFG.lease_duration_s + CFG.retry_period_s
        assert not any(c.can_write(r) for r in TARGETS)  # its own deadline passed first
        assert clock.t - died_at == moved_after_s
        # The dead member's Lease is deleted: a replica starting now does not count c
        # alive for one more lease duration (it could not know how old the record is).
        await settle(kapi, [a, b])
        assert kapi.get("leases", NS, c.member_lease, "coordination.k8s.io") is None
        d = make(kclient, "d", clock)
        try:
            await d.informer.wait_synced()
            n = await rounds(kapi, clock, [a, b, d], [a, b, c, d], converged([a, b, d]))
            assert n <= 3
        finally:
            await d.stop()
    finally:
        await stop_all(ms)


async def test_a_joining_replica_gets_its_share_through_releases_never_two_writers(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a, b = [make(kclient, name, clock) for name in ("a", "b")]
    try:
        for m in (a, b):
            await m.informer.wait_synced()
        await rounds(kapi, clock, [a, b], [a, b], converged([a, b]))
        c = make(kclient, "c", clock)
        await c.informer.wait_synced()
        everyone = [a, b, c]
        # c joins: the holders see its member Lease, stop writing the shards it should
        # have, release them a drain period later; c takes each as soon as it is free.
        n = await rounds(kapi, clock, everyone, everyone, converged(everyone))
        assert n <= 3  # join step, holders drain one retry period, release + take
        assert c.transitions == len(assign(CFG.shards, ["a", "b", "c"])["c"])
    finally:
        await stop_all([a, b])
        await c.stop()


async def test_shutdown_releases_every_lease_and_another_replica_takes_over_at_once(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a, b = ms = [make(kclient, name, clock) for name in ("a", "b")]
    try:
        for m in ms:
            await m.informer.wait_synced()
        await rounds(kapi, clock, ms, ms, converged(ms))
        await a.release_all()
        assert not any(a.can_write(r) for r in TARGETS)
        for k in range(CFG.shards):
            lease = kapi.get("leases", NS, CFG.shard_lease(k), "coordination.k8s.io")
            assert lease is not None and lease["spec"]["holderIdentity"] in ("", "b")
        assert kapi.get("leases", NS, a.member_lease, "coordination.k8s.io") is None
        # b needs no expiry: released shards and a deleted member are free at once.
        await settle(kapi, [b])
        n = await rounds(kapi, clock, [b], ms, converged([b]))
        assert n == 1
    finally:
        await stop_all(ms)


async def test_no_replica_writes_while_a_live_replica_uses_another_shard_count(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a = make(kclient, "a", clock)
    other = ShardConfig(
        namespace=NS, shards=8, lease_duration_s=15, renew_deadline_s=10, retry_period_s=2
    )
    b = make(kclient, "b", clock, other)
    try:
        for m in (a, b):
            await m.informer.wait_synced()
        for _ in range(3):
            clock.t += 2
            for m in (a, b):
                await m.step()
                await settle(kapi, [a, b])
        for m in (a, b):
            assert m.blocked is not None and "another shard count" in m.blocked
            assert not any(m.can_write(r) for r in TARGETS)
        await b.release_all()  # the old count's last replica goes: a writes again
        await settle(kapi, [a])
        clock.t += 2
        await a.step()
        assert a.blocked is None and all(a.can_write(r) for r in TARGETS)
    finally:
        await stop_all([a, b])


async def test_a_single_lease_controller_holding_the_leader_lease_blocks_sharded_writes(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    from autoscaler.kube.leader import LeaderElector, LeaseConfig

    clock = Clock()
    legacy = LeaderElector(
        kclient,
        LeaseConfig(namespace=NS, name="llm-autoscaler-leader"),
        "old",
        clock=clock,
        wall_clock=lambda: 1.7e9 + clock.t,
    )
    a = make(kclient, "a", clock)
    try:
        await a.informer.wait_synced()
        assert await legacy.try_acquire_or_renew()
        for _ in range(2):
            clock.t += 2
            await settle(kapi, [a])
            await a.step()
        assert a.held and a.blocked is not None and "shards=1" in a.blocked
        assert not any(a.can_write(r) for r in TARGETS)
        await legacy.release()  # the old controller shuts down (rolling update)
        await settle(kapi, [a])
        clock.t += 2
        await a.step()
        assert a.blocked is None and all(a.can_write(r) for r in TARGETS)
    finally:
        await a.stop()


async def test_shutdown_stops_writing_at_once_and_is_bounded_when_the_api_server_hangs(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a = make(kclient, "a", clock)
    try:
        await a.informer.wait_synced()
        await rounds(kapi, clock, [a], [a], converged([a]))
        kapi.inject("/leases/", delay_s=600, times=CFG.shards + 1)  # nothing answers
        await a.release_all(timeout_s=0.2)  # the Controller's budget is 4 s of the 5 s
        assert not any(a.can_write(r) for r in TARGETS) and a.held == ()
    finally:
        kapi.faults.clear()
        await a.stop()


async def test_shutdown_also_releases_leases_whose_take_was_cut_short(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    """A take cancelled mid-request may have been applied: the Lease is ours on the server
    though the manager never recorded it; shutdown releases it instead of letting it expire."""
    clock = Clock()
    a = make(kclient, "a", clock)
    try:
        await a.informer.wait_synced()
        await rounds(kapi, clock, [a], [a], converged([a]))
        a._held.pop(3)  # as if the answer to the take of shard 3 never arrived
        await a.release_all()
        lease = kapi.get("leases", NS, CFG.shard_lease(3), "coordination.k8s.io")
        assert lease is not None and lease["spec"]["holderIdentity"] == ""
    finally:
        await a.stop()
