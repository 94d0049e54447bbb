"""Leader election with two instances on one Lease (local API, injected clocks)."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.errors import ConfigError
from autoscaler.kube.leader import LeaderElector, LeaseConfig
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.scale import ScaleClient
from tests.support.workloads import deployment

CFG = LeaseConfig(namespace="default", lease_duration_s=15, renew_deadline_s=10, retry_period_s=2)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def pair(kclient: ApiClient, clock: Clock) -> tuple[LeaderElector, LeaderElector]:
    a = LeaderElector(kclient, CFG, "a", clock=clock, wall_clock=lambda: clock.t + 1.7e9)
    b = LeaderElector(kclient, CFG, "b", clock=clock, wall_clock=lambda: clock.t + 1.7e9)
    return a, b


async def test_one_leader_and_failover_within_lease_duration_when_leader_dies(
    kclient: ApiClient,
) -> None:
    clock = Clock()
    a, b = pair(kclient, clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    # a renews for a while, then dies at t0 (stops renewing).
    for _ in range(5):
        clock.t += CFG.retry_period_s
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()
        assert a.is_leader and not b.is_leader
    died_at = clock.t
    took_over_at = None
    while took_over_at is None:
        clock.t += CFG.retry_period_s
        if await b.try_acquire_or_renew():
            took_over_at = clock.t
        assert not (a.is_leader and b.is_leader), f"two leaders at t={clock.t}"
    assert took_over_at - died_at <= CFG.lease_duration_s + CFG.retry_period_s
    assert b.holder == "b" or b.is_leader


async def test_stalled_leader_stops_writing_before_anyone_takes_over(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    """A leader frozen (GC pause, partition) past its deadline must not write on wake-up."""
    kapi.create("deployments", deployment("llm"), "apps")
    sc = ScaleClient(kclient)
    clock = Clock()
    a, b = pair(kclient, clock)
    writes: list[tuple[float, str]] = []

    async def tick(elector: LeaderElector, alive: bool) -> None:
        if alive:
            await elector.try_acquire_or_renew()
        if elector.is_leader:  # the control loop's guard before every write
            info = await sc.get_scale("Deployment", "default", "llm")
            await sc.set_replicas(
                "Deployment", "default", "llm", info.spec_replicas + 1, info.resource_version
            )
            writes.append((clock.t, elector.identity))

    for step in range(40):
        clock.t += 1.0
        a_alive = not (5 <= step < 30)  # a stalls for 25 s, then resumes
        await tick(a, a_alive)
        await tick(b, True)
    per_time: dict[float, set[str]] = {}
    for t, who in writes:
        per_time.setdefault(t, set()).add(who)
    assert all(len(w) == 1 for w in per_time.values()), "two writers in one instant"
    a_times = [t for t, who in writes if who == "a"]
    b_times = [t for t, who in writes if who == "b"]
    assert b_times, "b never took over"
    assert max(a_times) < min(b_times), "a wrote after b had taken over"
    # Every write landed exactly once: replicas = 1 + number of writes.
    info = await sc.get_scale("Deployment", "default", "llm")
    assert info.spec_replicas == 1 + len(writes)


async def test_release_hands_over_immediately(kclient: ApiClient) -> None:
    clock = Clock()
    a, b = pair(kclient, clock)
    assert await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    await a.release()
    assert not a.is_leader
    clock.t += CFG.retry_period_s
    assert await b.try_acquire_or_renew()


async def test_two_candidates_racing_on_an_expired_lease_cannot_both_win(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    clock = Clock()
    a, b = pair(kclient, clock)
    c = LeaderElector(kclient, CFG, "c", clock=clock)
    assert await c.try_acquire_or_renew()
    assert not await a.try_acquire_or_renew()
    assert not await b.try_acquire_or_renew()
    clock.t += CFG.lease_duration_s + 1  # c died; both see the lease expired
    # Both read the same resourceVersion; the second replace must get 409.
    lease = kapi.get("leases", "default", "llm-autoscaler", "coordination.k8s.io")
    assert lease is not None
    kapi.inject("/leases/llm-autoscaler", None, method="PUT", delay_s=0.05)
    won = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(won) == [False, True]
    lease_after = kapi.get("leases", "default", "llm-autoscaler", "coordination.k8s.io")
    assert lease_after is not None
    assert lease_after["spec"]["leaseTransitions"] == 1


def test_rejects_inconsistent_timings() -> None:
    with pytest.raises(ConfigError, match="renewDeadline"):
        LeaseConfig(namespace="x", lease_duration_s=10, renew_deadline_s=12)
