"""Leadership (`kube.sharding`): replicas split shard Leases over the local API (real
HTTP, kubernetes-asyncio, the real Lease watch), driven step by step on a fake clock; leader
election is the one-shard case, on the leader Lease an older release wrote.

The invariant checked after EVERY single step of every replica: no target is writable by
two replicas, counting a replica that stopped stepping (dead, stalled) for as long as its
own clock still lets it write."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.scale import ScaleClient
from autoscaler.kube.sharding import (
    GROUP_LABEL,
    ShardConfig,
    ShardManager,
    assign,
    lease_body,
    member_lease_name,
    micro_time,
    rendezvous_owner,
    shard_of,
)
from tests.support.workloads import deployment

NS = "default"
CFG = ShardConfig(
    namespace=NS, shards=16, lease_duration_s=15, renew_deadline_s=10, retry_period_s=2
)
ONE = ShardConfig(namespace=NS, lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)
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
        share = assign(managers[0].config.shards, ids)
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


@pytest.mark.parametrize(("shards", "replicas"), [(16, 2), (16, 3), (16, 4), (16, 5), (64, 10)])
def test_every_replica_gets_at_most_its_even_share_of_shards(shards: int, replicas: int) -> None:
    pods = [f"llm-autoscaler-7d9f-{i:05x}" for i in range(replicas)]
    share = assign(shards, pods)
    assert sorted(k for ks in share.values() for k in ks) == list(range(shards))
    assert max(len(ks) for ks in share.values()) == -(-shards // replicas)


def test_a_join_or_loss_moves_few_shards_beyond_the_ones_it_must() -> None:
    """A loss must move the lost member's shards; a join must give the joiner its share:
    the bound pushes along at most a few more."""
    three = assign(16, ["a", "b", "c"])
    two = assign(16, ["a", "b"])
    pushed = [k for m in ("a", "b") for k in three[m] if k not in two[m]]
    assert len(pushed) <= 2, pushed
    four = assign(16, ["a", "b", "c", "d"])
    moved = [k for m in ("a", "b", "c") for k in three[m] if k not in four[m]]
    assert len(moved) <= len(four["d"]) + 2, (moved, four["d"])


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


def old_leader_lease(kapi: LocalKubeAPI, holder: str, clock: Clock) -> None:
    """The leader Lease as a release before shard Leases wrote it (no labels): created, or
    renewed by its holder."""
    now = micro_time(1.7e9 + clock.t)
    old = kapi.get("leases", NS, ONE.leader_lease, "coordination.k8s.io")
    body = lease_body(
        ONE.leader_lease,
        NS,
        holder=holder,
        duration_s=15,
        acquire_time=now,
        renew_time=now,
        transitions=0,
        resource_version=None if old is None else old["metadata"]["resourceVersion"],
    )
    if old is None:
        kapi.create("leases", body, "coordination.k8s.io")
    else:
        kapi.update("leases", body, "coordination.k8s.io")


async def test_a_single_lease_controller_holding_the_leader_lease_blocks_sharded_writes(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a = make(kclient, "a", clock)
    try:
        await a.informer.wait_synced()
        old_leader_lease(kapi, "old", clock)
        for _ in range(2):
            clock.t += 2
            await settle(kapi, [a])
            await a.step()
        assert a.held and a.blocked is not None and "shards=1" in a.blocked
        assert not any(a.can_write(r) for r in TARGETS)
        kapi.update(  # the old controller shuts down (rolling update): it releases
            "leases",
            lease_body(ONE.leader_lease, NS, holder="", duration_s=1, acquire_time=None,
                       renew_time=None, transitions=0),
            "coordination.k8s.io",
        )  # fmt: skip
        await settle(kapi, [a])
        clock.t += 2
        await a.step()
        assert a.blocked is None and all(a.can_write(r) for r in TARGETS)
    finally:
        await a.stop()


# ------------------------------------------------------------ one shard: leader election
async def test_one_shard_is_leader_election_on_the_leader_lease_with_failover_when_it_dies(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a, b = ms = [make(kclient, name, clock, ONE) for name in ("a", "b")]
    try:
        for m in ms:
            await m.informer.wait_synced()
        await rounds(kapi, clock, ms, ms, converged(ms))
        leader, other = (a, b) if a.held else (b, a)
        assert leader.held == (0,) and other.held == ()
        lease = kapi.get("leases", NS, "llm-autoscaler-leader", "coordination.k8s.io")
        assert lease is not None and lease["spec"]["holderIdentity"] == leader.identity
        assert not [
            o["metadata"]["name"]
            for o in kapi.list_objects("leases", NS, group="coordination.k8s.io")
            if "-shard-" in o["metadata"]["name"]
        ]
        died_at = clock.t  # the leader stops renewing
        n = await rounds(kapi, clock, [other], ms, converged([other]))
        assert n * ONE.retry_period_s <= ONE.lease_duration_s + ONE.retry_period_s
        assert clock.t - died_at == n * ONE.retry_period_s
        assert not leader.is_leader and other.is_leader
    finally:
        await stop_all(ms)


async def test_one_shard_waits_for_a_leader_of_the_previous_release_to_expire(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    """Upgrade with a mixed pair: the old replica holds the leader Lease and renews it; the
    new one never writes while it does, and takes over within leaseDuration + retryPeriod
    of its last renew."""
    clock = Clock()
    new = make(kclient, "new", clock, ONE)
    try:
        await new.informer.wait_synced()
        old_leader_lease(kapi, "old", clock)
        for _ in range(10):  # the old leader renews every retry period
            clock.t += ONE.retry_period_s
            old_leader_lease(kapi, "old", clock)
            await settle(kapi, [new])
            await new.step()
            assert not any(new.can_write(r) for r in TARGETS), f"two writers at t={clock.t}"
        died_at = clock.t
        n = await rounds(kapi, clock, [new], [new], converged([new]))
        assert n * ONE.retry_period_s <= ONE.lease_duration_s + ONE.retry_period_s
        assert clock.t - died_at == n * ONE.retry_period_s
        lease = kapi.get("leases", NS, ONE.leader_lease, "coordination.k8s.io")
        assert lease is not None and lease["spec"]["holderIdentity"] == "new"
        assert lease["spec"]["leaseTransitions"] == 1
    finally:
        await new.stop()


async def test_a_stalled_leader_stops_writing_before_anyone_takes_over(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    """A leader frozen (GC pause, partition) past its deadline must not write on wake-up."""
    kapi.create("deployments", deployment("llm"), "apps")
    sc = ScaleClient(kclient)
    ref = TargetRef("default", "llm")
    clock = Clock()
    a = make(kclient, "a", clock, ONE)
    await a.informer.wait_synced()
    clock.t += 2
    await a.step()  # joins
    clock.t += 2
    await a.step()  # leads alone
    assert a.can_write(ref)
    b = make(kclient, "b", clock, ONE)
    writes: list[tuple[float, str]] = []

    async def tick(m: ShardManager, alive: bool) -> None:
        if alive:
            await m.step()
            await settle(kapi, [m])
        if m.can_write(ref):  # the control loop's guard before every write
            info = await sc.get_scale("Deployment", "default", "llm")
            await sc.set_replicas(
                "Deployment", "default", "llm", info.spec_replicas + 1, info.resource_version
            )
            writes.append((clock.t, m.identity))

    try:
        await b.informer.wait_synced()
        for step in range(40):
            clock.t += 1.0
            await tick(a, not (5 <= step < 30))  # a stalls for 25 s, then resumes
            await tick(b, True)
        a_times = [t for t, who in writes if who == "a"]
        b_times = [t for t, who in writes if who == "b"]
        assert a_times and b_times, "b never took over"
        assert max(a_times) < min(b_times), "a wrote after b had taken over"
        info = await sc.get_scale("Deployment", "default", "llm")
        assert info.spec_replicas == 1 + len(writes)  # every write landed exactly once
    finally:
        await stop_all([a, b])


async def test_two_candidates_racing_for_a_free_lease_cannot_both_win(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    """Both read the same resourceVersion; the second replace gets 409."""
    clock = Clock()
    a, b = ms = [make(kclient, name, clock, ONE) for name in ("a", "b")]
    try:
        old_leader_lease(kapi, "c", clock)
        for m in ms:
            await m.informer.wait_synced()
            await settle(kapi, [m])
        clock.t += ONE.lease_duration_s + 1  # c died; both see the Lease expired
        rec = a._record(ONE.leader_lease)
        assert rec is not None and rec == b._record(ONE.leader_lease)
        kapi.inject("/leases/llm-autoscaler-leader", None, method="PUT", delay_s=0.05)
        won = await asyncio.gather(
            a._take(ONE.leader_lease, "shard", rec, clock.t),
            b._take(ONE.leader_lease, "shard", rec, clock.t),
        )
        assert sorted(won) == [False, True]
        lease = kapi.get("leases", NS, ONE.leader_lease, "coordination.k8s.io")
        assert lease is not None and lease["spec"]["leaseTransitions"] == 1
    finally:
        await stop_all(ms)


def test_rejects_inconsistent_timings() -> None:
    with pytest.raises(ConfigError, match="renewDeadline"):
        ShardConfig(namespace="x", lease_duration_s=10, renew_deadline_s=12)


async def test_a_burst_of_takes_waits_for_a_lease_connection_instead_of_timing_out(
    kapi: LocalKubeAPI,
) -> None:
    """16 shard takes at once through the Lease pool (2 connections), each answered in
    0.1 s: in the pool's queue the last would wait 0.8 s, past the 0.5 s request timeout
    (the retry period). The manager sends at most a pool's worth at once, so the timeout
    only runs while a request is on the wire: none fails."""
    cfg = ShardConfig(
        namespace=NS, shards=16, lease_duration_s=3, renew_deadline_s=2, retry_period_s=0.5
    )
    api = api_client_for(kapi.url, pool_maxsize=cfg.max_in_flight)
    clock = Clock()
    a = ShardManager(api, cfg, "a", clock=clock, wall_clock=lambda: 1.7e9 + clock.t)
    a.start()
    try:
        await a.informer.wait_synced()
        await a.step()  # member Lease
        clock.t += cfg.retry_period_s
        kapi.inject("/leases", None, method="POST", delay_s=0.1, times=cfg.shards)
        await a.step()  # every shard: 16 creates
        assert a.write_failures == 0
        assert a.held == tuple(range(cfg.shards))
    finally:
        kapi.faults.clear()
        await a.stop()
        await api.close()
