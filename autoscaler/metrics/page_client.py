"""A minimal HTTP/1.1 GET client for pods' /metrics pages: keep-alive, bounded, exact.

Why not aiohttp: a pod scrape is one small GET per pod per tick (8,000 per second for
1,000 targets x 8 pods), and aiohttp's per-request machinery (request and response
objects, stream reader, tracing hooks, timers, header multidicts) cost ~100 us of CPU per
scrape, as much as parsing the page (benchmarks/bench_scrape.py measures both clients side
by side). This client does only what a scrape needs, on an `asyncio.BufferedProtocol`
driven by one epoll per client for plain HTTP (`autoscaler.metrics.sockets`: ~0.3 KB per
kept-alive connection instead of a ~1.4 KB event-loop transport) and by the event loop's
own transports for TLS:

- one connection per request in flight, kept alive and reused per (host, port, tls),
  LIFO; an idle connection is closed after ``keepalive_s`` or when the pod closes it;
  at most ``max_idle`` idle connections in all (beyond that one is closed on release);
- a response is framed by ``Content-Length``, ``Transfer-Encoding: chunked`` or the end
  of the connection; a body over ``max_body_bytes`` is refused while it arrives (the
  declared length is checked before any body byte); ``Content-Encoding: gzip``/``deflate``
  is decompressed up to the same bound (``Accept-Encoding`` is not sent, so a pod that
  compresses anyway still works);
- ``timeout_s`` bounds the whole request (connect included): the connection is aborted
  and `TimeoutError` raised;
- a reused connection that the pod closed before answering (its keep-alive expired while
  the request was on the wire) is retried once on a new connection; every other failure
  raises, as `PageFetchError` (status, framing, size), `TimeoutError` or `OSError`.

A status other than 200, a malformed head or chunk, or a connection closed mid-body is
an error, never an empty or partial page.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, cast

import yarl

from autoscaler.errors import MetricSourceError
from autoscaler.metrics.sockets import HAS_EPOLL, Poller

ACCEPT: Final = "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"
MAX_HEAD_BYTES: Final = 64 * 1024  # status line + headers (+ chunk trailers)
_MAX_CHUNK_LINE: Final = 4096
_HEX: Final = re.compile(rb"[0-9A-Fa-f]{1,16}")
_STATUS: Final = re.compile(rb"\d{3}")

# Response phases
_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class PageFetchError(MetricSourceError):
    """A pod's answer that is not a page: a status other than 200, bad framing, too large."""


class _Stale(Exception):
    """A reused connection closed before any byte of the response (retried once)."""


_HEAD_TAIL: Final = f"Accept: {ACCEPT}\r\nUser-Agent: llm-autoscaler\r\n\r\n".encode("ascii")
_SHARED: dict[bytes, bytes] = {}  # request paths, one object per distinct path


@dataclass(frozen=True, slots=True)
class _Target:
    """A pod's URL as requests need it. A request is joined from these parts when sent
    (a filtered scrape joins its query in anyway): kept whole, it was ~400 bytes per pod
    in every scraper, where the parts a pod does not share with others are its host."""

    host: str
    port: int
    tls: bool
    key: tuple[str, int, bool]  # the pool's key: (host, port, tls)
    path: bytes  # the request target (path and query), shared by pods with the same
    query_sep: bytes  # what joins more query parameters to the target: ``?`` or ``&``
    host_line: bytes  # `` HTTP/1.1\r\nHost: ...\r\n``

    @property
    def request(self) -> bytes:
        return b"".join((b"GET ", self.path, self.host_line, _HEAD_TAIL))

    def with_query(self, query: bytes) -> bytes:
        """The request with ``query`` added to the target's query string."""
        return b"".join((b"GET ", self.path, self.query_sep, query, self.host_line, _HEAD_TAIL))


