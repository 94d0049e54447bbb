"""Retries for Kubernetes API calls: 429/5xx/timeouts/connection errors, with exponential
backoff and full jitter (sleep and random are injectable so tests never sleep).

409 is never retried here: a conflict means our read is stale and the caller must re-read
and re-decide. Other 4xx are permanent and re-raised as the original `ApiException`.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.errors import TemporaryError

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
Random = Callable[[], float]
RETRYABLE_STATUS = frozenset({429, 500, 502, 503, 504})


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 5
    base_delay_s: float = 0.2
    max_delay_s: float = 5.0
    request_timeout_s: float = 10.0


def backoff_s(attempt: int, policy: RetryPolicy, rand: Random) -> float:
    """Full jitter: uniform in [0, min(max, base * 2**attempt)] (AWS architecture blog)."""
    return float(rand()) * min(policy.max_delay_s, policy.base_delay_s * (2.0**attempt))


def retry_after_s(err: ApiException) -> float | None:
    headers = getattr(err, "headers", None) or {}
    value = headers.get("Retry-After") if hasattr(headers, "get") else None
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def is_retryable(err: BaseException) -> bool:
    if isinstance(err, ApiException):
        return err.status in RETRYABLE_STATUS
    return isinstance(err, TimeoutError | aiohttp.ClientError)


def is_ambiguous(err: BaseException) -> bool:
    """The request may have been applied although we saw an error (5xx, timeout, reset)."""
    if isinstance(err, ApiException):
        return err.status >= 500
    return isinstance(err, TimeoutError | aiohttp.ClientError)


def describe(err: BaseException) -> str:
    if isinstance(err, ApiException):
        return f"HTTP {err.status} {err.reason}"
    return f"{type(err).__name__}: {err}" if str(err) else type(err).__name__


async def with_retries(
    op: Callable[[], Awaitable[T]],
    *,
    what: str,
    policy: RetryPolicy,
    sleep: Sleep = asyncio.sleep,
    rand: Random = random.random,
    on_retry: Callable[[BaseException], None] | None = None,
    exhausted: type[TemporaryError] = TemporaryError,
) -> T:
    """Run ``op`` until it succeeds, a non-retryable error is raised, or attempts run out
    (then ``exhausted`` is raised, naming the operation and the last error)."""
    last: BaseException | None = None
    for attempt in range(policy.attempts):
        try:
            return await op()
        except (ApiException, TimeoutError, aiohttp.ClientError) as err:
            if not is_retryable(err):
                raise
            last = err
            if on_retry is not None:
                on_retry(err)
            if attempt + 1 < policy.attempts:
                delay = backoff_s(attempt, policy, rand)
                hint = retry_after_s(err) if isinstance(err, ApiException) else None
                await sleep(max(delay, min(hint, policy.max_delay_s)) if hint else delay)
    assert last is not None
    raise exhausted(f"{what}: gave up after {policy.attempts} attempts: {describe(last)}")


async def read_json(resp: Any) -> Any:
    """Body of a ``_preload_content=False`` response, raising `ApiException` on non-2xx
    (the client only checks the status when it preloads)."""
    status = int(resp.status)
    if not 200 <= status <= 299:
        err = ApiException(status=status, reason=str(resp.reason))
        err.body = await resp.text()
        err.headers = resp.headers
        resp.release()
        raise err
    return json.loads(await resp.read())
