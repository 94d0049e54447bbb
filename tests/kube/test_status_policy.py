"""The controller's status write reports the policy in use (``status.profile``,
``status.policyHash``, ``observedGeneration``, the ``OverridesProfile`` condition), and
writes only when something in it changed: the decision path through `KubeCluster.record`
and the CRD store against the local API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.control.adapters import KubeCluster
from autoscaler.control.clock import FakeClock
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.policy.document import policy_hash
from autoscaler.policy.profiles import cost_first, recommended
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.target import API_VERSION, TargetSpec, object_to_spec

GROUP = "autoscaling.llmscaler.io"
REF = TargetRef("default", "llm")
STEADY = Decision(1.0, 2, 2, Reason.STEADY, "steady at 2", True)


def llmas(**policy: Any) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "LLMAutoscaler",
        "metadata": {"name": REF.name, "namespace": REF.namespace},
        "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "llm"}, **policy},
    }


@dataclass
class Rig:
    kapi: LocalKubeAPI
    store: CrdPolicyStore
    cluster: KubeCluster
    clock: FakeClock

    async def spec(self) -> TargetSpec:
        """The target as the controller reads it (the store's list: generation seen)."""
        (stored,) = await self.store.list("default")
        return stored.spec

    def edit(self, **policy: Any) -> None:
        obj = self.kapi.get("llmautoscalers", REF.namespace, REF.name, GROUP)
        assert obj is not None
        obj["spec"] = llmas(**policy)["spec"]
        self.kapi.update("llmautoscalers", obj, group=GROUP)

    def status(self) -> dict[str, Any]:
        obj = self.kapi.get("llmautoscalers", REF.namespace, REF.name, GROUP)
        assert obj is not None
        status: dict[str, Any] = obj.get("status") or {}
        return status

    def status_writes(self) -> int:
        return sum(
            1 for c in self.kapi.calls if c.verb == "patch" and "llmautoscalers" in c.resource
        )


@pytest.fixture
async def rig(kapi: LocalKubeAPI, kclient: ApiClient) -> AsyncIterator[Rig]:
    store = CrdPolicyStore(kclient, "default")
    clock = FakeClock(100.0)
    cluster = KubeCluster(kclient, status=store, clock=clock)
    try:
        yield Rig(kapi, store, cluster, clock)
    finally:
        await cluster.close()


def conditions(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or []}


async def test_the_status_names_the_profile_and_the_hash_of_the_effective_policy(
    rig: Rig,
) -> None:
    rig.kapi.create("llmautoscalers", llmas(), group=GROUP)
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    status = rig.status()
    assert status["profile"] == "recommended"  # the spec names none
    assert status["policyHash"] == policy_hash(recommended())
    assert status["observedGeneration"] == 1
    assert "OverridesProfile" not in conditions(status)


async def test_a_steady_target_is_written_once_then_not_again(rig: Rig) -> None:
    rig.kapi.create("llmautoscalers", llmas(), group=GROUP)
    spec = await rig.spec()
    for _ in range(5):
        await rig.cluster.record(spec, STEADY, applied=False)
        await rig.clock.advance(1.0)
    # The store re-reads the same spec: an equal policy status, no write either.
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    assert rig.status_writes() == 1


async def test_a_new_profile_is_written_at_the_next_tick_with_the_new_generation(
    rig: Rig,
) -> None:
    rig.kapi.create("llmautoscalers", llmas(), group=GROUP)
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    before = rig.status()["policyHash"]
    rig.edit(profile="cost-first")
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    status = rig.status()
    assert rig.status_writes() == 2
    assert status["profile"] == "cost-first"
    assert status["policyHash"] == policy_hash(cost_first()) != before
    assert status["observedGeneration"] == 2


async def test_an_edit_that_changes_no_effective_field_moves_only_the_generation(
    rig: Rig,
) -> None:
    rig.kapi.create("llmautoscalers", llmas(), group=GROUP)
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    before = rig.status()
    rig.edit(maxReplicaCount=64)  # recommended's own value, now written out
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    after = rig.status()
    assert rig.status_writes() == 2  # observedGeneration must follow the spec
    assert after["observedGeneration"] == 2
    assert (after["profile"], after["policyHash"]) == (before["profile"], before["policyHash"])


async def test_an_old_crd_default_over_the_profile_raises_overrides_profile_until_removed(
    rig: Rig,
) -> None:
    # What the pre-profiles CRD stored for an object that set only its metrics.
    old = {
        "metrics": [{"signal": "waiting", "target": 4, "type": "AverageValue"}],
        "minReplicaCount": 1,
        "maxReplicaCount": 16,
        "cooldownPeriod": 300,
        "pollingInterval": 1,
    }
    rig.kapi.create("llmautoscalers", llmas(**old), group=GROUP)
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    cond = conditions(rig.status())["OverridesProfile"]
    assert (cond["status"], cond["reason"]) == ("True", "OldCRDDefault")
    assert "maxReplicaCount=16 (profile: 64)" in cond["message"]
    for harmless in ("minReplicaCount", "cooldownPeriod", "pollingInterval"):
        assert harmless not in cond["message"]  # equal to the profile's: no effect
    assert "if the old CRD wrote them, remove them" in cond["message"]
    # Ready/Active/Actuating are still there next to it.
    assert {"Ready", "Active", "Actuating"} <= set(conditions(rig.status()))

    with_16 = rig.status()["policyHash"]

    del old["maxReplicaCount"]
    rig.edit(**old)
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    assert "OverridesProfile" not in conditions(rig.status())
    now_runs = object_to_spec(llmas(**old)).policy
    assert now_runs.max_replica_count == 64  # the profile's, at last
    assert rig.status()["policyHash"] == policy_hash(now_runs) != with_16


async def test_a_deliberate_value_different_from_the_old_default_raises_nothing(
    rig: Rig,
) -> None:
    rig.kapi.create("llmautoscalers", llmas(maxReplicaCount=24), group=GROUP)
    await rig.cluster.record(await rig.spec(), STEADY, applied=False)
    assert "OverridesProfile" not in conditions(rig.status())


async def test_the_periodic_refresh_still_applies(rig: Rig) -> None:
    rig.kapi.create("llmautoscalers", llmas(), group=GROUP)
    spec = await rig.spec()
    await rig.cluster.record(spec, STEADY, applied=False)
    await rig.clock.advance(rig.cluster.status_every_s)
    await rig.cluster.record(spec, STEADY, applied=False)
    assert rig.status_writes() == 2
