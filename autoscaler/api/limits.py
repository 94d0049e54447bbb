"""Request limits: body size (413 before the body is read) and the dry-run's admission.

Why here and not in a proxy: the API shares its event loop with the control loop, so an
unbounded body, or a flood of replays of the decision core, slows every target's tick.
Each limit answers with a status the client can act on (413, 429 + ``Retry-After``) and
never reads or computes more than the limit first.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import math
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Final, TypeVar

from starlette.exceptions import HTTPException as StarletteHTTPException

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

DEFAULT_MAX_BODY_BYTES: Final = 1_048_576
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class DryRunLimits:
    """How much replaying a candidate policy may cost. ``None`` disables a limit (used by
    the benchmark to measure the unlimited baseline side by side)."""

    rate_per_s: float | None = 0.5  # token refill per client
    burst: int = 3  # bucket size: dry-runs a client may send back to back
    concurrency: int | None = 1  # replays running at once, process-wide
    max_waiting: int = 8  # replays queued behind them before answering 429
    max_ticks: int = 600  # observations replayed at most (the loop keeps 600)
    cpu_budget_s: float | None = 0.5  # thread CPU time one replay may use
    yield_gil: bool = True  # release the GIL after every tick so the event loop gets it

    @classmethod
    def unlimited(cls) -> DryRunLimits:
        return cls(
            rate_per_s=None,
            concurrency=None,
            max_ticks=1 << 30,
            cpu_budget_s=None,
            yield_gil=False,
        )


class TooManyRequests(StarletteHTTPException):
    """429 with ``Retry-After`` in whole seconds (RFC 9110 delay-seconds)."""

    def __init__(self, detail: str, retry_after_s: float) -> None:
        seconds = max(1, math.ceil(retry_after_s))
        super().__init__(429, f"{detail}; retry after {seconds} s", {"Retry-After": str(seconds)})


def _too_large(limit: int, what: str) -> StarletteHTTPException:
    return StarletteHTTPException(
        413,
        f"request body {what} exceeds the limit of {limit} bytes (AUTOSCALER_API_MAX_BODY_BYTES)",
        {"Connection": "close"},
    )


class BodyLimitMiddleware:
    """Pure ASGI. A declared ``Content-Length`` above the limit is answered 413 before any
    body byte is read; a chunked body is counted as it streams and stopped at the limit.

    Lingering close: a server that closes with request bytes unread makes the kernel send
    a reset, and a client still uploading (httpx, curl) then loses the 413 it was sent.
    So once the 413 is on the wire (complete by its Content-Length), the rest of the body
    is read and discarded, up to `DRAIN_FACTOR` x the limit and `DRAIN_TIMEOUT_S`; a
    declared body beyond that is not drained at all (its client gets the reset)."""

    DRAIN_FACTOR: Final = 4
    DRAIN_TIMEOUT_S: Final = 5.0

    def __init__(self, app: Any, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.max_body_bytes
        drain_bytes = self.DRAIN_FACTOR * limit
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            err = _too_large(limit, f"of {declared} bytes (Content-Length)")
            drain_from = receive if declared <= drain_bytes else None
            await _send_error(send, err, drain_from, drain_bytes)
            return
        received = 0
        over_limit = False
        started = False

        async def counted_receive() -> Message:
            nonlocal received, over_limit
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    over_limit = True
                    raise _too_large(limit, f"(more than {limit} bytes streamed)")
            return message

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            last = message["type"] == "http.response.body" and not message.get("more_body")
            if over_limit and last:
                # The app answered the 413: send it whole, then drain what is still coming.
                await send({**message, "more_body": True})
                await _drain(receive, drain_bytes - received, self.DRAIN_TIMEOUT_S)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await send(message)

        try:
            await self.app(scope, counted_receive, tracking_send)
        except StarletteHTTPException as err:
            # Raised from receive outside a route's exception handling (e.g. a middleware).
            if err.status_code != 413 or started:
                raise
            await _send_error(send, err, receive, drain_bytes - received)


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            with contextlib.suppress(ValueError):
                return int(value)
    return None


async def _drain(receive: Receive, max_bytes: int, timeout_s: float) -> None:
    """Read and discard the request body until it ends, ``max_bytes`` or ``timeout_s``."""

    async def read() -> None:
        drained = 0
        while drained <= max_bytes:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client went away
            drained += len(message.get("body", b""))
            if not message.get("more_body", False):
                return

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(read(), timeout_s)


async def _send_error(
    send: Send,
    err: StarletteHTTPException,
    drain_from: Receive | None = None,
    drain_bytes: int = 0,
) -> None:
    body = json.dumps({"detail": err.detail}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    headers += [(k.lower().encode(), v.encode()) for k, v in (err.headers or {}).items()]
    await send({"type": "http.response.start", "status": err.status_code, "headers": headers})
    if drain_from is None:
        await send({"type": "http.response.body", "body": body})
        return
    await send({"type": "http.response.body", "body": body, "more_body": True})
    await _drain(drain_from, drain_bytes, BodyLimitMiddleware.DRAIN_TIMEOUT_S)
    await send({"type": "http.response.body", "body": b"", "more_body": False})


class TokenBuckets:
    """One token bucket per client key, at most ``max_clients`` remembered (least recently
    seen forgotten first, so memory stays bounded whatever the number of clients)."""

    def __init__(
        self,
        rate_per_s: float,
        burst: int,
        clock: Callable[[], float],
        *,
        max_clients: int = 4096,
    ) -> None:
        self.rate_per_s = rate_per_s
        self.burst = burst
        self._clock = clock
        self._max_clients = max_clients
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def take(self, key: str) -> float:
        """Take one token: 0.0 when granted, else the seconds until one is available."""
        now = self._clock()
        tokens, at = self._buckets.pop(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + max(0.0, now - at) * self.rate_per_s)
        wait_s = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait_s = (1.0 - tokens) / self.rate_per_s
        self._buckets[key] = (tokens, now)
        while len(self._buckets) > self._max_clients:
            self._buckets.popitem(last=False)
        return wait_s

    def __len__(self) -> int:
        return len(self._buckets)


class DryRunGate:
    """Admission for dry-runs: the per-client bucket, then a process-wide concurrency cap
    with a short queue (beyond it 429 rather than an unbounded pile of waiting replays)."""

    def __init__(self, limits: DryRunLimits, clock: Callable[[], float]) -> None:
        self.limits = limits
        self.buckets = (
            TokenBuckets(limits.rate_per_s, limits.burst, clock)
            if limits.rate_per_s is not None
            else None
        )
        self._slots = asyncio.Semaphore(limits.concurrency) if limits.concurrency else None
        self._waiting = 0

    def admit(self, client_key: str) -> None:
        if self.buckets is None:
            return
        wait_s = self.buckets.take(client_key)
        if wait_s > 0:
            raise TooManyRequests(
                f"dry-run rate limit: {self.limits.burst} at once, then "
                f"{self.limits.rate_per_s:g} per second per client",
                wait_s,
            )

    async def run_in_thread(self, func: Callable[..., T], *args: Any) -> T:
        """Run ``func`` in a worker thread inside a slot. The slot is held until the thread
        ends even if the request is cancelled, or a client that disconnects mid-replay
        would free its slot while its replay still runs."""
        async with self.slot():
            work = asyncio.ensure_future(asyncio.to_thread(func, *args))
            try:
                return await asyncio.shield(work)
            except asyncio.CancelledError:
                await asyncio.wait({work})
                raise

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        if self._slots is None:
            yield
            return
        if self._slots.locked() and self._waiting >= self.limits.max_waiting:
            raise TooManyRequests("dry-run: too many replays queued", 1.0)
        self._waiting += 1
        try:
            await self._slots.acquire()
        finally:
            self._waiting -= 1
        try:
            yield
        finally:
            self._slots.release()


def client_key(host: str | None, token: str | None) -> str:
    """Who a dry-run is charged to: the verified token when reads need one (so clients
    behind one proxy are told apart), else the client address. A token that was not
    verified is ignored, or rotating made-up tokens would get fresh buckets."""
    if token is not None:
        return "token:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    return f"addr:{host or 'unknown'}"
