"""Sharded leadership against a real kube-apiserver 1.24, as the controller's
ServiceAccount under the shipped Role: two replicas split the shard Leases (the real
Lease list+watch, replace with resourceVersion, delete with a precondition), and one
stopping hands its shards to the other at once. Real time, short Leases."""

from __future__ import annotations

import asyncio
import contextlib
import time

from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.sharding import ShardConfig, ShardManager, assign
from tests.real.conftest import CONTROLLER_NS
from tests.real.kubectl import Kube
from tests.support.waiting import until

SHARDS = 8
CFG = ShardConfig(
    namespace=CONTROLLER_NS,
    shards=SHARDS,
    prefix="real-shards",  # not the shipped prefix: no other test's Leases in the way
    lease_duration_s=3.0,
    renew_deadline_s=2.0,
    retry_period_s=0.4,
)


def split(managers: list[ShardManager]) -> bool:
    share = assign(SHARDS, [m.identity for m in managers])
    return all(m.status().writable == tuple(share[m.identity]) for m in managers)


async def test_two_replicas_split_the_shards_and_a_stopping_one_hands_them_over(
    kube: Kube, controller_api: ApiClient
) -> None:
    a = ShardManager(controller_api, CFG, "real-a")
    b = ShardManager(controller_api, CFG, "real-b")
    tasks = []
    try:
        for m in (a, b):
            m.start()
            tasks.append(asyncio.get_running_loop().create_task(m.run()))
        await until(lambda: split([a, b]), 30, "a and b to split the 8 shards")
        assert a.held and b.held and not set(a.held) & set(b.held)
        lease = await kube.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NS}/leases/real-shards-shard-0"
        )
        assert lease["spec"]["holderIdentity"] in ("real-a", "real-b")
        assert lease["metadata"]["labels"]["autoscaler.llmscaler.io/lease-role"] == "shard"
        tasks[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[0]
        started = time.monotonic()
        await a.release_all()
        assert time.monotonic() - started < 5  # inside the shutdown budget
        await until(lambda: split([b]), 10, "b to take a's released shards")
        leases = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NS}/leases")
        names = {item["metadata"]["name"] for item in leases["items"]}
        assert a.member_lease not in names and b.member_lease in names
    finally:
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await b.release_all()
        for m in (a, b):
            await m.stop()
