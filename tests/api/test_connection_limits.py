"""The HTTP listener's bounds over real sockets: half-open connections are closed after
the header deadline, a full listener makes room for a client that completes its request
(a probe) and refuses at once only when every slot serves a request, and the open-file
limit leaves descriptors to the controller's own clients."""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections.abc import AsyncIterator

import httpx
import pytest
from fastapi import FastAPI

from autoscaler.api.app import create_app
from autoscaler.api.connections import (
    FD_RESERVE,
    MIN_CONNECTIONS,
    ConnectionLimits,
    connection_cap,
    raise_fd_limit,
)
from autoscaler.api.server import HttpServerHandle, serve_http
from autoscaler.control.state import ControllerState
from autoscaler.store.file import FilePolicyStore

PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: "

Conn = tuple[asyncio.StreamReader, asyncio.StreamWriter]


@contextlib.asynccontextmanager
async def serving(app: FastAPI, limits: ConnectionLimits) -> AsyncIterator[HttpServerHandle]:
    closed: list[str] = []
    handle = await serve_http(app, limits=limits, on_close=closed.append)
    try:
        yield handle
    finally:
        await handle.stop(timeout_s=1.0)
    assert handle.gate is not None
    assert sorted(closed) == sorted(r for r, n in handle.gate.closed.items() for _ in range(n))


async def half_open(port: int, n: int) -> list[Conn]:
    conns = []
    for _ in range(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(PARTIAL)
        conns.append((reader, writer))
    for _, writer in conns:
        with contextlib.suppress(ConnectionError):  # already closed by the server
            await writer.drain()
    return conns


async def closed_by_server(conn: Conn, within_s: float) -> bytes | None:
    """What the server sent before closing (None: still open after ``within_s``)."""
    reader, _ = conn
    try:
        return await asyncio.wait_for(reader.read(), within_s)
    except TimeoutError:
        return None
    except ConnectionResetError:
        return b""


def close_all(conns: list[Conn]) -> None:
    for _, writer in conns:
        writer.close()


async def healthz(url: str) -> int:
    async with httpx.AsyncClient(base_url=url, timeout=2.0) as c:
        return (await c.get("/healthz")).status_code


def controller_app(tmp_path: object) -> FastAPI:
    return create_app(ControllerState(), FilePolicyStore(f"{tmp_path}/p.yaml"))


async def test_half_open_connections_close_after_the_header_timeout_while_healthz_answers(
    tmp_path: object,
) -> None:
    limits = ConnectionLimits(header_timeout_s=2.0, max_connections=1000)
    async with serving(controller_app(tmp_path), limits) as handle:
        conns = await half_open(handle.port, 300)
        try:
            assert await healthz(handle.url) == 200  # answered while all 300 are held
            still_open = [await closed_by_server(c, 0.0) for c in conns[:5]]
            assert still_open == [None] * 5
            answers = await asyncio.gather(*(closed_by_server(c, 5.0) for c in conns))
        finally:
            close_all(conns)
        assert all(a is not None for a in answers), "a half-open connection stayed open"
        assert all(a.startswith(b"HTTP/1.1 408 ") for a in answers if a)
        assert handle.gate is not None
        assert handle.gate.closed == {"header_timeout": 300}
        assert not handle.gate.waiting
        assert await healthz(handle.url) == 200


async def test_a_connection_that_sends_nothing_is_closed_too(tmp_path: object) -> None:
    limits = ConnectionLimits(header_timeout_s=0.3, max_connections=1000)
    async with serving(controller_app(tmp_path), limits) as handle:
        reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
        try:
            assert await closed_by_server((reader, writer), 5.0) == b""  # no 408: no request
        finally:
            writer.close()
        assert handle.gate is not None and handle.gate.closed == {"header_timeout": 1}


async def test_a_full_listener_closes_the_oldest_half_open_connection_so_a_probe_gets_in(
    tmp_path: object,
) -> None:
    limits = ConnectionLimits(header_timeout_s=60.0, max_connections=50)
    async with serving(controller_app(tmp_path), limits) as handle:
        conns = await half_open(handle.port, 200)
        try:
            for _ in range(5):
                assert await healthz(handle.url) == 200
            oldest = await asyncio.gather(*(closed_by_server(c, 5.0) for c in conns[:150]))
            newest = await asyncio.gather(*(closed_by_server(c, 0.2) for c in conns[-40:]))
        finally:
            close_all(conns)
        assert all(a is not None for a in oldest)
        assert newest == [None] * 40  # the 40 youngest still wait (one slot per probe)
        assert handle.gate is not None
        assert handle.gate.closed.get("evicted", 0) >= 150
        assert "refused" not in handle.gate.closed


async def test_excess_connections_are_refused_at_once_when_every_slot_serves_a_request() -> None:
    cap = MIN_CONNECTIONS
    release, all_busy = asyncio.Event(), asyncio.Event()
    started: list[int] = []
    app = FastAPI()

    @app.get("/slow")
    async def slow() -> dict[str, bool]:
        started.append(1)
        if len(started) == cap:
            all_busy.set()
        await release.wait()
        return {"ok": True}

    async with serving(app, ConnectionLimits(header_timeout_s=60.0, max_connections=cap)) as h:
        async with httpx.AsyncClient(
            base_url=h.url, timeout=10.0, limits=httpx.Limits(max_connections=cap)
        ) as c:
            busy = [asyncio.create_task(c.get("/slow")) for _ in range(cap)]
            await asyncio.wait_for(all_busy.wait(), 10.0)
            reader, writer = await asyncio.open_connection("127.0.0.1", h.port)
            try:
                refused = await closed_by_server((reader, writer), 2.0)
            finally:
                writer.close()
            release.set()
            done = await asyncio.gather(*busy)
        assert refused is not None and refused.startswith(b"HTTP/1.1 503 ")
        assert b"retry-after: 1" in refused
        assert [r.status_code for r in done] == [200] * cap
        assert h.gate is not None and h.gate.closed == {"refused": 1}


async def test_a_keep_alive_connection_gets_a_new_header_deadline_after_each_response(
    tmp_path: object,
) -> None:
    limits = ConnectionLimits(header_timeout_s=0.5, max_connections=1000)
    async with serving(controller_app(tmp_path), limits) as handle:
        reader, writer = await asyncio.open_connection("127.0.0.1", handle.port)
        try:
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 2.0)
            assert head.startswith(b"HTTP/1.1 200 ")
            writer.write(PARTIAL)  # the second request never completes
            rest = await closed_by_server((reader, writer), 5.0)
        finally:
            writer.close()
        assert rest is not None and b"HTTP/1.1 408 " in rest
        assert handle.gate is not None and handle.gate.closed == {"header_timeout": 1}


def test_the_soft_open_file_limit_is_raised_to_the_hard_limit() -> None:
    before = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        hard = before[1]
        lowered = min(before[0], 256) if hard == resource.RLIM_INFINITY else min(hard, 256)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
        soft, got_hard = raise_fd_limit()
        assert got_hard == hard
        assert soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if hard != resource.RLIM_INFINITY:
            assert soft == hard
        else:
            assert soft > lowered
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, before)


@pytest.mark.parametrize(
    ("wanted", "fd_limit", "cap"),
    [
        (1000, 20_000, 1000),  # room to spare: as configured
        (1000, 1024 + 500, 500),  # the reserve comes first
        (1000, 1024, MIN_CONNECTIONS),  # never below the floor
    ],
)
def test_the_connection_cap_leaves_the_reserve_free(wanted: int, fd_limit: int, cap: int) -> None:
    assert FD_RESERVE == 1024
    assert connection_cap(wanted, fd_limit) == cap
