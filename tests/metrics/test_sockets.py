"""`sockets.Poller`: plain-TCP connections on one epoll, against real sockets on loopback.

What `PageClient` relies on: a protocol driven as the event loop's transports drive it
(connect, reads, the pod's end of stream, abort), one event-loop reader for any number of
connections, no descriptor left behind, errors raised as the loop raises them.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator

import pytest

from autoscaler.metrics.page_client import PageClient, _target
from autoscaler.metrics.sockets import HAS_EPOLL, Poller, SocketTransport

pytestmark = pytest.mark.skipif(not HAS_EPOLL, reason="epoll is Linux's")


class Recorder(asyncio.BufferedProtocol):
    """Records what a transport calls, in order."""

    def __init__(self, fail_on: bytes | None = None) -> None:
        self.calls: list[str] = []
        self.data = bytearray()
        self.buf = bytearray(7)  # small: a read takes several rounds
        self.lost: asyncio.Future[Exception | None] = asyncio.get_running_loop().create_future()
        self.fail_on = fail_on

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.calls.append("made")

    def get_buffer(self, sizehint: int) -> memoryview:
        return memoryview(self.buf)

    def buffer_updated(self, nbytes: int) -> None:
        self.calls.append("data")
        self.data += self.buf[:nbytes]
        if self.fail_on is not None and self.fail_on in self.data:
            raise RuntimeError("a protocol bug")

    def eof_received(self) -> bool:
        self.calls.append("eof")
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.calls.append("lost")
        self.lost.set_result(exc)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


async def until(condition, limit_s: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    """Run the loop until ``condition()`` (socket events, not time, make it true)."""
    async with asyncio.timeout(limit_s):
        while not condition():  # noqa: ASYNC110 - kernel events, no asyncio.Event to wait on
            await asyncio.sleep(0)


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, int, list[asyncio.StreamWriter]]]:
    """An echo server on loopback; the test may close its side of each connection."""
    writers: list[asyncio.StreamWriter] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    yield "127.0.0.1", server.sockets[0].getsockname()[1], writers
    server.close()
    await server.wait_closed()


async def test_a_protocol_is_driven_as_the_loop_drives_it(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, writers = echo
    poller = Poller(asyncio.get_running_loop())
    try:
        transport, protocol = await poller.open(Recorder, host, port)
        assert isinstance(protocol, Recorder) and protocol.calls == ["made"]
        transport.write(b"0123456789abcdefghij")  # 20 bytes into a 7-byte buffer
        await until(lambda: len(protocol.data) == 20)
        assert protocol.data == b"0123456789abcdefghij"
        await until(lambda: bool(writers))
        writers[0].close()  # the pod closes its end
        assert await protocol.lost is None
        assert protocol.calls[0] == "made" and protocol.calls[-2:] == ["eof", "lost"]
        assert set(protocol.calls[1:-2]) == {"data"} and len(poller) == 0
    finally:
        poller.close()


async def test_many_connections_are_one_reader_of_the_event_loop(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, _ = echo
    loop = asyncio.get_running_loop()
    selector = loop._selector  # type: ignore[attr-defined]
    before = len(selector.get_map())
    poller = Poller(loop)
    try:
        opened = [await poller.open(Recorder, host, port) for _ in range(50)]
        for i, (transport, _) in enumerate(opened):
            transport.write(b"ping %d;" % i)
        await until(lambda: all(len(p.data) >= 6 for _, p in opened))  # type: ignore[attr-defined]
        assert [bytes(p.data) for _, p in opened] == [b"ping %d;" % i for i in range(50)]  # type: ignore[attr-defined]
        # the server's 50 accepted sockets are the loop's readers; ours are not
        assert len(selector.get_map()) - before == 1 + 50 and len(poller) == 50
    finally:
        poller.close()


async def test_a_write_the_socket_does_not_take_at_once_is_sent_whole_in_order(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, _ = echo
    poller = Poller(asyncio.get_running_loop())
    try:
        transport, protocol = await poller.open(Recorder, host, port)
        assert isinstance(protocol, Recorder)
        protocol.buf = bytearray(1 << 16)
        payload = bytes(range(256)) * 16384  # 4 MiB: more than the socket buffers hold
        transport.write(payload[:1000])
        transport.write(payload[1000:])
        assert transport._pending  # queued behind the full socket
        await until(lambda: len(protocol.data) == len(payload), limit_s=30)
        assert protocol.data == payload and not transport._pending
    finally:
        poller.close()


async def test_abort_closes_now_and_reports_lost_soon_after(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, _ = echo
    poller = Poller(asyncio.get_running_loop())
    fds = open_fds()
    try:
        transport, protocol = await poller.open(Recorder, host, port)
        assert isinstance(protocol, Recorder)
        transport.abort()
        assert transport.is_closing() and len(poller) == 0
        assert protocol.calls == ["made"]  # not from inside abort
        assert await protocol.lost is None
        transport.write(b"after")  # dropped, as the loop's transports drop it
        transport.abort()
        assert protocol.calls == ["made", "lost"] and transport._sock.fileno() == -1
        await until(lambda: open_fds() == fds)  # the server saw our close: nothing leaked
    finally:
        poller.close()


async def test_a_refused_connect_raises_and_leaves_no_socket() -> None:
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]  # bound, never listening: refused
        poller = Poller(asyncio.get_running_loop())
        fds = open_fds()
        try:
            with pytest.raises(ConnectionRefusedError, match="Connect call failed"):
                await poller.open(Recorder, "127.0.0.1", port)
            assert len(poller) == 0 and open_fds() == fds
        finally:
            poller.close()


async def test_a_cancelled_connect_leaves_no_socket(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, _ = echo
    poller = Poller(asyncio.get_running_loop())
    fds = open_fds()
    try:
        task = asyncio.ensure_future(poller.open(Recorder, host, port))
        await asyncio.sleep(0)  # connecting
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(poller) == 0
        await until(lambda: open_fds() == fds)  # the server saw our close: nothing leaked
    finally:
        poller.close()


async def test_a_name_is_resolved_and_every_address_tried(echo) -> None:  # type: ignore[no-untyped-def]
    _, port, _ = echo
    poller = Poller(asyncio.get_running_loop())
    try:  # "localhost" may resolve to ::1 first, where nothing listens: then 127.0.0.1
        transport, protocol = await poller.open(Recorder, "localhost", port)
        assert isinstance(transport, SocketTransport) and protocol.calls == ["made"]  # type: ignore[attr-defined]
        assert transport.get_extra_info("peername")[1] == port
    finally:
        poller.close()


async def test_a_protocol_that_raises_loses_its_connection_only(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, _ = echo
    poller = Poller(asyncio.get_running_loop())
    try:
        bad_t, bad = await poller.open(lambda: Recorder(fail_on=b"!"), host, port)
        good_t, good = await poller.open(Recorder, host, port)
        assert isinstance(bad, Recorder) and isinstance(good, Recorder)
        bad_t.write(b"boom!")
        good_t.write(b"fine")
        error = await bad.lost
        assert isinstance(error, RuntimeError) and "a protocol bug" in str(error)
        await until(lambda: good.data == b"fine")
        assert not good_t.is_closing() and len(poller) == 1
    finally:
        poller.close()


async def test_closing_the_poller_aborts_its_connections(echo) -> None:  # type: ignore[no-untyped-def]
    host, port, _ = echo
    poller = Poller(asyncio.get_running_loop())
    fds = open_fds()
    _, protocol = await poller.open(Recorder, host, port)
    assert isinstance(protocol, Recorder)
    poller.close()
    assert await protocol.lost is None
    await until(lambda: open_fds() == fds - 1)  # the epoll's own descriptor went too
    poller.close()  # twice is harmless


async def test_a_client_notices_a_pod_closing_an_idle_connection(echo) -> None:  # type: ignore[no-untyped-def]
    """Kept-alive connections stay watched between ticks: a pod's close is seen at once
    and its descriptor freed, not found at the next tick."""
    host, port, writers = echo
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        target = _target(f"http://{host}:{port}/metrics")
        conn = await client._connect(target, asyncio.get_running_loop().time() + 5)
        assert client._poller is not None and len(client._poller) == 1
        await until(lambda: bool(writers))
        writers[0].close()
        await until(lambda: conn.closed)
        assert len(client._poller) == 0
    finally:
        await client.close()
    assert client._poller is None


def test_a_client_used_from_another_loop_closes_the_first_loops_epoll() -> None:
    """A `PageClient` reused from a new event loop (a test, a restarted loop) opens a
    poller on that loop and closes the old one: its epoll and sockets, not left open."""
    listener = socket.create_server(("127.0.0.1", 0))  # the kernel completes connects
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    target = _target(f"http://127.0.0.1:{listener.getsockname()[1]}/metrics")

    async def connect() -> None:
        await client._connect(target, asyncio.get_running_loop().time() + 5)

    first_loop, second_loop = asyncio.new_event_loop(), asyncio.new_event_loop()
    try:
        first_loop.run_until_complete(connect())
        first = client._poller
        assert first is not None and len(first) == 1
        first_loop.close()
        second_loop.run_until_complete(connect())
        assert client._poller is not first and client._poller is not None
        assert first._epoll.closed and len(first) == 0  # its connection's socket closed too
        assert len(client._poller) == 1
        second_loop.run_until_complete(client.close())
    finally:
        first_loop.close()
        second_loop.close()
        listener.close()