def _target(url: str) -> _Target:
    parsed = yarl.URL(url)
    if parsed.scheme not in ("http", "https") or not parsed.raw_host:
        raise PageFetchError(f"url={url!r}: must be http:// or https:// with a host")
    host = parsed.raw_host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    host_header = f"[{host}]" if ":" in host else host
    if not parsed.is_default_port():
        host_header += f":{port}"
    path_qs = parsed.raw_path_qs or "/"
    path = path_qs.encode("ascii")
    if len(_SHARED) >= 4096:
        _SHARED.clear()
    path = _SHARED.setdefault(path, path)
    tls = parsed.scheme == "https"
    sep = b"&" if parsed.raw_query_string else b"" if path_qs.endswith("?") else b"?"
    host_line = f" HTTP/1.1\r\nHost: {host_header}\r\n".encode("ascii")
    return _Target(host, port, tls, (host, port, tls), path, sep, host_line)


class _Buffers:
    """Receive buffers shared by the connections with a request in flight.

    The socket is read straight into one of these (`asyncio.BufferedProtocol`), so a
    page costs no 256 KiB allocation per read as `data_received` does, and an idle
    connection (one per pod between ticks) holds no buffer at all.
    """

    SIZE = 64 * 1024
    KEEP_MAX_BYTES = 1024 * 1024  # larger buffers (a large page's) are not kept
    POOL_MAX_BYTES = 16 * 1024 * 1024

    def __init__(self) -> None:
        self.free: list[bytearray] = []
        self.free_bytes = 0

    def take(self) -> bytearray:
        if self.free:
            buf = self.free.pop()
            self.free_bytes -= len(buf)
            return buf
        return bytearray(self.SIZE)

    def release(self) -> int:
        """Drop the free buffers (kept only between requests of one burst); bytes freed."""
        freed, self.free, self.free_bytes = self.free_bytes, [], 0
        return freed

    def give(self, buf: bytearray) -> None:
        size = len(buf)
        if size <= self.KEEP_MAX_BYTES and self.free_bytes + size <= self.POOL_MAX_BYTES:
            self.free.append(buf)
            self.free_bytes += size


_SCRATCH = bytearray(4096)  # what an idle connection reads into (then it is closed)


