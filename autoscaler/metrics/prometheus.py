"""Read target signals from Prometheus with PromQL (for clusters that already scrape pods).

Queries go to Prometheus' HTTP API (``POST /api/v1/query``) over one shared aiohttp
session whose timeout bounds every call (``timeout_s``, sent to Prometheus too, plus one
second on our side), with at most ``max_concurrency`` queries in flight and answers
read up to ``max_answer_bytes``: a hanging or slow Prometheus costs a tick its signals,
never a thread or the event loop. Each signal has a query template; ``$selector`` in a
template is replaced by the target's label selector (e.g. ``namespace="llm",pod=~"vllm-.*"``),
and a query without ``$selector`` is sent as written, so queries copied from a KEDA
ScaledObject work unchanged, e.g. ``sum(vllm:num_requests_waiting{deployment="x"})``.

An empty result or NaN leaves the signal absent (missing data, never 0); a failed query
is reported in ``errors``; an answer out of range (``+Inf``, a negative count) is dropped,
counted in ``rejected`` and makes the target unread this tick (``pods_read`` 0).
Prometheus reads the target as a whole, so ``pods_read`` is the number of pods given
when at least one query answered, else 0.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import yarl

from autoscaler.errors import AutoscalerError
from autoscaler.metrics.signals import split_valid
from autoscaler.metrics.source import PodEndpoint, TargetReading


def _quantile(q: float, family: str, window: str = "1m") -> str:
    return f"histogram_quantile({q}, sum by (le) (rate({family}_bucket{{$selector}}[{window}])))"


_KV: Final = "(vllm:kv_cache_usage_perc{$selector} or vllm:gpu_cache_usage_perc{$selector})"
VLLM_QUERIES: Final[Mapping[str, str]] = {
    "waiting": "sum(vllm:num_requests_waiting{$selector})",
    "running": "sum(vllm:num_requests_running{$selector})",
    # `or` keeps the new name where both exist (same labels): never double counted.
    "kv_cache_usage": f"avg({_KV})",
    "kv_cache_usage_max": f"max({_KV})",
    "ttft_p50_s": _quantile(0.5, "vllm:time_to_first_token_seconds"),
    "ttft_p95_s": _quantile(0.95, "vllm:time_to_first_token_seconds"),
    "ttft_p99_s": _quantile(0.99, "vllm:time_to_first_token_seconds"),
    "itl_p95_s": _quantile(0.95, "vllm:inter_token_latency_seconds")
    + " or "
    + _quantile(0.95, "vllm:time_per_output_token_seconds"),
    "arrival_rate_per_s": "sum(rate(vllm:time_to_first_token_seconds_count{$selector}[1m]))",
    "prompt_tokens_per_s": "sum(rate(vllm:prompt_tokens_total{$selector}[1m]))",
    "generation_tokens_per_s": "sum(rate(vllm:generation_tokens_total{$selector}[1m]))",
    "preemptions_per_s": "sum(rate(vllm:num_preemptions_total{$selector}[1m]))",
}


def render(template: str, selector: str) -> str:
    """Substitute ``$selector`` (PromQL braces make `str.format` unusable)."""
    return template.replace("$selector", selector)


@dataclass(frozen=True, slots=True)
class _Answer:
    signal: str
    value: float | None = None
    error: str | None = None


def _value(signal: str, doc: Any) -> _Answer:
    """One number from a query answer: a one-series vector or a scalar; no series is
    missing data; several series mean the query is not aggregated (an error)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    try:
        if kind == "scalar" and isinstance(result, list):
            values = [float(result[1])]
        elif kind == "vector" and isinstance(result, list):
            values = [float(series["value"][1]) for series in result]
        else:
            return _Answer(signal, error=f"{signal}: unexpected answer {doc!r:.120}")
    except (KeyError, IndexError, TypeError, ValueError):
        return _Answer(signal, error=f"{signal}: unexpected result {result!r:.120}")
    if len(values) != 1:
        err = None if not values else f"{signal}: {len(values)} series, expected 1"
        return _Answer(signal, error=err)
    return _Answer(signal, None if math.isnan(values[0]) else values[0])


