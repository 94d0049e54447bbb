"""REST policy API through the ASGI transport: CRUD, ETags, validation, decisions, dry-run."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest
from fastapi import FastAPI

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import READ, WRITE
from tests.api.support import READ_TOKEN, WRITE_TOKEN, observation, publish, register, spec

URL = "/v1/targets/llm/chat"
BODY = {
    "mode": "keda",
    "scaleTargetRef": {"name": "vllm-chat"},
    "policy": {"minReplicaCount": 1, "maxReplicaCount": 6},
}


async def _create(client: httpx.AsyncClient) -> httpx.Response:
    r = await client.put(URL, json=BODY, headers=WRITE)
    assert r.status_code == 201, r.text
    return r


async def test_create_then_get_returns_same_document_and_etag(client: httpx.AsyncClient) -> None:
    created = await _create(client)
    assert created.headers["location"] == URL
    got = await client.get(URL)
    assert got.status_code == 200
    assert got.headers["etag"] == created.headers["etag"]
    doc = got.json()
    assert doc["policy"]["maxReplicaCount"] == 6
    assert doc["scaleTargetRef"]["name"] == "vllm-chat"
    assert doc["version"] == created.headers["etag"].strip('"')
    listed = (await client.get("/v1/targets", params={"namespace": "llm"})).json()["items"]
    assert [(t["namespace"], t["name"]) for t in listed] == [("llm", "chat")]
    assert (await client.get("/v1/targets", params={"namespace": "other"})).json()["items"] == []


async def test_replace_with_stale_etag_is_412_and_keeps_stored_policy(
    client: httpx.AsyncClient,
) -> None:
    etag = (await _create(client)).headers["etag"]
    body = {**BODY, "policy": {"maxReplicaCount": 9}}
    first = await client.put(URL, json=body, headers={**WRITE, "If-Match": etag})
    assert first.status_code == 200
    second = await client.put(URL, json=BODY, headers={**WRITE, "If-Match": etag})
    assert second.status_code == 412
    assert (await client.get(URL)).json()["policy"]["maxReplicaCount"] == 9


async def test_invalid_policy_is_rejected_whole_with_field_messages(
    client: httpx.AsyncClient,
) -> None:
    etag = (await _create(client)).headers["etag"]
    bad = {
        **BODY,
        "policy": {"minReplicaCount": 5, "maxReplicaCount": 2, "cooldownPeriod": -3},
    }
    r = await client.put(URL, json=bad, headers=WRITE)
    assert r.status_code == 422
    problems = r.json()["problems"]
    assert any("policy.cooldownPeriod" in p and "-3" in p for p in problems), problems
    assert (await client.get(URL)).headers["etag"] == etag  # nothing stored


async def test_unknown_field_and_bad_json_are_422(client: httpx.AsyncClient) -> None:
    r = await client.put(URL, json={**BODY, "replicas": 3}, headers=WRITE)
    assert r.status_code == 422
    assert any(p.startswith("replicas: unknown field") for p in r.json()["problems"])
    r = await client.put(URL, content=b"{not json", headers=WRITE)
    assert r.status_code == 422
    assert "not valid JSON" in r.json()["problems"][0]
    r = await client.put(URL, json={**BODY, "name": "other"}, headers=WRITE)
    assert r.status_code == 422
    assert "does not match the URL" in r.json()["problems"][0]


async def test_merge_patch_changes_only_named_fields_and_null_resets(
    client: httpx.AsyncClient,
) -> None:
    etag = (await _create(client)).headers["etag"]
    patch = {"policy": {"maxReplicaCount": 7, "cooldownPeriod": 60}}
    r = await client.patch(
        URL,
        json=patch,
        headers={**WRITE, "If-Match": etag, "Content-Type": "application/merge-patch+json"},
    )
    assert r.status_code == 200, r.text
    doc = r.json()
    assert doc["policy"] == {"minReplicaCount": 1, "maxReplicaCount": 7, "cooldownPeriod": 60}
    assert doc["effectivePolicy"]["maxReplicaCount"] == 7
    assert doc["scaleTargetRef"]["name"] == "vllm-chat"
    r = await client.patch(URL, json={"policy": {"cooldownPeriod": None}}, headers=WRITE)
    assert "cooldownPeriod" not in r.json()["policy"]  # removed from the document (RFC 7386)
    assert r.json()["effectivePolicy"]["cooldownPeriod"] == 300  # so the profile's again
    stale = await client.patch(URL, json=patch, headers={**WRITE, "If-Match": etag})
    assert stale.status_code == 412


async def test_policy_subresource_put_and_patch(client: httpx.AsyncClient) -> None:
    await _create(client)
    got = await client.get(f"{URL}/policy")
    assert got.json()["maxReplicaCount"] == 6
    r = await client.put(
        f"{URL}/policy",
        json={"maxReplicaCount": 3},
        headers={**WRITE, "If-Match": got.headers["etag"]},
    )
    assert r.status_code == 200
    assert r.json() == {"maxReplicaCount": 3}  # replaced whole: the document as written
    effective = (await client.get(f"{URL}/policy/effective")).json()
    assert effective["profile"] == "recommended"
    assert (effective["minReplicaCount"], effective["maxReplicaCount"]) == (1, 3)
    r = await client.patch(f"{URL}/policy", json={"maxReplicaCount": 0}, headers=WRITE)
    assert r.status_code == 422
    assert any("policy.maxReplicaCount" in p for p in r.json()["problems"])
    assert (await client.get(URL)).json()["mode"] == "keda"


async def test_delete_with_if_match_then_404(client: httpx.AsyncClient) -> None:
    etag = (await _create(client)).headers["etag"]
    assert (await client.delete(URL, headers={**WRITE, "If-Match": '"999"'})).status_code == 412
    assert (await client.delete(URL, headers={**WRITE, "If-Match": etag})).status_code == 204
    assert (await client.get(URL)).status_code == 404
    assert (await client.delete(URL, headers=WRITE)).status_code == 404


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({}, 401),
        ({"Authorization": "Basic dXNlcjpwYXNz"}, 401),
        ({"Authorization": "Bearer"}, 401),
        ({"Authorization": "Bearer wrong-token"}, 403),
        ({"Authorization": f"Bearer {READ_TOKEN}"}, 403),
        (WRITE, 201),
    ],
)
async def test_writes_need_the_write_token(
    client: httpx.AsyncClient, headers: dict[str, str], status: int
) -> None:
    r = await client.put(URL, json=BODY, headers=headers)
    assert r.status_code == status
    if status == 401:
        assert r.headers["www-authenticate"] == "Bearer"
    assert WRITE_TOKEN not in r.text


async def test_writes_are_disabled_without_a_configured_token(
    state: ControllerState, store: FilePolicyStore
) -> None:
    app = create_app(state, store, ApiSettings())
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        r = await c.put(URL, json=BODY, headers=WRITE)
        assert r.status_code == 403
        assert "no API token configured" in r.json()["detail"]
        assert (await c.get("/v1/targets")).status_code == 200  # reads stay open


async def test_read_token_when_configured_guards_reads_but_not_probes(
    state: ControllerState, store: FilePolicyStore
) -> None:
    app = create_app(state, store, ApiSettings(write_token=WRITE_TOKEN, read_token=READ_TOKEN))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        assert (await c.get("/v1/targets")).status_code == 401
        assert (
            await c.get("/v1/targets", headers={"Authorization": "Bearer x"})
        ).status_code == 403
        assert (await c.get("/v1/targets", headers=READ)).status_code == 200
        assert (await c.get("/v1/targets", headers=WRITE)).status_code == 200
        assert (await c.get("/healthz")).status_code == 200
        assert (await c.get("/metrics")).status_code == 200


async def test_no_secret_appears_in_logs_or_repr(
    client: httpx.AsyncClient,
    app: FastAPI,
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    await client.put(URL, json=BODY, headers={"Authorization": "Bearer not-the-token"})
    await client.put(URL, json=BODY, headers=WRITE)
    await client.patch(URL, json={"policy": {"maxReplicaCount": 2}}, headers=WRITE)
    out = capsys.readouterr()
    logged = out.out + out.err + caplog.text
    assert "target_stored" in logged  # the write was logged, without the token
    assert WRITE_TOKEN not in logged
    assert WRITE_TOKEN not in repr(app.state.api_settings)


async def test_cors_is_closed_by_default_and_opens_only_to_configured_origins(
    client: httpx.AsyncClient, state: ControllerState, store: FilePolicyStore
) -> None:
    preflight = {
        "Origin": "https://evil.example",
        "Access-Control-Request-Method": "PUT",
        "Access-Control-Request-Headers": "authorization",
    }
    r = await client.options(URL, headers=preflight)
    assert "access-control-allow-origin" not in r.headers
    app = create_app(state, store, ApiSettings(cors_origins=("https://ops.example",)))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://a") as c:
        ok = await c.options(URL, headers={**preflight, "Origin": "https://ops.example"})
        assert ok.headers["access-control-allow-origin"] == "https://ops.example"
        bad = await c.options(URL, headers=preflight)
        assert "access-control-allow-origin" not in bad.headers


async def test_decision_history_is_newest_first_and_bounded_by_limit(
    client: httpx.AsyncClient, state: ControllerState
) -> None:
    ref = TargetRef("llm", "chat")
    register(state, spec())
    assert (await client.get(f"{URL}/decision")).status_code == 404
    for i in range(6):
        await publish(state, ref, t=float(i), current=1 + i, desired=2 + i)
    latest = (await client.get(f"{URL}/decision")).json()
    assert latest["t"] == 5.0
    assert latest["desired_replicas"] == 7
    items = (await client.get(f"{URL}/decisions", params={"limit": 3})).json()["items"]
    assert [d["t"] for d in items] == [5.0, 4.0, 3.0]
    assert items[0]["reason"] == "steady"
    assert items[0]["numbers"]["waiting"] == 28.0
    assert (await client.get(f"{URL}/decisions", params={"limit": 0})).status_code == 422
    assert (await client.get("/v1/targets/llm/other/decisions")).status_code == 404


async def test_dry_run_replays_candidate_without_applying_it(
    client: httpx.AsyncClient, state: ControllerState
) -> None:
    etag = (await _create(client)).headers["etag"]
    ref = TargetRef("llm", "chat")
    register(state, spec())
    for i in range(10):
        obs = observation(float(i), current=2, waiting=40.0)
        await state.publish(ref, obs, _live(i))
    before = state.targets[ref].last_decision
    # waiting=40 with target 4 per replica asks for 10; the candidate caps at 5.
    candidate = {"policy": {"maxReplicaCount": 5, "metrics": [{"signal": "waiting", "target": 4}]}}
    r = await client.post(f"{URL}/dry-run", json=candidate)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["observations"] == 10
    assert [d["t"] for d in body["decisions"]] == [float(i) for i in range(10)]
    assert body["summary"]["max_desired_replicas"] == 5
    assert all(d["live_desired_replicas"] == 2 for d in body["decisions"])
    assert state.targets[ref].last_decision is before
    assert (await client.get(URL)).headers["etag"] == etag
    limited = (await client.post(f"{URL}/dry-run", params={"limit": 3}, json=candidate)).json()
    assert limited["observations"] == 3


async def test_dry_run_rejects_invalid_candidate_and_target_without_observations(
    client: httpx.AsyncClient, state: ControllerState
) -> None:
    register(state, spec())
    r = await client.post(f"{URL}/dry-run", json={"policy": {"maxReplicaCount": -1}})
    assert r.status_code == 422
    assert any(p.startswith("policy.maxReplicaCount") for p in r.json()["problems"])
    r = await client.post(f"{URL}/dry-run", json={"policy": {}})
    assert r.status_code == 409


async def test_readyz_follows_the_loop(client: httpx.AsyncClient, state: ControllerState) -> None:
    r = await client.get("/readyz")
    assert r.status_code == 503
    assert "first tick" in r.json()["problems"][0]
    state.ready = True
    assert (await client.get("/readyz")).status_code == 200


async def test_metrics_expose_decisions_and_api_latency_by_route_template(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    ref = TargetRef("llm", "chat")
    metrics = app.state.metrics
    metrics.observe_decision(ref, _live(0))
    metrics.observe_tick(0.004)
    metrics.observe_scrape_error(ref)
    await client.get(URL)
    text = (await client.get("/metrics")).text
    assert 'llm_autoscaler_decisions_total{name="chat",namespace="llm",reason="steady"} 1.0' in text
    assert 'llm_autoscaler_desired_replicas{name="chat",namespace="llm"} 2.0' in text
    assert 'llm_autoscaler_scrape_errors_total{name="chat",namespace="llm"} 1.0' in text
    assert "llm_autoscaler_tick_duration_seconds_count 1.0" in text
    assert 'route="/v1/targets/{namespace}/{name}",status="404"' in text
    assert "/v1/targets/llm/chat" not in text  # raw paths would explode cardinality


async def test_metrics_expose_every_forecast_and_learned_capacity(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    ref = TargetRef("llm", "chat")
    metrics = app.state.metrics
    numbers = {
        "forecast_horizon_s": 113.5,
        "forecast.arrival_rate_per_s.predicted": 12.5,
        "forecast.prompt_tokens_per_s.predicted": 30_000.0,
        "capacity.prompt_tokens_per_s.per_replica": 9_500.0,
        "forecast.arrival_rate_per_s.wape.ewma": 0.1,  # model errors: not a forecast
    }
    metrics.observe_decision(ref, replace(_live(0), numbers=numbers))
    text = (await client.get("/metrics")).text
    labels = 'name="chat",namespace="llm"'
    assert f"llm_autoscaler_forecast_horizon_seconds{{{labels}}} 113.5" in text
    assert f'llm_autoscaler_forecast{{{labels},signal="arrival_rate_per_s"}} 12.5' in text
    assert f'llm_autoscaler_forecast{{{labels},signal="prompt_tokens_per_s"}} 30000.0' in text
    assert (
        f'llm_autoscaler_capacity_per_replica{{{labels},signal="prompt_tokens_per_s"}} 9500.0'
        in text
    )
    assert "wape" not in text
    # a forecast missing on the next tick drops its series instead of keeping a stale value
    metrics.observe_decision(ref, replace(_live(0), numbers={"forecast_horizon_s": 90.0}))
    text = (await client.get("/metrics")).text
    assert "llm_autoscaler_forecast{" not in text
    assert "llm_autoscaler_capacity_per_replica{" not in text
    metrics.forget(ref)
    assert "llm_autoscaler_forecast_horizon_seconds{" not in (await client.get("/metrics")).text


async def test_openapi_documents_bodies_and_if_match(client: httpx.AsyncClient) -> None:
    spec_doc = (await client.get("/openapi.json")).json()
    put = spec_doc["paths"]["/v1/targets/{namespace}/{name}"]["put"]
    assert put["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "/TargetDocument"
    )
    assert any(p["name"] == "If-Match" for p in put["parameters"])
    assert "maxReplicaCount" in spec_doc["components"]["schemas"]["Policy"]["properties"]


def _live(i: int):  # type: ignore[no-untyped-def]
    from tests.api.support import decision

    return decision(float(i), current=2, desired=2)
