"""`PageClient`: the pod scrape's HTTP/1.1 client.

Framing is tested on the protocol itself with responses cut at arbitrary points
(hypothesis); connections (reuse, reconnect, timeouts) against raw asyncio servers on
loopback, with the event loop's clock faked where time must pass.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.metrics.page_client import (
    PageClient,
    PageFetchError,
    _Buffers,
    _Connection,
)
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint

PAGE = (Path(__file__).parents[1] / "fixtures" / "metrics" / "vllm_v1_0.10.txt").read_bytes()


def ok(body: bytes, *headers: str) -> bytes:
    head = "".join(h + "\r\n" for h in headers)
    return f"HTTP/1.1 200 OK\r\nContent-Length: {len(body)}\r\n{head}\r\n".encode() + body


def chunked(body: bytes, size: int, trailer: bytes = b"") -> bytes:
    parts = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"]
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        parts.append(f"{len(piece):x};ext=1\r\n".encode() + piece + b"\r\n")
    parts.append(b"0\r\n" + trailer + b"\r\n")
    return b"".join(parts)


# --- framing, on the protocol: any cut of the response reads the same -------------------


class _Transport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False
        self.written: list[bytes] = []

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def abort(self) -> None:
        self.aborted = True


def _feed(conn: _Connection, data: bytes, cuts: list[int]) -> None:
    """Deliver ``data`` through get_buffer/buffer_updated, split at ``cuts`` and
    wherever the buffer handed out is smaller than the piece."""
    bounds = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    for start, end in itertools.pairwise(bounds):
        while start < end:
            view = conn.get_buffer(-1)
            n = min(len(view), end - start)
            view[:n] = data[start : start + n]
            del view
            conn.buffer_updated(n)
            start += n


def _read(response: bytes, cuts: list[int], limit: int = 1 << 20) -> tuple[bytes, bool]:
    """(body, reusable) of ``response`` fed in pieces, or raises what the client raises."""
    loop = asyncio.new_event_loop()
    try:
        conn = _Connection(loop, limit, _Buffers())
        transport = _Transport()
        conn.connection_made(transport)
        task = loop.create_task(conn.request(b"GET / HTTP/1.1\r\n\r\n", loop.time() + 60))
        loop.call_soon(_feed, conn, response, cuts)
        if b"Content-Length" not in response and b"chunked" not in response:
            loop.call_soon(conn.eof_received)
        body = loop.run_until_complete(task)
        return body, conn.reusable()
    finally:
        loop.close()


RESPONSES: dict[str, tuple[bytes, bytes, bool]] = {  # name: (response, body, reusable)
    "content-length": (ok(PAGE), PAGE, True),
    "chunked": (chunked(PAGE, 1000), PAGE, True),
    "chunked, trailers": (chunked(PAGE, 4096, b"X-Trailer: 1\r\n"), PAGE, True),
    "one big chunk": (chunked(PAGE, len(PAGE)), PAGE, True),
    "until close": (b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + PAGE, PAGE, False),
    "gzip": (ok(gzip.compress(PAGE), "Content-Encoding: gzip"), PAGE, True),
    "deflate": (ok(zlib.compress(PAGE), "Content-Encoding: deflate"), PAGE, True),
    "100 continue first": (b"HTTP/1.1 100 Continue\r\n\r\n" + ok(PAGE), PAGE, True),
    "empty": (ok(b""), b"", True),
    "HTTP/1.0": (ok(PAGE).replace(b"HTTP/1.1", b"HTTP/1.0", 1), PAGE, False),
    "Connection: close": (ok(PAGE, "Connection: close"), PAGE, False),
    "bytes after the body": (ok(PAGE) + b"HTTP/1.1 200", PAGE, False),
}


@pytest.mark.parametrize("name", list(RESPONSES))
@settings(max_examples=25, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200_000), max_size=12))
def test_a_response_cut_anywhere_reads_as_the_whole_body(name: str, cuts: list[int]) -> None:
    response, body, reusable = RESPONSES[name]
    assert _read(response, cuts) == (body, reusable)


BAD: dict[str, tuple[bytes, str]] = {
    "not HTTP": (b"SSH-2.0-OpenSSH\r\n\r\n", "invalid status line"),
    "status 503": (b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n", "HTTP 503"),
    "redirect": (b"HTTP/1.1 302 Found\r\nLocation: /x\r\nContent-Length: 0\r\n\r\n", "HTTP 302"),
    "header without colon": (b"HTTP/1.1 200 OK\r\nbroken\r\n\r\n", "invalid header line"),
    "two lengths": (
        b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd",
        "invalid Content-Length",
    ),
    "negative length": (b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n", "invalid Content-Length"),
    "bad chunk size": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        "invalid chunk size",
    ),
    "no CRLF after a chunk": (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
        "no CRLF after a chunk",
    ),
    "gzip then garbage": (ok(b"not gzip", "Content-Encoding: gzip"), "invalid gzip body"),
    "brotli": (ok(b"x", "Content-Encoding: br"), "unsupported Content-Encoding"),
    "head too large": (b"HTTP/1.1 200 OK\r\n" + b"X: " + b"a" * 70_000, "response head over"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_malformed_response_is_an_error_naming_what_is_wrong(name: str) -> None:
    response, message = BAD[name]
    with pytest.raises(PageFetchError, match=message):
        _read(response, [7, 50])


@pytest.mark.parametrize(
    "response",
    [
        ok(PAGE),
        chunked(PAGE, 1000),
        b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + PAGE,
        ok(gzip.compress(PAGE), "Content-Encoding: gzip"),
    ],
    ids=["content-length", "chunked", "until close", "gzip (decompressed size)"],
)
def test_a_body_over_the_limit_is_refused_with_the_limit_named(response: bytes) -> None:
    assert _read(response, [100], limit=len(PAGE))[0] == PAGE
    with pytest.raises(PageFetchError, match=f"page larger than {len(PAGE) - 1} bytes"):
        _read(response, [100], limit=len(PAGE) - 1)


def test_a_declared_length_over_the_limit_is_refused_before_any_body_byte() -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 999999999\r\n\r\n"
    with pytest.raises(PageFetchError, match="Content-Length 999999999"):
        _read(head, [])  # no body at all: refused on the head alone


def test_a_connection_closed_mid_body_is_an_error_not_a_short_page() -> None:
    loop = asyncio.new_event_loop()
    try:
        conn = _Connection(loop, 1 << 20, _Buffers())
        conn.connection_made(_Transport())
        task = loop.create_task(conn.request(b"GET /\r\n\r\n", loop.time() + 60))
        loop.call_soon(_feed, conn, ok(PAGE)[:5000], [])
        loop.call_soon(conn.connection_lost, None)
        with pytest.raises(PageFetchError, match="connection closed after"):
            loop.run_until_complete(task)
    finally:
        loop.close()


# --- connections, on loopback ------------------------------------------------------------


class RawPod:
    """A raw HTTP/1.1 server: ``answer(n)`` is the n-th request's response bytes (None:
    close the connection without answering); ``close_after`` closes each connection
    after that many answers; ``hold`` makes requests wait until released."""

    def __init__(
        self,
        answer: Callable[[int], bytes | None] = lambda n: ok(PAGE),
        close_after: int | None = None,
    ) -> None:
        self.answer = answer
        self.close_after = close_after
        self.requests = 0
        self.connections = 0
        self.received = asyncio.Event()
        self.hold: asyncio.Event | None = None
        self.server: asyncio.Server | None = None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                assert head.startswith(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1:")
                self.requests += 1
                self.received.set()
                if self.hold is not None:
                    await self.hold.wait()
                response = self.answer(self.requests)
                if response is None:
                    break
                writer.write(response)
                await writer.drain()
                answered += 1
                if self.close_after is not None and answered >= self.close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/metrics"


@pytest.fixture
async def serve() -> AsyncIterator[Callable[[RawPod], asyncio.Future[str]]]:
    servers: list[asyncio.Server] = []

    async def start(pod: RawPod) -> str:
        pod.server = await asyncio.start_server(pod.handle, "127.0.0.1", 0)
        servers.append(pod.server)
        return pod.url

    yield start  # type: ignore[misc]
    for server in servers:
        server.close()
        await server.wait_closed()


@pytest.fixture
def fake_time() -> Iterator[list[float]]:
    """The running loop's clock, advanced by the test (``fake_time[0] += s``)."""
    loop = asyncio.get_event_loop()
    now = [loop.time()]
    original = loop.time
    loop.time = lambda: now[0]  # type: ignore[method-assign]
    yield now
    loop.time = original  # type: ignore[method-assign]


