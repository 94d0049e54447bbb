"""Profiles through the REST API and the file store: selection, the effective policy,
validation of the name, and documents kept as written."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import yaml

from autoscaler.domain import TargetRef
from autoscaler.policy.profiles import PROFILES, cost_first, recommended
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import READ, WRITE

URL = "/v1/targets/llm/chat"


def _read_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


async def _put(client: httpx.AsyncClient, policy: dict[str, object]) -> httpx.Response:
    body = {"scaleTargetRef": {"name": "vllm-chat"}, "policy": policy}
    return await client.put(URL, json=body, headers=WRITE)


async def test_a_target_without_policy_fields_runs_the_recommended_profile(
    client: httpx.AsyncClient,
) -> None:
    r = await client.put(URL, json={"scaleTargetRef": {"name": "vllm-chat"}}, headers=WRITE)
    assert r.status_code == 201, r.text
    doc = r.json()
    assert doc["policy"] == {}
    assert doc["effectivePolicy"] == {"profile": "recommended", **recommended().dump()}
    got = await client.get(f"{URL}/policy/effective", headers=READ)
    assert got.json() == doc["effectivePolicy"]


async def test_selecting_cost_first_with_an_override(client: httpx.AsyncClient) -> None:
    r = await _put(client, {"profile": "cost-first", "maxReplicaCount": 12})
    assert r.status_code == 201, r.text
    effective = r.json()["effectivePolicy"]
    assert effective["profile"] == "cost-first"
    assert effective == {
        "profile": "cost-first",
        **cost_first().model_copy(update={"max_replica_count": 12}).dump(),
    }
    # GET /policy is the document as written: what PUT replaces and PATCH merges into.
    assert (await client.get(f"{URL}/policy")).json() == {
        "profile": "cost-first",
        "maxReplicaCount": 12,
    }


async def test_an_unknown_profile_is_422_naming_field_value_and_choices(
    client: httpx.AsyncClient,
) -> None:
    r = await _put(client, {"profile": "cheap"})
    assert r.status_code == 422
    (problem,) = r.json()["problems"]
    assert problem == "policy.profile: value 'cheap' must be one of cost-first, recommended"
    await _put(client, {})
    r = await client.patch(f"{URL}/policy", json={"profile": "fast"}, headers=WRITE)
    assert r.status_code == 422 and "policy.profile: value 'fast'" in r.json()["problems"][0]
    r = await client.put(f"{URL}/policy", json={"profile": 1}, headers=WRITE)
    assert r.status_code == 422 and "policy.profile: value 1" in r.json()["problems"][0]


async def test_patching_the_profile_switches_every_value_not_overridden(
    client: httpx.AsyncClient,
) -> None:
    await _put(client, {"maxReplicaCount": 10})
    r = await client.patch(f"{URL}/policy", json={"profile": "cost-first"}, headers=WRITE)
    assert r.status_code == 200, r.text
    effective = (await client.get(f"{URL}/policy/effective")).json()
    assert effective["metrics"] == cost_first().dump()["metrics"]
    assert effective["maxReplicaCount"] == 10  # still the document's
    # A merge-patch null removes the field from the document: the profile's value returns.
    await client.patch(f"{URL}/policy", json={"maxReplicaCount": None}, headers=WRITE)
    effective = (await client.get(f"{URL}/policy/effective")).json()
    assert effective["maxReplicaCount"] == cost_first().max_replica_count


async def test_prediction_off_by_put_null_or_patch_enabled_false(
    client: httpx.AsyncClient,
) -> None:
    r = await client.put(URL, json={"policy": {"prediction": None}}, headers=WRITE)
    assert r.status_code == 201, r.text
    assert "prediction" not in r.json()["effectivePolicy"]
    r = await client.patch(f"{URL}/policy", json={"prediction": {"enabled": False}}, headers=WRITE)
    assert r.status_code == 200, r.text
    effective = (await client.get(f"{URL}/policy/effective")).json()
    assert effective["prediction"]["enabled"] is False


async def test_effective_policy_is_read_only(client: httpx.AsyncClient) -> None:
    got = (await _put(client, {})).json()
    body = {k: v for k, v in got.items() if k not in ("version", "status")}
    r = await client.put(URL, json=body, headers=WRITE)
    assert r.status_code == 422
    assert any(p.startswith("effectivePolicy: read-only") for p in r.json()["problems"])


async def test_profiles_are_listed_with_their_documents(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/profiles", headers=READ)
    assert r.status_code == 200
    doc = r.json()
    assert doc["default"] == "recommended"
    assert [i["name"] for i in doc["items"]] == sorted(PROFILES)
    for item in doc["items"]:
        assert item["policy"] == PROFILES[item["name"]]().dump()


async def test_the_file_keeps_the_document_not_the_effective_policy(
    client: httpx.AsyncClient, store: FilePolicyStore
) -> None:
    await _put(client, {"profile": "cost-first", "behavior": {"scaleDown": {"tolerance": 0.2}}})
    on_disk = _read_yaml(store.path)
    (item,) = on_disk["targets"] if isinstance(on_disk, dict) else on_disk
    assert item["policy"] == {
        "profile": "cost-first",
        "behavior": {"scaleDown": {"tolerance": 0.2}},
    }
    again = await FilePolicyStore(store.path).get(TargetRef("llm", "chat"))
    down = again.spec.policy.behavior.scale_down
    base = cost_first().behavior.scale_down
    assert down is not None and base is not None
    assert (down.tolerance, down.stabilization_window_seconds) == (
        0.2,
        base.stabilization_window_seconds,
    )
