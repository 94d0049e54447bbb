"""Learn what one replica sustains while the latency SLO holds.

Per tick, per-replica load (tokens/s, concurrent sequences, requests/s) is recorded as
*sustained* when the TTFT quantile stays under the SLO and as *violating* otherwise.
The learned capacity per signal is a high quantile of sustained load, raised above the
configured threshold only by evidence, and lowered below it only by violations: learning
from a lightly loaded fleet alone would read "never saw more" as "cannot do more", ask
for more replicas, see even less load per replica, and spiral into over-provisioning.

Latency is evidence about capacity only when requests queue. TTFT is queueing plus the
request's own prefill: a single 8k-token prompt on an idle replica can take most of the
SLO, and more replicas would not make it faster. So a tick whose latency is near or over
the SLO counts only when the queue signal (``waiting``) shows queued requests; without
that reading (missing, never zero) the tick counts as before.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from autoscaler.forecast.robust import check_finite, check_positive

DEFAULT_CAPACITY_SIGNALS: tuple[str, ...] = (
    "generation_tokens_per_s",
    "prompt_tokens_per_s",
    "running",
    "arrival_rate_per_s",
)


def _frozen(m: Mapping[str, float]) -> Mapping[str, float]:
    return MappingProxyType(dict(m))


@dataclass(frozen=True, slots=True)
class CapacityEstimator:
    """Per-replica capacity per signal; ``fallback`` holds the configured thresholds."""

    fallback: Mapping[str, float] = field(default_factory=dict)
    slo_s: float = 0.5
    latency_signal: str = "ttft_p95_s"
    quantile: float = 0.9
    violation_quantile: float = 0.5
    window: int = 600
    min_samples: int = 30
    min_load_fraction: float = 0.5  # only near-capacity ticks count as evidence
    near_slo_fraction: float = 0.5  # ... or ticks whose latency is close to the SLO
    queue_signal: str = "waiting"
    min_queue: float = 1.0  # queued requests (all pods) for latency to count as load
    sustained: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    violating: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    last_t: float | None = None

    def __post_init__(self) -> None:
        check_positive("slo_s", self.slo_s)
        for name, value in self.fallback.items():
            check_positive(f"fallback[{name}]", value)
        if not 0 < self.quantile <= 1:
            raise ValueError(f"quantile: value {self.quantile} must be in (0, 1]")
        if not 0 < self.violation_quantile <= 1:
            raise ValueError(
                f"violation_quantile: value {self.violation_quantile} must be in (0, 1]"
            )
        if self.window < 1 or self.min_samples < 1:
            raise ValueError(
                f"window/min_samples: values {self.window}/{self.min_samples} must be >= 1"
            )
        check_finite("min_load_fraction", self.min_load_fraction, minimum=0.0)
        check_finite("near_slo_fraction", self.near_slo_fraction, minimum=0.0)
        object.__setattr__(self, "fallback", _frozen(self.fallback))

    def observe(
        self, t: float, ready_replicas: int, signals: Mapping[str, float]
    ) -> CapacityEstimator:
        """Record one tick; ignored without ready replicas or without the latency signal."""
        check_finite("t", t)
        latency = signals.get(self.latency_signal)
        if ready_replicas <= 0 or latency is None or not math.isfinite(latency):
            return self  # no latency reading: this tick says nothing about capacity
        ok = latency <= self.slo_s
        queue = signals.get(self.queue_signal)
        queued = queue is None or not math.isfinite(queue) or queue >= self.min_queue
        sustained = dict(self.sustained)
        violating = dict(self.violating)
        for name in set(self.fallback) | set(DEFAULT_CAPACITY_SIGNALS):
            value = signals.get(name)
            if value is None or not math.isfinite(value) or value < 0:
                continue
            per_replica = value / ready_replicas
            threshold = self.fallback.get(name)
            loaded = (queued and latency >= self.near_slo_fraction * self.slo_s) or (
                threshold is not None and per_replica >= self.min_load_fraction * threshold
            )
            if ok and not loaded:
                continue  # light load proves nothing about the limit
            if not ok and not queued:
                continue  # slow without a queue: the requests' own size, not the load
            book = sustained if ok else violating
            book[name] = (*book.get(name, ()), per_replica)[-self.window :]
        return replace(self, sustained=sustained, violating=violating, last_t=t)

    def capacity(self, name: str) -> float | None:
        """Per-replica capacity for ``name``, or ``None`` when neither learned nor set."""
        threshold = self.fallback.get(name)
        seen = self.sustained.get(name, ())
        learned = (
            float(np.quantile(np.asarray(seen), self.quantile))
            if len(seen) >= self.min_samples
            else None
        )
        if learned is None and threshold is None:
            return None
        value = max(x for x in (learned, threshold) if x is not None)
        bad = self.violating.get(name, ())
        if len(bad) >= self.min_samples:
            ceiling = float(np.quantile(np.asarray(bad), self.violation_quantile))
            if ceiling > 0:
                value = min(value, ceiling)
        return value

    def learned(self, name: str) -> bool:
        return len(self.sustained.get(name, ())) >= self.min_samples

    def capacities(self) -> dict[str, float]:
        """Every signal with a known per-replica capacity."""
        names = set(self.fallback) | set(self.sustained)
        out = {n: self.capacity(n) for n in sorted(names)}
        return {n: v for n, v in out.items() if v is not None}
