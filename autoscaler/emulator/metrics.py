"""The emulator's /metrics page: vLLM's metric names, types, labels and buckets.

V1 naming (default) follows ``vllm/v1/metrics/loggers.py``: labels ``model_name`` and
``engine``, ``vllm:kv_cache_usage_perc``, ``vllm:inter_token_latency_seconds``. The V0
option renders what vLLM V0 exposed: label ``model_name`` only,
``vllm:gpu_cache_usage_perc`` and ``vllm:time_per_output_token_seconds``, so both engine
adapters of the controller can be tested against it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from autoscaler.emulator.engine import FINISH_REASONS, EmulatedEngine, Histogram
from autoscaler.sim.replica import ITL_BUCKETS_S, TTFT_BUCKETS_S

Naming = Literal["v1", "v0"]
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _fmt(bound: float) -> str:
    return repr(float(bound))


def _cumulative(bounds: Sequence[float], counts: Sequence[int]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    acc = 0
    for bound, count in zip(bounds, counts, strict=False):
        acc += count
        out.append((_fmt(bound), float(acc)))
    acc += counts[len(bounds)]
    out.append(("+Inf", float(acc)))
    return out


class VllmCollector(Collector):
    """Reads the engine on every scrape (no background bookkeeping)."""

    def __init__(self, engine: EmulatedEngine, model_name: str, naming: Naming = "v1") -> None:
        self.engine = engine
        self.model_name = model_name
        self.naming: Naming = naming

    def _labels(self) -> tuple[list[str], list[str]]:
        if self.naming == "v0":
            return ["model_name"], [self.model_name]
        return ["model_name", "engine"], [self.model_name, "0"]

    def _hist(
        self, name: str, doc: str, bounds: Sequence[float], counts: Sequence[int], total: float
    ) -> HistogramMetricFamily:
        names, values = self._labels()
        fam = HistogramMetricFamily(name, doc, labels=names)
        fam.add_metric(values, _cumulative(bounds, counts), total)
        return fam

    def _from(self, name: str, doc: str, h: Histogram) -> HistogramMetricFamily:
        return self._hist(name, doc, h.bounds, h.counts, h.total)

    def collect(self) -> Iterator[Metric]:
        m = self.engine.replica.metrics()
        c = self.engine.counters
        names, values = self._labels()
        v0 = self.naming == "v0"

        def gauge(name: str, doc: str, value: float) -> GaugeMetricFamily:
            fam = GaugeMetricFamily(name, doc, labels=names)
            fam.add_metric(values, value)
            return fam

        def counter(name: str, doc: str, value: float) -> CounterMetricFamily:
            fam = CounterMetricFamily(name, doc, labels=names)
            fam.add_metric(values, value)
            return fam

        yield gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            m.num_requests_running,
        )
        yield gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            m.num_requests_waiting,
        )
        if v0:
            yield gauge("vllm:num_requests_swapped", "Number of requests swapped to CPU.", 0)
            yield gauge(
                "vllm:gpu_cache_usage_perc",
                "GPU KV-cache usage. 1 means 100 percent usage.",
                m.kv_cache_usage_perc,
            )
        else:
            yield gauge(
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                m.kv_cache_usage_perc,
            )
        yield counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            m.num_preemptions_total,
        )
        yield counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", m.prompt_tokens_total
        )
        yield counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            m.generation_tokens_total,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*names, "finished_reason"],
        )
        for reason in FINISH_REASONS:
            success.add_metric([*values, reason], c.finished[reason])
        yield success
        yield self._from(
            "vllm:request_prompt_tokens", "Number of prefill tokens processed.", c.prompt_tokens
        )
        yield self._from(
            "vllm:request_generation_tokens",
            "Number of generation tokens processed.",
            c.generation_tokens,
        )
        yield self._hist(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            TTFT_BUCKETS_S,
            m.ttft_bucket_counts,
            m.ttft_sum_s,
        )
        if v0:
            yield self._hist(
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                ITL_BUCKETS_S,
                m.itl_bucket_counts,
                m.itl_sum_s,
            )
        else:
            yield self._hist(
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                ITL_BUCKETS_S,
                m.itl_bucket_counts,
                m.itl_sum_s,
            )
        yield self._from(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            c.e2e,
        )
        yield self._from(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            c.queue,
        )
        yield self._from(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            c.inference,
        )
        yield self._from(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            c.prefill,
        )
        yield self._from(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            c.decode,
        )


class MetricsPage:
    """A replica's own registry (never the global one), rendered on demand."""

    def __init__(self, engine: EmulatedEngine, model_name: str, naming: Naming = "v1") -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(VllmCollector(engine, model_name, naming))

    def render(self) -> bytes:
        return generate_latest(self.registry)
