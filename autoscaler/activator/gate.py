"""One target's gate: its ready endpoints, the requests in flight on each, and the bounded
FIFO of requests held while no endpoint can take them.

A request asks the gate for an endpoint (`acquire`). With a ready endpoint below its
per-replica concurrency and nobody queued ahead, it gets the least-loaded one at once;
otherwise it is held in arrival order, up to the cap (`HoldFull`: 429), for at most the
hold timeout (`HoldTimeout`: 503 naming the target and the wait). A held request whose
client goes away (its task cancelled) leaves the queue at once and frees its place. When
endpoints turn Ready or a request finishes (`release`), held requests are handed out in
arrival order to the least-loaded endpoints. `close` answers every held request with a
retryable `ShuttingDown` (503 + Retry-After) instead of leaving it hanging.

Cancelled waiters leave the deque lazily (skipped when dispatched; the deque is compacted
when they pile up), so a disconnect costs O(1) and the count stays exact.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field


class Rejected(Exception):
    """A request the activator answers itself: HTTP ``status`` with ``retry_after_s``."""

    status = 503

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class HoldFull(Rejected):
    status = 429


class HoldTimeout(Rejected):
    status = 503


class ShuttingDown(Rejected):
    status = 503


@dataclass(slots=True, eq=False)
class _Waiter:
    future: asyncio.Future[str]
    t0: float
    queued: bool = True


@dataclass
class GateStats:
    held: int = 0
    in_flight: int = 0
    forwarded_after_hold: int = 0
    rejected_full: int = 0
    timed_out: int = 0
    abandoned: int = 0  # clients that left while held
    shed_on_shutdown: int = 0


@dataclass
class Gate:
    """See the module docstring. ``on_change`` is called when the held count changes or
    the in-flight count goes between zero and non-zero (what the controller must know)."""

    name: str
    cap: int
    timeout_s: float
    max_per_replica: int
    retry_after_s: int = 5
    on_change: Callable[[Gate], None] | None = None
    clock: Callable[[], float] = time.monotonic
    stats: GateStats = field(default_factory=GateStats)
    _ready: list[str] = field(default_factory=list)
    _load: dict[str, int] = field(default_factory=dict)  # endpoint -> requests in flight
    _suspect: dict[str, float] = field(default_factory=dict)  # endpoint -> skip until t
    _queue: deque[_Waiter] = field(default_factory=deque)
    _closed: bool = False
    _rr: int = 0

    # ------------------------------------------------------------------ reading
    @property
    def held(self) -> int:
        return self.stats.held

    @property
    def in_flight(self) -> int:
        return self.stats.in_flight

    @property
    def ready(self) -> tuple[str, ...]:
        return tuple(self._ready)

    # ------------------------------------------------------------------ endpoints
    def set_endpoints(self, ready: Iterable[str]) -> None:
        """The target's Ready endpoints now (from EndpointSlices or probes)."""
        self._ready = sorted(set(ready))
        for ep in [e for e in self._suspect if e not in self._ready]:
            del self._suspect[ep]
        self._dispatch()

    def suspect(self, endpoint: str, for_s: float = 1.0) -> None:
        """An endpoint refused a connection: skip it for ``for_s`` (it may be going away
        before its EndpointSlice says so); the request is held again, never a 502."""
        self._suspect[endpoint] = self.clock() + for_s

    # ------------------------------------------------------------------ acquire/release
    def _pick(self) -> str | None:
        best, best_load = None, self.max_per_replica
        n = len(self._ready)
        now = None
        for i in range(n):
            ep = self._ready[(self._rr + i) % n]
            load = self._load.get(ep, 0)
            if load < best_load:
                if self._suspect:
                    now = self.clock() if now is None else now
                    if self._suspect.get(ep, 0.0) > now:
                        continue
                best, best_load = ep, load
                if load == 0:
                    break
        if best is not None:
            self._rr = (self._rr + 1) % max(n, 1)
        return best

    def _take(self, ep: str) -> None:
        self._load[ep] = self._load.get(ep, 0) + 1
        self.stats.in_flight += 1
        if self.stats.in_flight == 1:
            self._changed()

    def release(self, ep: str) -> None:
        """A forwarded request finished (answered, failed or abandoned)."""
        left = self._load.get(ep, 0) - 1
        if left > 0:
            self._load[ep] = left
        else:
            self._load.pop(ep, None)
        self.stats.in_flight -= 1
        if self.stats.in_flight == 0:
            self._changed()
        self._dispatch()

    async def acquire(self) -> tuple[str, float]:
        """An endpoint for one request, and how long it was held (seconds)."""
        if self._closed:
            raise ShuttingDown(
                f"the activator is shutting down; retry target {self.name}", self.retry_after_s
            )
        if self.stats.held == 0:
            ep = self._pick()
            if ep is not None:
                self._take(ep)
                return ep, 0.0
        if self.stats.held >= self.cap:
            self.stats.rejected_full += 1
            raise HoldFull(
                f"target {self.name}: {self.stats.held} requests already held "
                f"(cap {self.cap}) while no replica is ready; retry later",
                self.retry_after_s,
            )
        waiter = _Waiter(asyncio.get_running_loop().create_future(), self.clock())
        self._queue.append(waiter)
        self.stats.held += 1
        self._changed()
        try:
            async with asyncio.timeout(self.timeout_s):
                ep = await waiter.future
            return ep, self.clock() - waiter.t0
        except TimeoutError:
            if waiter.future.done() and not waiter.future.cancelled():
                return waiter.future.result(), self.clock() - waiter.t0  # won the race
            self.stats.timed_out += 1
            waited = self.clock() - waiter.t0
            raise HoldTimeout(
                f"target {self.name}: no replica became ready within the hold timeout "
                f"({waited:.1f} s waited, timeout {self.timeout_s:g} s)",
                self.retry_after_s,
            ) from None
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                if waiter.future.exception() is None:  # dispatched as the client left
                    self.release(waiter.future.result())
            elif waiter.queued:
                self.stats.abandoned += 1
            raise
        finally:
            if waiter.queued:  # timed out, cancelled or shut down: leave the queue
                waiter.queued = False
                if not waiter.future.done():
                    waiter.future.cancel()
                self.stats.held -= 1
                self._changed()
                self._compact()

    def _dispatch(self) -> None:
        queue = self._queue
        dispatched = False
        while queue:
            head = queue[0]
            if not head.queued or head.future.done():
                queue.popleft()
                continue
            ep = self._pick()
            if ep is None:
                break
            queue.popleft()
            head.queued = False
            self.stats.held -= 1
            self.stats.forwarded_after_hold += 1
            self._take(ep)
            head.future.set_result(ep)
            dispatched = True
        if dispatched:
            self._changed()

    def _compact(self) -> None:
        if len(self._queue) > 2 * self.stats.held + 64:
            self._queue = deque(w for w in self._queue if w.queued)

    def close(self) -> None:
        """Shutdown: every held request gets a retryable 503 now; new ones too."""
        self._closed = True
        for waiter in self._queue:
            if waiter.queued and not waiter.future.done():
                self.stats.shed_on_shutdown += 1
                waiter.future.set_exception(
                    ShuttingDown(
                        f"the activator is restarting; target {self.name} held this request "
                        f"{self.clock() - waiter.t0:.1f} s; retry",
                        self.retry_after_s,
                    )
                )

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change(self)