async def test_one_connection_is_kept_alive_and_reused(serve) -> None:  # type: ignore[no-untyped-def]
    pod = RawPod()
    url = await serve(pod)
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        bodies = [await client.get(url) for _ in range(5)]
    finally:
        await client.close()
    assert bodies == [PAGE] * 5
    assert pod.requests == 5 and pod.connections == 1 and client.connects == 1


async def test_released_buffers_leave_idle_connections_reusable(serve) -> None:  # type: ignore[no-untyped-def]
    """Between bursts the receive buffers are freed; an idle connection holds none and
    the next request on it reads the whole page into a new one."""
    pods = [RawPod(), RawPod()]
    urls = [await serve(pod) for pod in pods]
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        first = await asyncio.gather(*(client.get(url) for url in urls))
        idle = [conn for conns in client._idle.values() for conn in conns]
        assert len(idle) == 2 and all(c.buf is None and c.chunks is None for c in idle)
        assert client.release_buffers() >= 64 * 1024  # the requests' buffers were kept
        assert client.release_buffers() == 0
        second = await asyncio.gather(*(client.get(url) for url in urls))
    finally:
        await client.close()
    assert first == second == [PAGE, PAGE]
    assert client.connects == 2 and [p.connections for p in pods] == [1, 1]
    assert [p.requests for p in pods] == [2, 2]


