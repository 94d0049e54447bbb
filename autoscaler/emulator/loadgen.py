"""Replays a request trace against emulated (or real) vLLM replicas on this machine.

Arrivals follow the trace at ``speed`` (2.0 = twice as fast); each request asks for the
trace's prompt size (as that many words) and output size (``max_tokens`` with
``ignore_eos``). Requests go round-robin or to the least-outstanding replica, with at
most ``max_concurrency`` in flight (a request over the bound waits, and its send time is
recorded). The run is bounded in request count and time, and only loopback targets are
accepted. Every scheduled request ends up exactly once as ok, failed or not sent.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlsplit

import aiohttp
import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.sim.traces import Trace, iter_requests

Balance = Literal["round-robin", "least-outstanding"]
Api = Literal["completions", "chat"]
Targets = Sequence[str] | Callable[[], Sequence[str]]


def check_loopback(url: str) -> str:
    """Return ``url`` without a trailing slash, or raise if it is not http(s) on loopback."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if parts.scheme not in ("http", "https") or not loopback:
        raise ConfigError(f"target: value {url!r} must be an http URL on 127.0.0.1/localhost")
    return url.rstrip("/")


@dataclass(frozen=True, slots=True)
class RequestResult:
    """One trace request's outcome. Times are real seconds from the start of the run."""

    index: int
    scheduled_s: float
    prompt_tokens: int
    output_tokens: int
    outcome: Literal["ok", "failed", "not-sent", "cancelled"]
    target: str | None = None
    sent_s: float | None = None
    status: int | None = None
    error: str | None = None
    completion_tokens: int = 0
    ttft_s: float | None = None
    latency_s: float | None = None