class _Connection(asyncio.BufferedProtocol):
    """One kept-alive connection and the response it is reading (one at a time).

    While a request is in flight the socket is read into ``buf`` (from `_Buffers`):
    bytes ``[pos, filled)`` are received and not yet consumed. A Content-Length body is
    received in place (the buffer is sized to head + body once the head is read) and
    copied out once; chunk data and bodies delimited by the connection's end are copied
    out as they arrive, so the buffer stays small for them.

    Slotted, and an idle connection holds no buffer and no chunk list: the controller
    keeps one per pod (4,000 at 500 targets) between ticks.
    """

    __slots__ = (
        "body_end",
        "body_start",
        "buf",
        "buffers",
        "chunks",
        "closed",
        "encoding",
        "filled",
        "got_bytes",
        "idle_since",
        "keep_alive",
        "loop",
        "max_body_bytes",
        "phase",
        "pos",
        "remaining",
        "size",
        "transport",
        "waiter",
    )

    def __init__(
        self, loop: asyncio.AbstractEventLoop, max_body_bytes: int, buffers: _Buffers
    ) -> None:
        self.loop = loop
        self.max_body_bytes = max_body_bytes
        self.buffers = buffers
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.idle_since = 0.0
        self.waiter: asyncio.Future[bytes] | None = None
        self.buf: bytearray | None = None
        self._reset()

    def _reset(self) -> None:
        self.phase = _HEAD
        self.pos = 0  # first byte of ``buf`` not consumed yet
        self.filled = 0  # bytes of ``buf`` received
        self.body_start = 0  # Content-Length body: where it starts in ``buf``
        self.body_end = 0
        self.chunks: list[bytes | bytearray] | None = None  # chunked / until-close bodies
        self.size = 0  # body bytes received (chunked / until-close)
        self.remaining = 0  # of the current chunk
        self.got_bytes = False
        self.keep_alive = True
        self.encoding = b""

    # -- asyncio.BufferedProtocol -------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self.buf
        if buf is None:  # bytes nobody asked for: read, then the connection is dropped
            return memoryview(_SCRATCH)
        want = self.body_end if self.phase == _LENGTH else self.filled + 1
        if want > len(buf):
            grown = bytearray(max(want, 2 * len(buf)) if self.phase != _LENGTH else want)
            grown[: self.filled] = memoryview(buf)[: self.filled]
            self.buffers.give(buf)
            self.buf = buf = grown
        return memoryview(buf)[self.filled :]

    def buffer_updated(self, nbytes: int) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done() or self.buf is None:  # unsolicited: unusable
            self.keep_alive = False
            self.abort()
            return
        self.got_bytes = True
        self.filled += nbytes
        try:
            self._parse()
        except PageFetchError as exc:
            self._fail(exc)

    def eof_received(self) -> bool:
        self._closed_by_peer()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self._closed_by_peer(exc)

    # -- one request --------------------------------------------------------------------
    async def request(self, request: bytes, deadline: float) -> bytes:
        """Send ``request`` and return the 200 response's body, or raise."""
        assert self.transport is not None
        self._reset()
        self.buf = self.buffers.take()
        waiter: asyncio.Future[bytes] = self.loop.create_future()
        self.waiter = waiter
        timer = self.loop.call_at(deadline, self._timed_out, waiter)
        try:
            self.transport.write(request)
            return await waiter
        finally:
            timer.cancel()
            if not waiter.done() or waiter.cancelled():  # cancelled mid-request: unusable
                waiter.cancel()
                self.keep_alive = False
                self.abort()
            self.waiter = None
            self._drop_buffer()

    def _drop_buffer(self) -> None:
        if self.buf is not None:
            self.buffers.give(self.buf)
            self.buf = None
        self.chunks = None

    def reusable(self) -> bool:
        return self.keep_alive and not self.closed and self.phase == _DONE

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def _timed_out(self, waiter: asyncio.Future[bytes]) -> None:
        if not waiter.done():
            waiter.set_exception(TimeoutError())
        self.keep_alive = False
        self.abort()

    def _fail(self, exc: BaseException) -> None:
        self.keep_alive = False
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.abort()

    def _closed_by_peer(self, exc: Exception | None = None) -> None:
        self.keep_alive = False
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        if self.phase == _UNTIL_CLOSE:
            self._finish()
        elif not self.got_bytes:
            waiter.set_exception(_Stale())
        else:
            reason = f": {exc}" if exc is not None else ""
            received = self.filled - self.body_start if self.phase == _LENGTH else self.size
            waiter.set_exception(
                PageFetchError(
                    f"connection closed after {received} bytes of the response body{reason}"
                    if self.phase != _HEAD
                    else f"connection closed in the response head{reason}"
                )
            )

    def _finish(self) -> None:
        self.phase = _DONE
        buf = self.buf
        assert buf is not None
        chunks = self.chunks
        if chunks:
            body = bytes(chunks[0]) if len(chunks) == 1 else b"".join(chunks)
        else:  # Content-Length (or empty): one copy out of the receive buffer
            body = bytes(memoryview(buf)[self.body_start : self.body_end])
        self.chunks = None
        if self.encoding:
            body = _decompress(body, self.encoding, self.max_body_bytes)
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(body)

    # -- response parsing ---------------------------------------------------------------
    def _parse(self) -> None:
        buf = self.buf
        assert buf is not None
        if self.phase == _HEAD:
            start = self.pos
            end = buf.find(b"\r\n\r\n", start, self.filled)
            while end >= 0:
                informational = self._head(bytes(buf[start:end]))
                start = self.pos = end + 4
                if not informational:
                    break
                end = buf.find(b"\r\n\r\n", start, self.filled)  # 1xx: the real response follows
            else:
                if self.filled - start > MAX_HEAD_BYTES:
                    raise PageFetchError(f"response head over {MAX_HEAD_BYTES} bytes")
                return
            if self.phase == _LENGTH:
                self.body_start = start
                self.body_end = start + self.remaining
        if self.phase == _LENGTH:
            if self.filled >= self.body_end:
                if self.filled > self.body_end:  # bytes after the response: not reused
                    self.keep_alive = False
                self._finish()
        elif self.phase == _DONE:
            if self.filled > self.pos:
                self.keep_alive = False
            self._finish()
        elif self.phase == _UNTIL_CLOSE:
            self._take(self.filled - self.pos)
            self._compact()
        else:
            self._chunked()

    def _take(self, n: int) -> None:
        """Copy ``n`` body bytes at ``pos`` out of the buffer."""
        if not n:
            return
        self.size += n
        if self.size > self.max_body_bytes:
            raise PageFetchError(f"page larger than {self.max_body_bytes} bytes")
        assert self.buf is not None
        if self.chunks is None:
            self.chunks = []
        self.chunks.append(self.buf[self.pos : self.pos + n])
        self.pos += n

    def _compact(self) -> None:
        """Move unconsumed bytes to the start of the buffer (the rest was copied out)."""
        buf = self.buf
        assert buf is not None
        left = self.filled - self.pos
        if left:
            buf[:left] = buf[self.pos : self.filled]
        self.pos, self.filled = 0, left

    def _head(self, head: bytes) -> bool:
        """Read a response head; True for a 1xx response (skip it)."""
        lines = head.split(b"\r\n")
        parts = lines[0].split(b" ", 2)
        version = parts[0]
        if len(parts) < 2 or version[:7] != b"HTTP/1." or not _STATUS.fullmatch(parts[1]):
            raise PageFetchError(f"invalid status line {lines[0][:80]!r}")
        status = int(parts[1])
        if 100 <= status < 200 and status != 101:
            return True
        if status != 200:
            raise PageFetchError(f"HTTP {status}")
        self.keep_alive = version == b"HTTP/1.1"
        length: int | None = None
        chunked = False
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise PageFetchError(f"invalid header line {line[:80]!r}")
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                if not value.isdigit() or (length is not None and int(value) != length):
                    raise PageFetchError(f"invalid Content-Length {value[:40]!r}")
                length = int(value)
            elif name == b"transfer-encoding":
                codings = [c.strip() for c in value.lower().split(b",") if c.strip()]
                if codings != [b"chunked"]:
                    raise PageFetchError(f"unsupported Transfer-Encoding {value[:40]!r}")
                chunked = True
            elif name == b"content-encoding":
                coding = value.lower()
                if coding in (b"gzip", b"x-gzip", b"deflate"):
                    self.encoding = coding
                elif coding not in (b"", b"identity"):
                    raise PageFetchError(f"unsupported Content-Encoding {value[:40]!r}")
            elif name == b"connection":
                tokens = value.lower()
                if b"close" in tokens:
                    self.keep_alive = False
                elif b"keep-alive" in tokens:
                    self.keep_alive = True
        limit = self.max_body_bytes
        if chunked:
            self.phase = _CHUNK_SIZE
        elif length is not None:
            if length > limit:
                raise PageFetchError(f"page larger than {limit} bytes (Content-Length {length})")
            self.remaining = length
            self.phase = _LENGTH if length else _DONE
        else:
            self.keep_alive = False
            self.phase = _UNTIL_CLOSE
        return False

    def _chunked(self) -> None:
        buf = self.buf
        assert buf is not None
        filled = self.filled
        while True:
            phase = self.phase
            pos = self.pos
            if phase == _CHUNK_DATA:
                take = min(self.remaining, filled - pos)
                self._take(take)
                self.remaining -= take
                if self.remaining:
                    break
                self.phase = _CHUNK_END
            elif phase == _CHUNK_END:
                if filled - pos < 2:
                    break
                if buf[pos : pos + 2] != b"\r\n":
                    raise PageFetchError("invalid chunked body: no CRLF after a chunk")
                self.pos += 2
                self.phase = _CHUNK_SIZE
            elif phase == _CHUNK_SIZE:
                end = buf.find(b"\r\n", pos, filled)
                if end < 0:
                    if filled - pos > _MAX_CHUNK_LINE:
                        raise PageFetchError("invalid chunked body: chunk size line too long")
                    break
                text = bytes(buf[pos:end]).split(b";", 1)[0].strip()
                if not _HEX.fullmatch(text):
                    raise PageFetchError(f"invalid chunk size {text[:20]!r}")
                size = int(text, 16)
                self.pos = end + 2
                if size == 0:
                    self.phase = _TRAILER
                elif self.size + size > self.max_body_bytes:
                    raise PageFetchError(f"page larger than {self.max_body_bytes} bytes")
                else:
                    self.remaining = size
                    self.phase = _CHUNK_DATA
            else:  # _TRAILER: optional trailer lines, then an empty line
                if buf.startswith(b"\r\n", pos, filled):
                    end = pos + 2
                else:
                    end = buf.find(b"\r\n\r\n", pos, filled)
                    if end < 0:
                        if filled - pos > MAX_HEAD_BYTES:
                            raise PageFetchError(f"chunk trailers over {MAX_HEAD_BYTES} bytes")
                        break
                    end += 4
                if end < filled:  # bytes after the response: not reused
                    self.keep_alive = False
                self.pos = end
                self._finish()
                return
        self._compact()


