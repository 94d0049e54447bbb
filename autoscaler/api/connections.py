"""Bounds on the HTTP listener's connections: a header deadline and a connection cap.

Why: uvicorn (h11) never closes a connection that stopped mid-header, and accepts as many
as the process has file descriptors. Twenty thousand half-open connections then take
every descriptor the controller has: probes, /metrics and the control loop's own
Kubernetes calls fail together. Here each connection gets `ConnectionLimits.header_timeout_s`
to deliver a request line and headers (from accept, and again after each response on a
keep-alive connection), and the listener holds at most `max_connections`: when full, the
oldest connection still waiting for its headers is closed to make room (a client that
completes its request in milliseconds, a kubelet probe, always gets in); only when every
slot is serving a request is the new connection refused at once with 503.

The descriptors the controller keeps for itself (`raise_fd_limit`, `connection_cap`):
the soft RLIMIT_NOFILE is raised to the hard limit at start, and the cap is kept
`FD_RESERVE` below it.
"""

from __future__ import annotations

import asyncio
import contextlib
import resource
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

from uvicorn.protocols.http.h11_impl import H11Protocol

from autoscaler.logging import get_logger

log = get_logger(__name__)

# Descriptors kept out of the listener's reach: Kubernetes client pools, pod scrapes,
# the gRPC server, files, worker pipes. The cap is lowered to leave this many free.
FD_RESERVE: Final = 1024
MIN_CONNECTIONS: Final = 16

# Raw answers written before closing: the client has not sent (all of) a request, so
# there is no h11 cycle to answer through.
_REFUSED: Final = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\nretry-after: 1\r\n"
    b"connection: close\r\ncontent-length: 27\r\n\r\ntoo many connections; retry"
)
_TIMED_OUT: Final = (
    b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain\r\nconnection: close\r\n"
    b"content-length: 35\r\n\r\nrequest headers not received in time"
)

Reason = str  # "refused" | "evicted" | "header_timeout"


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """``header_timeout_s``: from accept (or the end of the last response) to the end of
    the request headers. ``max_connections``: open connections the listener holds."""

    header_timeout_s: float = 5.0
    max_connections: int = 1000


@dataclass
class ConnectionGate:
    """What one listener's connections share: who is still waiting for headers (oldest
    first) and how many were closed, by reason."""

    limits: ConnectionLimits
    on_close: Callable[[Reason], None] | None = None
    closed: dict[Reason, int] = field(default_factory=dict)
    waiting: OrderedDict[BoundedH11Protocol, None] = field(default_factory=OrderedDict)

    def count(self, reason: Reason) -> None:
        self.closed[reason] = self.closed.get(reason, 0) + 1
        if self.on_close is not None:
            self.on_close(reason)

    def evict_oldest_waiting(self) -> bool:
        while self.waiting:
            proto, _ = self.waiting.popitem(last=False)
            if proto.close_waiting("evicted"):
                return True
        return False


class BoundedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the gate's header deadline and connection cap.
    `bounded_protocol` binds a gate (uvicorn builds protocols from a class)."""

    gate: ConnectionGate  # set on the subclass `bounded_protocol` makes

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._header_timer: asyncio.TimerHandle | None = None
        self._partial = False  # request bytes received since the last request began

    # -- waiting for a request's headers

    def _start_waiting(self) -> None:
        self._stop_waiting()
        self._partial = False
        self.gate.waiting[self] = None
        self._header_timer = self.loop.call_later(
            self.gate.limits.header_timeout_s, self._header_timeout
        )

    def _stop_waiting(self) -> None:
        self.gate.waiting.pop(self, None)
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _header_timeout(self) -> None:
        self._header_timer = None
        self.gate.waiting.pop(self, None)
        self.close_waiting("header_timeout")

    def close_waiting(self, reason: Reason) -> bool:
        """Close this connection if it is still waiting for a request (False: it is not)."""
        if self.transport is None or self.transport.is_closing() or self._serving():
            return False
        self._stop_waiting()
        if reason == "header_timeout" and self._partial:
            with contextlib.suppress(Exception):
                self.transport.write(_TIMED_OUT)
            self.transport.close()
        else:
            self.transport.abort()  # nothing to say: free the descriptor now
        self.gate.count(reason)
        return True

    def _serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    # -- uvicorn's protocol hooks

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        full = len(self.connections) > self.gate.limits.max_connections
        if full and not self.gate.evict_oldest_waiting():
            self.connections.discard(self)
            with contextlib.suppress(Exception):
                transport.write(_REFUSED)
            transport.close()
            self.gate.count("refused")
            return
        self._start_waiting()

    def data_received(self, data: bytes) -> None:
        waiting = self in self.gate.waiting
        super().data_received(data)
        if waiting and self._serving():
            self._stop_waiting()  # headers complete: the request is the app's now
        elif waiting:
            self._partial = True

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and not self._serving():
            self._start_waiting()  # keep-alive: the next request has the same deadline
        elif self._serving():
            self._stop_waiting()  # a pipelined request started at once

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_waiting()
        super().connection_lost(exc)


def bounded_protocol(gate: ConnectionGate) -> type[BoundedH11Protocol]:
    """A protocol class bound to ``gate`` (one per listener)."""
    return type("BoundedH11Protocol", (BoundedH11Protocol,), {"gate": gate})


# ----------------------------------------------------------------------------- fds


def raise_fd_limit() -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE to the hard limit (what the process may open without
    privileges); returns (soft, hard) after. Failure leaves the limit as it was."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as err:
            log.warning("could not raise the open-file limit", soft=soft, hard=hard, error=str(err))
    return soft, hard


def connection_cap(wanted: int, fd_limit: int, reserve: int = FD_RESERVE) -> int:
    """The listener's cap: ``wanted``, lowered so that ``reserve`` descriptors stay free
    for the controller's own clients (never below `MIN_CONNECTIONS`)."""
    return max(MIN_CONNECTIONS, min(wanted, fd_limit - reserve))