@dataclass(frozen=True, slots=True)
class LoadReport:
    results: tuple[RequestResult, ...]
    duration_s: float

    def count(self, outcome: str) -> int:
        return sum(1 for r in self.results if r.outcome == outcome)

    @property
    def ok(self) -> int:
        return self.count("ok")

    @property
    def failed(self) -> int:
        return self.count("failed")

    @property
    def not_sent(self) -> int:
        return self.count("not-sent")

    def quantile_s(self, field: Literal["ttft_s", "latency_s"], q: float) -> float | None:
        """Quantile over ok requests; None when there are none (never a made-up zero)."""
        values = [getattr(r, field) for r in self.results if r.outcome == "ok"]
        values = [v for v in values if v is not None]
        return float(np.quantile(values, q)) if values else None

    def per_target(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            if r.target is not None:
                out[r.target] = out.get(r.target, 0) + 1
        return out

    def summary(self) -> dict[str, float | int | None]:
        return {
            "scheduled": len(self.results),
            "ok": self.ok,
            "failed": self.failed,
            "not_sent": self.not_sent,
            "cancelled": self.count("cancelled"),
            "duration_s": self.duration_s,
            "ttft_p50_s": self.quantile_s("ttft_s", 0.5),
            "ttft_p99_s": self.quantile_s("ttft_s", 0.99),
            "latency_p50_s": self.quantile_s("latency_s", 0.5),
            "latency_p99_s": self.quantile_s("latency_s", 0.99),
        }


STOP_POLL_S = 0.25  # how late a `stop` can be noticed while waiting for the next request


async def _acquire_unless(sem: asyncio.Semaphore, stop: asyncio.Event) -> None:
    """Acquire ``sem``, or return without it once ``stop`` is set."""
    acquire = asyncio.ensure_future(sem.acquire())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait({acquire, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not acquire.done():
        acquire.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await acquire
    elif stop.is_set():
        sem.release()


async def _finish(tasks: list[asyncio.Task[None]], stop: asyncio.Event) -> None:
    """Wait for every request; once ``stop`` is set, cut those still in flight."""
    if not tasks:
        return
    stopped: asyncio.Future[Any] = asyncio.ensure_future(stop.wait())
    pending: set[asyncio.Future[Any]] = set(tasks)
    while pending and not stop.is_set():
        _, pending = await asyncio.wait(pending | {stopped}, return_when=asyncio.FIRST_COMPLETED)
        pending.discard(stopped)
    stopped.cancel()
    for t in pending:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def trace_row(trace: Trace, i: int) -> tuple[float, int, int]:
    return (
        float(trace.arrival_s[i]),
        int(trace.prompt_tokens[i]),
        int(trace.output_tokens[i]),
    )


class LoadGenerator:
    """Replays one trace per `run`; reusable. ``targets`` may be a callable returning the
    currently ready base URLs (e.g. ``fleet.ready_urls``), read at every request."""

    def __init__(
        self,
        targets: Targets,
        *,
        speed: float = 1.0,
        balance: Balance = "round-robin",
        max_concurrency: int = 256,
        max_requests: int = 10_000,
        max_duration_s: float = 600.0,
        request_timeout_s: float = 120.0,
        stream: bool = True,
        api: Api = "completions",
        model: str | None = None,
        on_result: Callable[[RequestResult], None] | None = None,
    ) -> None:
        if not speed > 0:
            raise ConfigError(f"speed: value {speed!r} must be > 0")
        if balance not in ("round-robin", "least-outstanding"):
            raise ConfigError(
                f"balance: value {balance!r} must be 'round-robin' or 'least-outstanding'"
            )
        if max_concurrency < 1 or max_requests < 1:
            raise ConfigError(
                f"max_concurrency {max_concurrency} and max_requests {max_requests} must be >= 1"
            )
        if not (0 < max_duration_s <= 86_400) or not request_timeout_s > 0:
            raise ConfigError(
                f"max_duration_s {max_duration_s} must be in (0, 86400] and "
                f"request_timeout_s {request_timeout_s} > 0"
            )
        if api not in ("completions", "chat"):
            raise ConfigError(f"api: value {api!r} must be 'completions' or 'chat'")
        if not callable(targets):
            fixed = [check_loopback(u) for u in targets]
            if not fixed:
                raise ConfigError("targets: must name at least one base URL")
            self._targets: Callable[[], Sequence[str]] = lambda: fixed
        else:
            self._targets = targets
        self.speed = speed
        self.balance: Balance = balance
        self.max_concurrency = max_concurrency
        self.max_requests = max_requests
        self.max_duration_s = max_duration_s
        self.request_timeout_s = request_timeout_s
        self.stream = stream
        self.api: Api = api
        self.model = model
        self.on_result = on_result  # called as each request ends (live views)
        self.outstanding: dict[str, int] = {}
        self._rr = itertools.count()

    def _pick(self) -> str | None:
        urls = [check_loopback(u) for u in self._targets()]
        if not urls:
            return None
        if self.balance == "round-robin":
            return urls[next(self._rr) % len(urls)]
        start = next(self._rr)  # rotate ties so equal replicas share the load
        n = len(urls)
        order = [urls[(start + i) % n] for i in range(n)]
        return min(order, key=lambda u: self.outstanding.get(u, 0))

    async def run(self, trace: Trace, stop: asyncio.Event | None = None) -> LoadReport:
        """Replay ``trace``; setting ``stop`` ends the run early: requests not yet sent are
        ``not-sent``, requests in flight are cut and counted ``cancelled`` (a partial
        report instead of none, e.g. when a demo's time is up)."""
        t0 = time.monotonic()
        stop = stop or asyncio.Event()
        sem = asyncio.Semaphore(self.max_concurrency)
        results: list[RequestResult | None] = []
        tasks: list[asyncio.Task[None]] = []
        timeout = aiohttp.ClientTimeout(total=self.request_timeout_s)
        connector = aiohttp.TCPConnector(limit=self.max_concurrency)
        async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
            for i, (arrival_s, prompt, output) in enumerate(iter_requests(trace)):
                if i >= self.max_requests:
                    break
                scheduled = arrival_s / self.speed
                results.append(None)
                delay = t0 + scheduled - time.monotonic()
                if scheduled > self.max_duration_s:
                    results[i] = RequestResult(i, scheduled, prompt, output, "not-sent")
                    continue
                while delay > 0 and not stop.is_set():  # short sleeps: no task per request
                    await asyncio.sleep(min(delay, STOP_POLL_S))
                    delay = t0 + scheduled - time.monotonic()
                if not stop.is_set():
                    if sem.locked():
                        await _acquire_unless(sem, stop)
                    else:
                        await sem.acquire()  # the common case, without extra futures
                if stop.is_set() or time.monotonic() - t0 > self.max_duration_s:
                    sem.release()
                    results[i] = RequestResult(i, scheduled, prompt, output, "not-sent")
                    continue
                tasks.append(
                    asyncio.create_task(
                        self._one(session, sem, results, t0, i, scheduled, prompt, output)
                    )
                )
            await _finish(tasks, stop)
        for i, r in enumerate(results):  # cut by `stop` while in flight
            if r is None:
                arrival_s, prompt, output = trace_row(trace, i)
                results[i] = RequestResult(i, arrival_s / self.speed, prompt, output, "cancelled")
        final = tuple(r for r in results if r is not None)
        return LoadReport(final, time.monotonic() - t0)

    async def _one(
        self,
        session: aiohttp.ClientSession,
        sem: asyncio.Semaphore,
        results: list[RequestResult | None],
        t0: float,
        i: int,
        scheduled: float,
        prompt: int,
        output: int,
    ) -> None:
        sent = time.monotonic() - t0
        target: str | None = None
        try:
            target = self._pick()
            if target is None:
                results[i] = RequestResult(
                    i, scheduled, prompt, output, "failed", sent_s=sent, error="no ready target"
                )
                return
            self.outstanding[target] = self.outstanding.get(target, 0) + 1
            try:
                results[i] = await self._send(session, target, t0, i, scheduled, prompt, output)
            finally:
                self.outstanding[target] -= 1
        except (aiohttp.ClientError, TimeoutError, ConfigError, ValueError) as err:
            results[i] = RequestResult(
                i,
                scheduled,
                prompt,
                output,
                "failed",
                target=target,
                sent_s=sent,
                error=f"{type(err).__name__}: {err}",
            )
        finally:
            sem.release()
        result = results[i]
        if self.on_result is not None and result is not None:
            self.on_result(result)

    def _body(self, prompt: int, output: int) -> dict[str, object]:
        text = "w " * prompt
        body: dict[str, object] = {"max_tokens": output, "ignore_eos": True, "stream": self.stream}
        if self.api == "chat":
            # The emulator counts 4 template tokens per message; keep the prompt size.
            body["messages"] = [{"role": "user", "content": "w " * max(1, prompt - 4)}]
        else:
            body["prompt"] = text
        if self.model is not None:
            body["model"] = self.model
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        return body

    async def _send(
        self,
        session: aiohttp.ClientSession,
        target: str,
        t0: float,
        i: int,
        scheduled: float,
        prompt: int,
        output: int,
    ) -> RequestResult:
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        start = time.monotonic()
        sent = start - t0
        ttft: float | None = None
        tokens = 0
        done = False
        async with session.post(target + path, json=self._body(prompt, output)) as resp:
            if resp.status != 200:
                text = (await resp.text())[:200]
                return RequestResult(
                    i, scheduled, prompt, output, "failed", target, sent, resp.status, text
                )
            if not self.stream:
                data = await resp.json()
                latency = time.monotonic() - start
                tokens = int(data["usage"]["completion_tokens"])
                return RequestResult(
                    i,
                    scheduled,
                    prompt,
                    output,
                    "ok",
                    target,
                    sent,
                    200,
                    completion_tokens=tokens,
                    latency_s=latency,
                )
            error: str | None = None
            async for raw in resp.content:
                line = raw.strip()
                if not line.startswith(b"data: "):
                    continue
                payload = line[6:]
                if payload == b"[DONE]":
                    done = True
                    break
                event = json.loads(payload)
                if "error" in event:
                    error = str(event["error"].get("message", "stream error"))
                    continue
                for choice in event.get("choices", ()):
                    piece = choice.get("text")
                    if piece is None:
                        piece = choice.get("delta", {}).get("content")
                    if piece:
                        tokens += 1
                        if ttft is None:
                            ttft = time.monotonic() - start
        latency = time.monotonic() - start
        if not done or error is not None:
            return RequestResult(
                i,
                scheduled,
                prompt,
                output,
                "failed",
                target,
                sent,
                200,
                error or "stream ended without [DONE]",
                completion_tokens=tokens,
                ttft_s=ttft,
                latency_s=latency,
            )
        return RequestResult(
            i,
            scheduled,
            prompt,
            output,
            "ok",
            target,
            sent,
            200,
            completion_tokens=tokens,
            ttft_s=ttft,
            latency_s=latency,
        )
