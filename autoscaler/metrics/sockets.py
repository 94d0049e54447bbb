"""Plain-TCP connections for `PageClient` on one epoll per client, not a transport each.

A scraper keeps one connection per pod alive between ticks (4,000 at 500 targets x 8
pods). An event-loop transport per connection costs ~1.4 KB on uvloop (its TCPTransport
and libuv handle; a socket behind ``add_reader`` ~1.0 KB), a socket object ~0.2 KB. Here every
socket of a client is registered in one `select.epoll`, whose descriptor is the event
loop's only reader for all of them: when it is readable, one callback polls it without
waiting and drives each ready socket's protocol. Measured: docs/scale.md, "Ablation".

The protocol side is what the event loop's transports drive: `asyncio.BufferedProtocol`
(``connection_made``, ``get_buffer``/``buffer_updated``, ``eof_received``,
``connection_lost``), with the same order and the same ``abort`` semantics (closed at
once, ``connection_lost(None)`` soon after). Only what a scrape needs: no half-close (end
of stream closes the connection), no flow control (a request is a few hundred bytes; the
rest of a partial write waits for the socket to be writable). TLS stays on the event
loop's transports (`PageClient` chooses), and so does every platform without epoll.
"""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import os
import select
import socket
from collections.abc import Callable
from typing import Any

HAS_EPOLL = hasattr(select, "epoll")

if HAS_EPOLL:
    _IN = select.EPOLLIN | select.EPOLLRDHUP
    _OUT = select.EPOLLOUT
    _READ_EVENTS = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
else:  # pragma: no cover - Linux has epoll; elsewhere PageClient uses the loop's transports
    _IN = _OUT = _READ_EVENTS = 0

_CONNECTING = (errno.EINPROGRESS, errno.EAGAIN)