async def test_a_pod_that_closes_after_answering_is_reconnected(serve) -> None:  # type: ignore[no-untyped-def]
    pod = RawPod(close_after=1)
    url = await serve(pod)
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        for _ in range(3):
            assert await client.get(url) == PAGE
    finally:
        await client.close()
    assert pod.requests == 3 and pod.connections == 3


async def test_a_kept_connection_closed_unanswered_is_retried_once_on_a_new_one(serve) -> None:  # type: ignore[no-untyped-def]
    # The pod's keep-alive expired while our request was on the wire: the second request
    # on the first connection is dropped unanswered; the client retries on a new one.
    pod = RawPod(answer=lambda n: None if n == 2 else ok(PAGE))
    url = await serve(pod)
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        assert await client.get(url) == PAGE
        assert await client.get(url) == PAGE
    finally:
        await client.close()
    assert pod.requests == 3 and pod.connections == 2 and client.connects == 2


async def test_a_new_connection_closed_unanswered_is_an_error_without_retrying(serve) -> None:  # type: ignore[no-untyped-def]
    pod = RawPod(answer=lambda n: None)
    url = await serve(pod)
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        with pytest.raises(PageFetchError, match="connection closed before the response"):
            await client.get(url)
    finally:
        await client.close()
    assert pod.requests == 1 and client.connects == 1


async def test_a_pod_that_does_not_answer_times_out_and_its_connection_is_dropped(  # type: ignore[no-untyped-def]
    serve, fake_time
) -> None:
    pod = RawPod()
    pod.hold = asyncio.Event()
    url = await serve(pod)
    client = PageClient(timeout_s=2.0, max_body_bytes=1 << 20)
    try:
        get = asyncio.ensure_future(client.get(url))
        await pod.received.wait()
        assert not get.done()
        fake_time[0] += 2.0
        with pytest.raises(TimeoutError):
            await get
        assert client.idle_connections() == 0
        pod.hold.set()
        assert await client.get(url) == PAGE  # a new connection
    finally:
        await client.close()
    assert pod.connections == 2


async def test_an_idle_connection_past_keepalive_is_closed_not_reused(serve, fake_time) -> None:  # type: ignore[no-untyped-def]
    pod = RawPod()
    url = await serve(pod)
    client = PageClient(timeout_s=2.0, max_body_bytes=1 << 20, keepalive_s=30.0)
    try:
        await client.get(url)
        fake_time[0] += 29.0
        await client.get(url)
        assert client.connects == 1
        fake_time[0] += 30.0
        await client.get(url)
    finally:
        await client.close()
    assert client.connects == 2 and pod.connections == 2


async def test_idle_connections_are_bounded(serve) -> None:  # type: ignore[no-untyped-def]
    pods = [RawPod() for _ in range(4)]
    urls = [await serve(p) for p in pods]
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20, max_idle=2)
    try:
        await asyncio.gather(*(client.get(u) for u in urls))
        assert client.idle_connections() == 2
    finally:
        await client.close()


async def test_a_cancelled_request_drops_its_connection(serve) -> None:  # type: ignore[no-untyped-def]
    pod = RawPod()
    pod.hold = asyncio.Event()
    url = await serve(pod)
    client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
    try:
        get = asyncio.ensure_future(client.get(url))
        await pod.received.wait()
        get.cancel()
        with pytest.raises(asyncio.CancelledError):
            await get
        pod.hold.set()
        assert client.idle_connections() == 0
        assert await client.get(url) == PAGE
    finally:
        await client.close()
    assert pod.connections == 2


