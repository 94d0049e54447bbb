"""Hostile requests over a real socket (uvicorn on 127.0.0.1, port 0): issue 13 items 6-9.

Each test replays a finding: bodies beyond the limit, values echoed whole in 422s,
non-finite numbers stored and then failing every read, made-up HTTP methods exploding
/metrics, and nesting deep enough to overflow the parser's recursion.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import socket
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import HttpServerHandle, serve_http
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import WRITE
from tests.api.support import WRITE_TOKEN, decision, observation, register, spec

URL = "/v1/targets/llm/chat"
REF = TargetRef("llm", "chat")
MiB = 1_048_576


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path, state: ControllerState | None = None, **settings: object
) -> AsyncIterator[tuple[HttpServerHandle, FilePolicyStore]]:
    store = FilePolicyStore(tmp_path / "policies.yaml")
    api = ApiSettings(write_token=WRITE_TOKEN, **settings)  # type: ignore[arg-type]
    handle = await serve_http(create_app(state or ControllerState(), store, api))
    try:
        yield handle, store
    finally:
        await handle.stop()


async def _raw_exchange(handle: HttpServerHandle, head: bytes, body_chunks: int) -> bytes:
    """Send ``head`` then up to ``body_chunks`` chunks of 64 KiB while reading the answer;
    returns the status line. Plain socket calls, not streams: a reset met while writing
    (the server closes once it has answered) must not discard the answer already read."""
    loop = asyncio.get_running_loop()
    sock = socket.create_connection((handle.host, handle.port))
    sock.setblocking(False)
    chunk = b"x" * 65_536
    chunked = b"transfer-encoding: chunked" in head.lower()

    async def write_body() -> None:
        with contextlib.suppress(OSError):
            await loop.sock_sendall(sock, head)
            for _ in range(body_chunks):
                await loop.sock_sendall(
                    sock, b"%x\r\n%s\r\n" % (len(chunk), chunk) if chunked else chunk
                )
            if chunked:
                await loop.sock_sendall(sock, b"0\r\n\r\n")

    sender = asyncio.create_task(write_body())
    answer = b""
    try:
        while b"\r\n" not in answer:
            got = await asyncio.wait_for(loop.sock_recv(sock, 4096), timeout=30)
            if not got:
                break
            answer += got
    finally:
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await sender
        sock.close()
    return answer.split(b"\r\n", 1)[0]


def _put_head(length: int | None) -> bytes:
    framing = f"content-length: {length}" if length is not None else "transfer-encoding: chunked"
    return (
        f"PUT {URL} HTTP/1.1\r\nhost: api\r\nauthorization: Bearer {WRITE_TOKEN}\r\n"
        f"content-type: application/json\r\n{framing}\r\n\r\n"
    ).encode()


async def test_declared_100_mb_body_is_413_before_the_body_is_read(tmp_path: Path) -> None:
    async with serving(tmp_path) as (handle, _):
        # Only 64 KiB of the announced 100 MB is ever sent: the answer cannot wait for it.
        status = await _raw_exchange(handle, _put_head(100 * MiB), body_chunks=1)
        assert status.startswith(b"HTTP/1.1 413"), status
        async with httpx.AsyncClient(base_url=handle.url) as c:
            assert (await c.get(URL)).status_code == 404  # nothing stored


async def test_chunked_body_is_counted_while_streaming_and_stopped_at_the_limit(
    tmp_path: Path,
) -> None:
    async with serving(tmp_path) as (handle, _):
        # 64 chunks of 64 KiB = 4 MiB offered without a Content-Length.
        status = await _raw_exchange(handle, _put_head(None), body_chunks=64)
        assert status.startswith(b"HTTP/1.1 413"), status
        async with httpx.AsyncClient(base_url=handle.url) as c:
            assert (await c.get(URL)).status_code == 404


async def test_a_client_still_uploading_a_body_over_the_limit_reads_the_413(
    tmp_path: Path,
) -> None:
    # httpx reads the answer only once its upload ends: without draining the rest of the
    # body, the server's close turned into a reset and httpx saw ReadError, not the 413.
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(48):
            yield b"x" * 65_536

    async with (
        serving(tmp_path) as (handle, _),
        httpx.AsyncClient(base_url=handle.url) as c,
    ):
        declared = await c.put(URL, content=b"x" * (3 * MiB), headers=WRITE)
        assert declared.status_code == 413
        assert "3145728 bytes (Content-Length)" in declared.json()["detail"]
        streamed = await c.put(URL, content=chunks(), headers=WRITE)
        assert streamed.status_code == 413
        assert "streamed" in streamed.json()["detail"]
        assert (await c.get(URL)).status_code == 404


async def test_body_limit_is_configurable_and_bodies_under_it_pass(tmp_path: Path) -> None:
    async with (
        serving(tmp_path, max_body_bytes=4096) as (handle, _),
        httpx.AsyncClient(base_url=handle.url) as c,
    ):
        small = {"policy": {"maxReplicaCount": 5}}
        assert (await c.put(URL, json=small, headers=WRITE)).status_code == 201
        big = {"engine": "vllm" + "x" * 5000}
        r = await c.put(URL, json=big, headers=WRITE)
        assert r.status_code == 413
        assert "4096 bytes" in r.json()["detail"]
        assert (await c.get(URL)).json()["engine"] == "auto"


async def test_422_clips_a_long_value_but_names_field_value_and_rule(tmp_path: Path) -> None:
    async with serving(tmp_path) as (handle, _), httpx.AsyncClient(base_url=handle.url) as c:
        long_name = "z" * 900_000
        body = {"name": long_name, "policy": {"maxReplicaCount": 0}}
        r = await c.put(URL, json=body, headers=WRITE)
        assert r.status_code == 422
        assert len(r.content) < 2_000  # was the whole 900 KB value echoed back
        problems = r.json()["problems"]
        name_problem = next(p for p in problems if p.startswith("name:"))
        assert "zzzz" in name_problem  # the value, clipped
        assert "characters elided" in name_problem
        assert name_problem.endswith("does not match the URL ('chat')")  # the rule
        assert any(p.startswith("policy.maxReplicaCount") for p in problems)
        assert (await c.get(URL)).status_code == 404  # rejected whole


@pytest.mark.parametrize(
    ("raw_value", "shown"), [("Infinity", "Infinity"), ("NaN", "NaN"), ("1e400", "1e400")]
)
async def test_non_finite_number_is_422_naming_the_field_and_reads_keep_working(
    tmp_path: Path, raw_value: str, shown: str
) -> None:
    async with serving(tmp_path) as (handle, _), httpx.AsyncClient(base_url=handle.url) as c:
        body = f'{{"policy": {{"metrics": [{{"signal": "waiting", "target": {raw_value}}}]}}}}'
        body_bytes = body.encode()
        headers = {**WRITE, "content-type": "application/json"}
        r = await c.put(URL, content=body_bytes, headers=headers)
        assert r.status_code == 422, r.text
        assert r.json()["problems"] == [
            f"policy.metrics[0].target: value {shown} must be a finite number "
            "(JSON has no Infinity or NaN, and a double ends near 1.8e308)"
        ]
        # the reproduced sequence: the target read and the list used to answer 500
        assert (await c.get(URL)).status_code == 404
        listed = await c.get("/v1/targets")
        assert listed.status_code == 200
        assert listed.json()["items"] == []
        policy_body = b'{"maxReplicaCount": 4, "pollingInterval": -Infinity}'
        assert (await c.put(URL, json={}, headers=WRITE)).status_code == 201
        r = await c.put(f"{URL}/policy", content=policy_body, headers=headers)
        assert r.status_code == 422
        assert r.json()["problems"][0].startswith("policy.pollingInterval: value -Infinity")
        assert (await c.get(URL)).status_code == 200


async def test_a_non_finite_number_already_in_state_is_rendered_not_a_500(
    tmp_path: Path,
) -> None:
    state = ControllerState()
    register(state, spec())
    bad = replace(decision(1.0, 2, 3), numbers={"forecast_horizon_s": math.inf})
    await state.publish(REF, observation(1.0, 2, waiting=8.0), bad)
    async with (
        serving(tmp_path, state) as (handle, _),
        httpx.AsyncClient(base_url=handle.url) as c,
    ):
        assert (await c.put(URL, json={}, headers=WRITE)).status_code == 201
        r = await c.get(f"{URL}/decisions")
        assert r.status_code == 200
        assert r.json()["items"][0]["numbers"]["forecast_horizon_s"] is None
        for path in (URL, "/v1/targets", f"{URL}/decision"):
            r = await c.get(path)
            assert r.status_code == 200, path
            json.loads(r.content, parse_constant=_refuse)  # strict JSON
        doc = (await c.get(URL)).json()
        assert doc["status"]["lastDecision"]["numbers"]["forecast_horizon_s"] is None


def _refuse(text: str) -> None:
    raise AssertionError(f"non-JSON constant {text} in a response")


async def test_made_up_http_methods_do_not_create_metric_series(tmp_path: Path) -> None:
    async with serving(tmp_path) as (handle, _), httpx.AsyncClient(base_url=handle.url) as c:
        for i in range(40):
            await c.request(f"X{i}METHOD", f"/v1/targets/ns{i}/t{i}")
            await c.get(f"/no/such/path/{i}")
        text = (await c.get("/metrics")).text
    series = [
        line
        for line in text.splitlines()
        if line.startswith("llm_autoscaler_api_request_duration_seconds_count")
    ]
    assert 'method="other",route="/v1/targets/{namespace}/{name}",status="405"' in text
    assert 'method="GET",route="unmatched",status="404"' in text
    assert "METHOD" not in text
    assert "/no/such/path" not in text and "ns1" not in text
    assert len(series) <= 3, series  # 80 odd requests, a handful of series


@pytest.mark.parametrize("read_token", [None, "read-secret"])
async def test_deeply_nested_json_is_400_also_anonymously_through_dry_run(
    tmp_path: Path, read_token: str | None
) -> None:
    state = ControllerState()
    register(state, spec())
    await state.publish(REF, observation(1.0, 2, waiting=8.0), decision(1.0, 2, 2))
    deep_list = b"[" * 200_000 + b"]" * 200_000  # 400 KB, under the body limit
    deep_object = (b'{"policy": ' * 40) + b"{}" + b"}" * 40
    auth = {"Authorization": f"Bearer {read_token}"} if read_token else {}
    async with (
        serving(tmp_path, state, read_token=read_token) as (handle, _),
        httpx.AsyncClient(base_url=handle.url) as c,
    ):
        for body in (deep_list, deep_object):
            r = await c.post(f"{URL}/dry-run", content=body, headers=auth)
            assert r.status_code == 400, r.text
            assert "nested deeper than 32 levels" in r.json()["detail"]
            r = await c.put(URL, content=body, headers=WRITE)
            assert r.status_code == 400
        assert (await c.get("/healthz")).status_code == 200


async def test_healthy_requests_still_pass_every_check(tmp_path: Path) -> None:
    async with serving(tmp_path) as (handle, _), httpx.AsyncClient(base_url=handle.url) as c:
        doc = {"mode": "keda", "policy": {"metrics": [{"signal": "waiting", "target": 2.5}]}}
        r = await c.put(URL, json=doc, headers=WRITE)
        assert r.status_code == 201, r.text
        assert json.loads(r.content)["policy"]["metrics"][0]["target"] == 2.5