class SocketTransport:
    """One non-blocking TCP socket registered in a `Poller`; what a protocol calls."""

    __slots__ = ("_address", "_pending", "_poller", "_protocol", "_sock", "_waiter", "closed")

    def __init__(self, poller: Poller, sock: socket.socket, protocol: asyncio.BufferedProtocol):
        self._poller = poller
        self._sock = sock
        self._protocol: asyncio.BufferedProtocol | None = protocol
        self._pending = b""  # the rest of a write the socket did not take at once
        self._waiter: asyncio.Future[None] | None = None  # while connecting
        self._address: Any = None
        self.closed = False

    # -- what the protocol calls ---------------------------------------------------------
    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self.closed:
            return
        if self._pending:
            self._pending += bytes(data)
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._close_soon(exc)
            return
        if sent < len(data):
            self._pending = bytes(memoryview(data)[sent:])
            self._poller.modify(self, _IN | _OUT)

    def abort(self) -> None:
        """Close now; the protocol's ``connection_lost(None)`` runs soon after, as the event
        loop's transports do."""
        self._close_soon(None)

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return None if self.closed else self._sock
        if name == "peername":
            return self._address
        return default

    # -- what the poller calls -----------------------------------------------------------
    async def connect(self, address: Any) -> None:
        """Connect to ``address``; the protocol's ``connection_made`` runs once connected.
        Raises `OSError` as ``loop.sock_connect`` does; the socket is closed on failure or
        cancellation."""
        self._address = address
        try:
            err = self._sock.connect_ex(address)
            if err in _CONNECTING:
                waiter = self._waiter = self._poller.loop.create_future()
                self._poller.register(self, _OUT)
                await waiter
            elif err:
                raise OSError(err, f"Connect call failed {address}: {os.strerror(err)}")
            else:  # connected at once
                self._poller.register(self, _IN)
                self._made()
        except BaseException:
            self._close()
            raise

    def ready(self, events: int) -> None:
        """The socket is ready for ``events`` (an epoll mask)."""
        waiter = self._waiter
        if waiter is not None:
            self._connected(waiter)
            return
        if events & _OUT and self._pending:
            self._flush()
        if events & _READ_EVENTS and not self.closed:
            self._read()

    def shut(self) -> None:
        """The poller closes: a connect in progress fails, a connection is aborted."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(ConnectionAbortedError("the client was closed"))
        self._close_soon(None)

    def fail(self, exc: Exception) -> None:
        """A protocol callback raised: the connection is lost with that error (the event
        loop's transports do the same)."""
        self._lost(exc)

    # -- internals -----------------------------------------------------------------------
    def _made(self) -> None:
        assert self._protocol is not None
        self._protocol.connection_made(self)  # type: ignore[arg-type]

    def _connected(self, waiter: asyncio.Future[None]) -> None:
        self._waiter = None
        if waiter.done():  # cancelled (the connect timed out): `connect` closes it
            self._poller.modify(self, 0)
            return
        err = self._sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            self._poller.modify(self, 0)
            address = self._address
            waiter.set_exception(OSError(err, f"Connect call failed {address}: {os.strerror(err)}"))
            return
        self._poller.modify(self, _IN)
        self._made()
        waiter.set_result(None)

    def _flush(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        self._pending = self._pending[sent:]
        if not self._pending:
            self._poller.modify(self, _IN)

    def _read(self) -> None:
        sock = self._sock
        while not self.closed:
            protocol = self._protocol
            assert protocol is not None
            buf = protocol.get_buffer(-1)
            size = len(buf)  # type: ignore[arg-type]
            try:
                received = sock.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                self._lost(exc)
                return
            if received == 0:  # the pod closed its end: no half-close here
                protocol.eof_received()
                self._lost(None)
                return
            protocol.buffer_updated(received)
            if received < size:  # drained (level-triggered: more wakes us again)
                return

    def _close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._pending = b""
        self._poller.unregister(self)
        self._sock.close()

    def _lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        protocol = self._protocol
        self._close()
        self._protocol = None  # no cycle left with the protocol that holds this transport
        if protocol is not None:
            protocol.connection_lost(exc)

    def _close_soon(self, exc: Exception | None) -> None:
        if self.closed:
            return
        protocol = self._protocol
        self._close()
        self._protocol = None
        loop = self._poller.loop
        if protocol is not None and not loop.is_closed():  # a closed loop runs nothing more
            loop.call_soon(protocol.connection_lost, exc)


class Poller:
    """One epoll for many sockets; its descriptor is one reader of one event loop."""

    __slots__ = ("_epoll", "_sockets", "loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._epoll = select.epoll()
        self._sockets: dict[int, SocketTransport] = {}
        loop.add_reader(self._epoll.fileno(), self._ready)

    def __len__(self) -> int:
        return len(self._sockets)

    async def open(
        self, protocol_factory: Callable[[], asyncio.BufferedProtocol], host: str, port: int
    ) -> tuple[SocketTransport, asyncio.BufferedProtocol]:
        """A connected transport and its protocol, as ``loop.create_connection`` returns
        them: ``host`` an IP address or a name (resolved by the loop, each address tried
        in turn)."""
        addresses = _literal(host, port)
        if addresses is None:
            infos = await self.loop.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP
            )
            addresses = [(family, address) for family, _, _, _, address in infos]
            if not addresses:
                raise OSError(f"getaddrinfo({host!r}) returned no address")
        errors: list[OSError] = []
        for family, address in addresses:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except BaseException:
                sock.close()
                raise
            protocol = protocol_factory()
            transport = SocketTransport(self, sock, protocol)
            try:
                await transport.connect(address)
            except OSError as exc:
                errors.append(exc)
                continue
            return transport, protocol
        if len(errors) == 1:
            raise errors[0]
        raise OSError(f"Multiple exceptions: {', '.join(str(e) for e in errors)}")

    def register(self, transport: SocketTransport, events: int) -> None:
        fd = transport._sock.fileno()
        self._epoll.register(fd, events)
        self._sockets[fd] = transport

    def modify(self, transport: SocketTransport, events: int) -> None:
        if not transport.closed and not self._epoll.closed:
            self._epoll.modify(transport._sock.fileno(), events)

    def unregister(self, transport: SocketTransport) -> None:
        fd = transport._sock.fileno()
        if fd >= 0 and self._sockets.get(fd) is transport:
            del self._sockets[fd]
            if not self._epoll.closed:
                self._epoll.unregister(fd)  # before the socket closes: its number is reused

    def close(self) -> None:
        """Stop watching; a connection still open is aborted, a connect fails."""
        if self._epoll.closed:
            return
        for transport in list(self._sockets.values()):
            transport.shut()
        if not self.loop.is_closed():
            self.loop.remove_reader(self._epoll.fileno())
        self._epoll.close()

    def _ready(self) -> None:
        sockets = self._sockets
        for fd, events in self._epoll.poll(0):
            transport = sockets.get(fd)
            if transport is None:
                continue
            try:
                transport.ready(events)
            except Exception as exc:  # a protocol callback's bug: that connection fails
                transport.fail(exc)


def _literal(host: str, port: int) -> list[tuple[int, Any]] | None:
    """``host`` as an IP address (no lookup), or None for a name (or a scoped IPv6
    address, which the resolver turns into its interface's number)."""
    if "%" in host:
        return None
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return None
    if ip.version == 6:
        return [(socket.AF_INET6, (host, port, 0, 0))]
    return [(socket.AF_INET, (host, port))]
