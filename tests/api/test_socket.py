"""The API over real sockets (uvicorn on 127.0.0.1, port 0): restart and concurrent writers."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import serve_http
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import WRITE
from tests.api.support import WRITE_TOKEN, publish, register, spec

URL = "/v1/targets/llm/chat"


async def test_restart_over_the_same_file_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "policies.json"
    settings = ApiSettings(write_token=WRITE_TOKEN)
    first = await serve_http(create_app(ControllerState(), FilePolicyStore(path), settings))
    try:
        async with httpx.AsyncClient(base_url=first.url) as c:
            r = await c.put(URL, json={"policy": {"maxReplicaCount": 11}}, headers=WRITE)
            assert r.status_code == 201
            etag = r.headers["etag"]
    finally:
        await first.stop()
    second = await serve_http(create_app(ControllerState(), FilePolicyStore(path), settings))
    try:
        assert second.port != 0
        async with httpx.AsyncClient(base_url=second.url) as c:
            got = await c.get(URL)
            assert got.status_code == 200
            assert got.headers["etag"] == etag
            assert got.json()["policy"]["maxReplicaCount"] == 11
    finally:
        await second.stop()


async def test_concurrent_writers_with_the_same_etag_exactly_one_wins(tmp_path: Path) -> None:
    store = FilePolicyStore(tmp_path / "policies.yaml")
    handle = await serve_http(
        create_app(ControllerState(), store, ApiSettings(write_token=WRITE_TOKEN))
    )
    try:
        async with httpx.AsyncClient(base_url=handle.url) as c:
            etag = (await c.put(URL, json={}, headers=WRITE)).headers["etag"]
            results = await asyncio.gather(
                *(
                    c.patch(
                        URL,
                        json={"policy": {"maxReplicaCount": 2 + i}},
                        headers={**WRITE, "If-Match": etag},
                    )
                    for i in range(8)
                )
            )
            codes = sorted(r.status_code for r in results)
            assert codes == [200] + [412] * 7
            winner = next(r for r in results if r.status_code == 200).json()
            stored = (await c.get(URL)).json()
            assert stored["policy"]["maxReplicaCount"] == winner["policy"]["maxReplicaCount"]
    finally:
        await handle.stop()


async def test_keda_metrics_api_over_a_socket(tmp_path: Path) -> None:
    state = ControllerState()
    register(state, spec())
    ref = TargetRef("llm", "chat")
    handle = await serve_http(create_app(state, FilePolicyStore(tmp_path / "p.yaml")))
    try:
        async with httpx.AsyncClient(base_url=handle.url) as c:
            await publish(state, ref, t=1.0, current=2, desired=5)
            r = await c.get("/v1/keda/llm/chat", params={"targetSize": 10})
            assert r.status_code == 200
            body = r.json()
            assert body["value"] == 50.0
            assert body["desiredReplicas"] == 5
            assert body["active"] is True
    finally:
        await handle.stop()
    assert handle._task.done()
