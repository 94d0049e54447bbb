"""Read target signals from Prometheus with PromQL (for clusters that already scrape pods).

Queries go through `prometheus_api_client` in worker threads (`asyncio.to_thread`) so the
event loop never blocks on HTTP. Each signal has a query template; ``$selector`` in a
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
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from prometheus_api_client import PrometheusConnect

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


class PrometheusSource:
    """`MetricSource` backed by PromQL; ``selectors`` maps target key -> label selector."""

    def __init__(
        self,
        url: str,
        selectors: Mapping[str, str] | Callable[[str], str],
        queries: Mapping[str, str] = VLLM_QUERIES,
        *,
        timeout_s: float = 5.0,
    ) -> None:
        self.url = url
        self.queries = dict(queries)
        self._selector = selectors if callable(selectors) else selectors.__getitem__
        self._client = PrometheusConnect(url=url, disable_ssl=True)
        self._timeout_s = timeout_s

    def _query(self, promql: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._client.custom_query(
            promql, params={"timeout": f"{int(self._timeout_s * 1000)}ms"}
        )
        return result

    async def _one(self, signal: str, promql: str) -> tuple[str, float | None, str | None]:
        try:
            result = await asyncio.wait_for(
                asyncio.to_thread(self._query, promql), self._timeout_s + 1.0
            )
        except Exception as exc:  # any client/HTTP failure: this signal is unknown
            return signal, None, f"{signal}: {type(exc).__name__}: {exc}"
        values = []
        for series in result:
            try:
                values.append(float(series["value"][1]))
            except (KeyError, IndexError, TypeError, ValueError):
                return signal, None, f"{signal}: unexpected result {series!r:.120}"
        if len(values) != 1:
            # no series: missing; several: the query is not aggregated to one number
            err = None if not values else f"{signal}: {len(values)} series, expected 1"
            return signal, None, err
        value = values[0]
        return signal, (None if math.isnan(value) else value), None

    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        selector = self._selector(key)
        results = await asyncio.gather(
            *(self._one(sig, render(tpl, selector)) for sig, tpl in self.queries.items())
        )
        signals, bad = split_valid({sig: v for sig, v, _ in results if v is not None})
        errors = [e for _, _, e in results if e is not None]
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
        await asyncio.to_thread(self._client._session.close)
