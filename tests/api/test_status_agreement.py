"""The REST API's ``effectivePolicy`` and the LLMAutoscaler status agree: the profile the
GET shows is ``status.profile``, and ``status.policyHash`` is the hash of what it shows
(targets written through the REST API into the CRD store, the status written by the
controller's recorder, both against the local API)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.control.adapters import KubeCluster
from autoscaler.control.clock import FakeClock
from autoscaler.control.state import ControllerState
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL
from autoscaler.policy.document import document_hash
from autoscaler.store.crd import CrdPolicyStore
from tests.api.conftest import READ, WRITE
from tests.api.support import WRITE_TOKEN

REF = TargetRef("llm", "chat")
URL = f"/v1/targets/{REF.namespace}/{REF.name}"


@dataclass
class Rig:
    kube: LocalKubeAPI
    http: httpx.AsyncClient
    store: CrdPolicyStore
    cluster: KubeCluster

    async def put_and_record(self, policy: dict[str, Any]) -> dict[str, Any]:
        """PUT the target, let the controller record one decision, return the status."""
        body = {"scaleTargetRef": {"name": "vllm-chat"}, "policy": policy}
        r = await self.http.put(URL, json=body, headers=WRITE)
        assert r.status_code in (200, 201), r.text
        (stored,) = await self.store.list(REF.namespace)
        decision = Decision(1.0, 1, 1, Reason.STEADY, "steady", True)
        await self.cluster.record(stored.spec, decision, applied=False)
        obj = self.kube.get(CRD_PLURAL, REF.namespace, REF.name, group=CRD_GROUP)
        assert obj is not None
        status: dict[str, Any] = obj["status"]
        return status


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    async with LocalKubeAPI() as kube, api_client_for(kube.url) as api:
        store = CrdPolicyStore(api, REF.namespace)
        cluster = KubeCluster(api, status=store, clock=FakeClock())
        app = create_app(ControllerState(), store, ApiSettings(write_token=WRITE_TOKEN))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield Rig(kube, http, store, cluster)
        await cluster.close()


@pytest.mark.parametrize(
    "policy",
    [
        {},
        {"profile": "cost-first"},
        {"profile": "cost-first", "maxReplicaCount": 12},
        {"prediction": None, "behavior": {"scaleDown": {"stabilizationWindowSeconds": 120}}},
    ],
    ids=["omitted", "cost-first", "cost-first-overridden", "recommended-overridden"],
)
async def test_the_target_get_and_the_status_report_the_same_profile_and_policy(
    rig: Rig, policy: dict[str, Any]
) -> None:
    status = await rig.put_and_record(policy)
    got = await rig.http.get(URL, headers=READ)
    assert got.status_code == 200, got.text
    effective = got.json()["effectivePolicy"]
    assert effective["profile"] == status["profile"] == policy.get("profile", "recommended")
    assert document_hash(effective) == status["policyHash"]
    alone = await rig.http.get(f"{URL}/policy/effective", headers=READ)
    assert document_hash(alone.json()) == status["policyHash"]


async def test_a_rest_edit_moves_both_views_together(rig: Rig) -> None:
    first = await rig.put_and_record({})
    second = await rig.put_and_record({"profile": "cost-first"})
    got = (await rig.http.get(URL, headers=READ)).json()["effectivePolicy"]
    assert second["profile"] == got["profile"] == "cost-first"
    assert second["policyHash"] == document_hash(got) != first["policyHash"]
