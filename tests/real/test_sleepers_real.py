"""Sleepers on kube-apiserver 1.24: the CRD takes ``sleep`` (and refuses a bad one), the
status subresource keeps ``awakeReplicas``/``sleepingReplicas`` as the controller writes
them, and ``kubectl get llmas -o wide`` shows them as the Awake and Sleeping columns."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.control.adapters import KubeCluster
from autoscaler.control.clock import FakeClock
from autoscaler.domain import Decision, Reason
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.target import API_VERSION
from tests.real.kubectl import Kube, KubeError
from tests.real.test_status_real import bare

SLEEPY = Decision(
    1.0,
    1,
    1,
    Reason.STEADY,
    "steady at 1",
    True,
    numbers={"sleepers.sleeping": 2.0, "sleepers.awake": 1.0},
)


async def test_the_sleep_spec_and_the_awake_sleeping_status_round_trip(
    kube: Kube, namespace: str, controller_api: ApiClient
) -> None:
    await kube.create(bare("sleepy", namespace, sleep={"maxSleeping": 2, "ttlSeconds": 1800}))
    store = CrdPolicyStore(controller_api, namespace)
    cluster = KubeCluster(controller_api, status=store, clock=FakeClock())
    try:
        [stored] = await store.list(namespace)
        assert stored.spec.policy.sleep is not None
        assert stored.spec.policy.sleep.max_sleeping == 2
        await cluster.record(stored.spec, SLEEPY, applied=False)
    finally:
        await cluster.close()
    status = (await kube.read(bare("sleepy", namespace)))["status"]
    assert (status["awakeReplicas"], status["sleepingReplicas"]) == (1, 2)

    assert kube._session is not None
    path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers"
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
    async with kube._session.get(kube.url + path, headers={"Accept": accept}) as resp:
        table: dict[str, Any] = await resp.json()
    names = [c["name"] for c in table["columnDefinitions"]]
    priority = {c["name"]: c["priority"] for c in table["columnDefinitions"]}
    assert priority["Awake"] == priority["Sleeping"] == 1  # -o wide
    row = dict(zip(names, table["rows"][0]["cells"], strict=True))
    assert (row["Awake"], row["Sleeping"]) == (1, 2)


@pytest.mark.parametrize(
    "sleep", [{"maxSleeping": -1}, {"maxSleeping": 1, "ttlSeconds": 0}, {"ttlSeconds": 60}]
)
async def test_the_api_server_refuses_a_bad_sleep_block(
    kube: Kube, namespace: str, sleep: dict[str, Any]
) -> None:
    with pytest.raises(KubeError) as err:
        await kube.create(bare("bad", namespace, sleep=sleep))
    assert "sleep" in str(err.value)