# --- through PodScrapeSource: a failure is an unread pod, never zero ---------------------


async def test_a_timed_out_pod_is_unread_and_named_never_zero(serve, fake_time) -> None:  # type: ignore[no-untyped-def]
    slow, fine = RawPod(), RawPod()
    slow.hold = asyncio.Event()
    pods = [PodEndpoint("slow", await serve(slow)), PodEndpoint("fine", await serve(fine))]
    source = PodScrapeSource(ScrapeConfig(timeout_s=2.0))
    try:
        read = asyncio.ensure_future(source.read("ns/t", pods, now=1.0))
        await slow.received.wait()
        fake_time[0] += 2.0
        reading = await read
    finally:
        slow.hold.set()
        await source.close()
    assert reading.pods_read == 1 and reading.pods_expected == 2
    assert reading.signals["waiting"] == 11  # the fine pod's value alone
    assert reading.errors == ("slow: TimeoutError: timeout after 2.0s",)


@pytest.mark.parametrize(
    ("answer", "message"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + PAGE[:10], "connection closed"),
        (b"garbage\r\n\r\n", "invalid status line"),
        (ok(b"<html>login</html>"), "no vLLM, SGLang"),
        (ok(b""), "no vLLM, SGLang"),
    ],
    ids=["cut short", "not HTTP", "HTML", "empty page"],
)
async def test_a_malformed_answer_leaves_the_pod_unread_never_zero(  # type: ignore[no-untyped-def]
    serve, answer: bytes, message: str
) -> None:
    bad, fine = RawPod(answer=lambda n: answer, close_after=1), RawPod()
    pods = [PodEndpoint("bad", await serve(bad)), PodEndpoint("fine", await serve(fine))]
    source = PodScrapeSource(ScrapeConfig(timeout_s=5.0))
    try:
        reading = await source.read("ns/t", pods, now=1.0)
    finally:
        await source.close()
    assert reading.pods_read == 1 and reading.signals["waiting"] == 11
    assert len(reading.errors) == 1 and reading.errors[0].startswith("bad: ")
    assert message in reading.errors[0]


def test_pages_are_read_the_same_on_uvloop() -> None:
    """`llm-autoscaler run` uses uvloop when installed: its transports are not
    `asyncio.Transport` subclasses, and a scrape reads the same bytes and signals there."""
    uvloop = pytest.importorskip("uvloop")

    async def scrape() -> tuple[list[bytes], int, str]:
        pod = RawPod()
        pod.server = await asyncio.start_server(pod.handle, "127.0.0.1", 0)
        client = PageClient(timeout_s=5.0, max_body_bytes=1 << 20)
        source = PodScrapeSource(ScrapeConfig(timeout_s=5.0))
        try:
            bodies = [await client.get(pod.url) for _ in range(3)]
            # plain HTTP rides the client's one epoll, itself one uvloop reader
            assert client._poller is not None and len(client._poller) == 1
            reading = await source.read("ns/t", [PodEndpoint("p0", pod.url)], 1.0)
        finally:
            await client.close()
            await source.close()
            pod.server.close()
            await pod.server.wait_closed()
        return bodies, reading.pods_read, type(asyncio.get_running_loop()).__module__

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        bodies, pods_read, loop_module = runner.run(scrape())
    assert loop_module == "uvloop"
    assert bodies == [PAGE] * 3
    assert pods_read == 1


def test_a_request_is_joined_from_parts_pods_share_their_path() -> None:
    from autoscaler.metrics.page_client import _target

    a, b = _target("http://127.1.0.1:8000/metrics"), _target("http://127.1.0.2:8000/metrics")
    assert a.path is b.path  # one object for every pod with this path
    tail = b"Accept: text/plain;version=0.0.4;q=0.9,*/*;q=0.1\r\nUser-Agent: llm-autoscaler\r\n\r\n"
    assert a.request == b"GET /metrics HTTP/1.1\r\nHost: 127.1.0.1:8000\r\n" + tail
    assert b.with_query(b"name%5B%5D=x") == (
        b"GET /metrics?name%5B%5D=x HTTP/1.1\r\nHost: 127.1.0.2:8000\r\n" + tail
    )
    assert _target("http://[::1]/m?x=1").with_query(b"q=2") == (
        b"GET /m?x=1&q=2 HTTP/1.1\r\nHost: [::1]\r\n" + tail
    )
    assert (
        _target("https://h:443/m?")
        .with_query(b"q=2")
        .startswith(b"GET /m?q=2 HTTP/1.1\r\nHost: h\r\n")
    )