class PrometheusSource:
    """`MetricSource` backed by PromQL; ``selectors`` maps target key -> label selector.
    Create and use it inside a running event loop (the session is made on first use)."""

    def __init__(
        self,
        url: str,
        selectors: Mapping[str, str] | Callable[[str], str],
        queries: Mapping[str, str] = VLLM_QUERIES,
        *,
        timeout_s: float = 5.0,
        max_concurrency: int = 32,
        max_answer_bytes: int = 1024 * 1024,
    ) -> None:
        if not timeout_s > 0 or max_concurrency < 1:
            raise ValueError(f"timeout_s={timeout_s} must be > 0, max_concurrency >= 1")
        self.url = url
        self.queries = dict(queries)
        self._selector = selectors if callable(selectors) else selectors.__getitem__
        self._endpoint = yarl.URL(url.rstrip("/") + "/api/v1/query")
        self._timeout_s = timeout_s
        self._max_concurrency = max_concurrency
        self._max_answer_bytes = max_answer_bytes
        # Prometheus is told timeout_s; up to one more second covers the network.
        self._total_s = timeout_s + min(timeout_s, 1.0)
        self._semaphore: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._semaphore = asyncio.Semaphore(self._max_concurrency)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_concurrency),
                timeout=aiohttp.ClientTimeout(total=self._total_s),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    async def _post(self, promql: str) -> Any:
        session = self._client()
        assert self._semaphore is not None
        form = {"query": promql, "timeout": f"{int(self._timeout_s * 1000)}ms"}
        async with self._semaphore, session.post(self._endpoint, data=form) as resp:
            limit = self._max_answer_bytes
            if resp.content_length is not None and resp.content_length > limit:
                raise AutoscalerError(f"answer larger than {limit} bytes")
            body = bytearray()
            while chunk := await resp.content.readany():
                body += chunk
                if len(body) > limit:
                    raise AutoscalerError(f"answer larger than {limit} bytes")
            try:
                doc = json.loads(body)
            except ValueError:
                head = bytes(body[:120])
                raise AutoscalerError(f"HTTP {resp.status}: not JSON: {head!r}") from None
            ok = isinstance(doc, dict) and doc.get("status") == "success"
            if resp.status != 200 or not ok:
                detail = doc.get("error", doc) if isinstance(doc, dict) else doc
                raise AutoscalerError(f"HTTP {resp.status}: {detail!r:.200}")
            return doc

    async def _one(self, signal: str, promql: str) -> _Answer:
        try:
            doc = await self._post(promql)
        except TimeoutError:
            return _Answer(signal, error=f"{signal}: timeout after {self._total_s:g}s")
        except (aiohttp.ClientError, AutoscalerError, OSError) as exc:
            return _Answer(signal, error=f"{signal}: {type(exc).__name__}: {exc}")
        return _value(signal, doc)

    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        selector = self._selector(key)
        results = await asyncio.gather(
            *(self._one(sig, render(tpl, selector)) for sig, tpl in self.queries.items())
        )
        signals, bad = split_valid({a.signal: a.value for a in results if a.value is not None})
        errors = [a.error for a in results if a.error is not None]
        answered = len(errors) < len(results)
        rejected: dict[str, int] = {}
        for v in bad:
            errors.append(f"rejected {v}")
            rejected[v.reason] = rejected.get(v.reason, 0) + 1
        # An answer out of range means some pod reported one: which pod Prometheus does
        # not say, so the whole target counts as unread (scale up allowed, never down).
        return TargetReading(
            t=now,
            signals=signals,
            pods_read=len(pods) if answered and not bad else 0,
            pods_expected=len(pods),
            errors=tuple(errors),
            rejected=rejected,
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