def _decompress(body: bytes, encoding: bytes, limit: int) -> bytes:
    """``body`` decoded (gzip, zlib or raw deflate), refused once it passes ``limit``."""
    wbits = 31 if encoding != b"deflate" else 47  # 47: zlib or gzip, detected
    for bits in (wbits, -15) if encoding == b"deflate" else (wbits,):
        d = zlib.decompressobj(bits)
        try:
            out = d.decompress(body, limit + 1)
        except zlib.error as exc:
            if bits == wbits and encoding == b"deflate":
                continue  # raw deflate (no zlib header), as some servers send
            raise PageFetchError(f"invalid {encoding.decode()} body: {exc}") from None
        if len(out) > limit or d.unconsumed_tail:
            raise PageFetchError(f"page larger than {limit} bytes (decompressed)")
        if not d.eof:
            raise PageFetchError(f"invalid {encoding.decode()} body: truncated")
        return out
    raise PageFetchError("invalid deflate body")  # pragma: no cover - the loop returns


class PageClient:
    """GET pages over kept-alive connections; create and use inside one event loop."""

    def __init__(
        self,
        *,
        timeout_s: float,
        max_body_bytes: int,
        keepalive_s: float = 30.0,
        max_idle: int = 16384,
        ssl_context: Callable[[], ssl.SSLContext] = ssl.create_default_context,
    ) -> None:
        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        self.keepalive_s = keepalive_s
        self.max_idle = max_idle
        self._ssl_factory = ssl_context
        self._ssl: ssl.SSLContext | None = None
        self._targets: dict[str, _Target] = {}
        self._buffers = _Buffers()
        self._idle: dict[tuple[str, int, bool], list[_Connection]] = {}
        self._n_idle = 0
        self._busy: set[_Connection] = set()
        self._poller: Poller | None = None  # plain-HTTP connections (`sockets`)
        self._next_sweep = 0.0
        self.connects = 0  # connections opened (tests and benchmarks read it)

    async def get(self, url: str, query: bytes = b"") -> bytes:
        """The body of a 200 answer to ``GET url``; raises on anything else.

        ``query``: more query parameters (percent-encoded) added to the URL's own, e.g.
        `filtering.name_query`; kept out of the per-URL cache, so a long query shared by
        every pod is one object, not one copy per pod."""
        target = self._targets.get(url)
        if target is None:
            if len(self._targets) >= 65536:
                self._targets.clear()
            target = self._targets[url] = _target(url)
        loop = asyncio.get_running_loop()
        now = loop.time()
        deadline = now + self.timeout_s
        if now >= self._next_sweep:
            self._sweep(now)
        key = target.key
        request = target.with_query(query) if query else target.request
        conn = self._take_idle(key, now)
        reused = conn is not None
        if conn is None:
            conn = await self._connect(target, deadline)
        self._busy.add(conn)
        try:
            try:
                body = await conn.request(request, deadline)
            except _Stale:
                if not reused:
                    raise PageFetchError("connection closed before the response") from None
                self._busy.discard(conn)
                conn = await self._connect(target, deadline)
                self._busy.add(conn)
                try:
                    body = await conn.request(request, deadline)
                except _Stale:
                    raise PageFetchError("connection closed before the response") from None
        finally:
            self._busy.discard(conn)
        self._release(key, conn, loop.time())
        return body

    async def _connect(self, target: _Target, deadline: float) -> _Connection:
        loop = asyncio.get_running_loop()
        context: ssl.SSLContext | None = None
        if target.tls:
            if self._ssl is None:
                self._ssl = self._ssl_factory()
            context = self._ssl

        def protocol() -> _Connection:
            return _Connection(loop, self.max_body_bytes, self._buffers)

        async with asyncio.timeout_at(deadline):
            if context is None and HAS_EPOLL:
                poller = self._poller
                if poller is None or poller.loop is not loop:
                    if poller is not None:  # used from another loop before: its epoll goes
                        poller.close()
                    poller = self._poller = Poller(loop)
                _, conn = await poller.open(protocol, target.host, target.port)
            else:
                _, conn = await loop.create_connection(
                    protocol,
                    target.host,
                    target.port,
                    ssl=context,
                    server_hostname=target.host if context is not None else None,
                )
        self.connects += 1
        return cast(_Connection, conn)

    def _take_idle(self, key: tuple[str, int, bool], now: float) -> _Connection | None:
        idle = self._idle.get(key)
        while idle:
            conn = idle.pop()
            self._n_idle -= 1
            if not conn.closed and now - conn.idle_since < self.keepalive_s:
                return conn
            conn.abort()
        return None

    def _release(self, key: tuple[str, int, bool], conn: _Connection, now: float) -> None:
        if not conn.reusable() or self._n_idle >= self.max_idle:
            conn.abort()
            return
        conn.idle_since = now
        self._idle.setdefault(key, []).append(conn)
        self._n_idle += 1

    def _sweep(self, now: float) -> None:
        """Close idle connections past ``keepalive_s`` or closed by their pod."""
        self._next_sweep = now + self.keepalive_s / 2
        for key in list(self._idle):
            keep = []
            for conn in self._idle[key]:
                if not conn.closed and now - conn.idle_since < self.keepalive_s:
                    keep.append(conn)
                else:
                    conn.abort()
            if keep:
                self._idle[key] = keep
            else:
                del self._idle[key]
        self._n_idle = sum(len(v) for v in self._idle.values())

    def release_buffers(self) -> int:
        """Free the receive buffers kept for reuse (up to one per request that was in
        flight at once, 64 KiB each); the next requests allocate new ones. Bytes freed."""
        return self._buffers.release()

    def idle_connections(self) -> int:
        return self._n_idle

    async def close(self) -> None:
        """Close every connection, idle or in use (their requests fail)."""
        for conns in self._idle.values():
            for conn in conns:
                conn.abort()
        self._idle.clear()
        self._n_idle = 0
        for conn in list(self._busy):
            conn._fail(PageFetchError("client closed"))
        self._busy.clear()
        await asyncio.sleep(0)  # let the transports' connection_lost callbacks run
        if self._poller is not None:
            self._poller.close()
            self._poller = None
