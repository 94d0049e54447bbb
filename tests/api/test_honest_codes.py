"""Every error has an honest code: the API server's refusals, its permission errors and
its unavailability become 422, 503 naming verb and resource, and 503 with Retry-After;
non-JSON bodies are 415; values are checked as the CRD checks them and stored as
validated; an unconditional PATCH retries its read-modify-write under concurrency."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import serve_http
from autoscaler.control.state import ControllerState
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.retry import RetryPolicy
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import WRITE
from tests.api.support import WRITE_TOKEN

URL = "/v1/targets/default/chat"
RESOURCE = "llmautoscalers.autoscaling.llmscaler.io"


def file_app_at(tmp_path: Path) -> Any:
    store = FilePolicyStore(tmp_path / "p.yaml")
    return create_app(ControllerState(), store, ApiSettings(write_token=WRITE_TOKEN))


async def _no_sleep(_: float) -> None:
    return None


@pytest.fixture
async def kube() -> AsyncIterator[tuple[LocalKubeAPI, httpx.AsyncClient]]:
    async with LocalKubeAPI(port=0) as kapi, api_client_for(kapi.url) as api:
        store = CrdPolicyStore(api, None, retry=RetryPolicy(attempts=3), sleep=_no_sleep)
        app = create_app(ControllerState(), store, ApiSettings(write_token=WRITE_TOKEN))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as c:
            yield kapi, c


async def test_a_422_from_the_api_server_is_422_with_its_causes(
    kube: tuple[LocalKubeAPI, httpx.AsyncClient],
) -> None:
    kapi, c = kube
    kapi.inject("/llmautoscalers", 422, method="POST")
    r = await c.put(URL, json={"policy": {"maxReplicaCount": 5}}, headers=WRITE)
    assert r.status_code == 422
    body = r.json()
    assert "API server refused" in body["detail"]
    assert any("injected fault 422" in p for p in body["problems"])


@pytest.mark.parametrize(("method", "verb"), [("POST", "create"), ("GET", "get")])
async def test_a_403_is_503_saying_the_controller_lacks_permission(
    kube: tuple[LocalKubeAPI, httpx.AsyncClient], method: str, verb: str
) -> None:
    kapi, c = kube
    if method == "GET":
        assert (await c.put(URL, json={}, headers=WRITE)).status_code == 201
    kapi.inject("/llmautoscalers", 403, method=method)
    r = await (c.get(URL) if method == "GET" else c.put(URL, json={}, headers=WRITE))
    assert r.status_code == 503
    body = r.json()
    assert f"lacks permission to {verb} {RESOURCE} in namespace 'default'" in body["detail"]
    assert (body["verb"], body["resource"]) == (verb, RESOURCE)


@pytest.mark.parametrize("status", [429, 500, 503])
async def test_busy_or_failing_api_server_after_the_retries_is_503_with_retry_after(
    kube: tuple[LocalKubeAPI, httpx.AsyncClient], status: int
) -> None:
    kapi, c = kube
    kapi.inject("/llmautoscalers", status, times=3)  # every attempt
    r = await c.put(URL, json={}, headers=WRITE)
    assert r.status_code == 503
    assert r.headers["retry-after"] == "1"
    assert f"HTTP {status}" in r.json()["detail"]
    assert (await c.put(URL, json={}, headers=WRITE)).status_code == 201  # recovered


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"maxReplicaCount": "5"}, "policy.maxReplicaCount"),
        ({"maxReplicaCount": True}, "policy.maxReplicaCount"),
        ({"cooldownPeriod": "300"}, "policy.cooldownPeriod"),
        ({"engine": "bogus"}, "engine"),
        ({"metricsPath": "/metrics\r\nX-Injected: 1"}, "metricsPath"),
        ({"selector": {"bad key!": "x"}}, "selector"),
        ({"pollingInterval": 5e-324}, "policy.pollingInterval"),
        ({"behavior": {"scaleUp": {"tolerance": 1e308}}}, "policy.behavior.scaleUp.tolerance"),
    ],
)
async def test_values_the_crd_refuses_are_422_naming_the_field_on_both_stores(
    kube: tuple[LocalKubeAPI, httpx.AsyncClient],
    tmp_path: Path,
    patch: dict[str, Any],
    field: str,
) -> None:
    kapi, crd_client = kube
    file_app = file_app_at(tmp_path)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=file_app), base_url="http://api"
    ) as file_client:
        for c in (crd_client, file_client):
            assert (await c.put(URL, json={}, headers=WRITE)).status_code == 201
            policy_level = field.startswith("policy.")
            body = {"policy": patch} if policy_level else patch
            r = await c.patch(URL, json=body, headers=WRITE)
            assert r.status_code == 422, r.text
            assert any(p.startswith(field) for p in r.json()["problems"]), r.json()
            got = (await c.get(URL)).json()
            assert got["policy"] == {}  # nothing stored


async def test_the_file_store_keeps_the_validated_values(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    app = create_app(ControllerState(), FilePolicyStore(path), ApiSettings(write_token=WRITE_TOKEN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        doc = {"policy": {"maxReplicaCount": 5, "prediction": {"enabled": False}}}
        assert (await c.put(URL, json=doc, headers=WRITE)).status_code == 201
    reread = await FilePolicyStore(path).get((await FilePolicyStore(path).list())[0].spec.ref)
    stored = reread.spec.policy_document()
    assert stored["maxReplicaCount"] == 5 and type(stored["maxReplicaCount"]) is int
    assert stored["prediction"] == {"enabled": False}


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/xml", "application/x-www-form-urlencoded"]
)
async def test_non_json_bodies_are_415(tmp_path: Path, content_type: str) -> None:
    app = file_app_at(tmp_path)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        headers = {**WRITE, "Content-Type": content_type}
        r = await c.put(URL, content=b"{}", headers=headers)
        assert r.status_code == 415
        assert content_type in r.json()["detail"]
        plain = await c.put(URL, content=b"{}", headers=WRITE)  # no Content-Type: JSON
        assert plain.status_code == 201
        merge = {**WRITE, "Content-Type": "application/merge-patch+json; charset=utf-8"}
        r = await c.patch(URL, content=b'{"policy": {"maxReplicaCount": 7}}', headers=merge)
        assert r.status_code == 200


async def test_twenty_concurrent_unconditional_patches_all_succeed_and_none_is_lost(
    tmp_path: Path,
) -> None:
    app = file_app_at(tmp_path)
    handle = await serve_http(app)
    try:
        async with httpx.AsyncClient(base_url=handle.url, timeout=30.0) as c:
            assert (await c.put(URL, json={}, headers=WRITE)).status_code == 201
            # each writer sets its own label: a lost update would drop one of them
            results = await asyncio.gather(
                *(c.patch(URL, json={"selector": {f"w{i}": "x"}}, headers=WRITE) for i in range(20))
            )
            assert sorted({r.status_code for r in results}) == [200]
            selector = (await c.get(URL)).json()["selector"]
            assert selector == {f"w{i}": "x" for i in range(20)}
    finally:
        await handle.stop()
