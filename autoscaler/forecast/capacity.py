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

Memory (issue 16): each book is an ``array('d')`` of up to ``window`` samples, kept
twice (in arrival order and sorted): 8 bytes per sample per copy, where a tuple of
Python floats and its sorted list took ~40. A state transition copies the books it
changes (a memcpy) and never mutates a buffer an older state holds, so earlier states
stay valid (they may be kept and compared).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, insort
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from autoscaler.forecast.robust import check_finite, check_positive, evolve, quantile_sorted

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
    # Per signal, the last ``window`` per-replica samples in arrival order (any float
    # sequence when built by hand; ``array('d')`` once observed).
    sustained: Mapping[str, Sequence[float]] = field(default_factory=dict)
    violating: Mapping[str, Sequence[float]] = field(default_factory=dict)
    last_t: float | None = None
    # Derived, never compared: the books sorted (kept incrementally by `observe`, so a
    # quantile is two reads instead of a sort) and `capacities()` once computed.
    sorted_sustained: Mapping[str, Sequence[float]] = field(
        default_factory=dict, repr=False, compare=False
    )
    sorted_violating: Mapping[str, Sequence[float]] = field(
        default_factory=dict, repr=False, compare=False
    )
    caps_cache: Mapping[str, float] | None = field(default=None, repr=False, compare=False)

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
        sorted_s = dict(self.sorted_sustained)
        sorted_v = dict(self.sorted_violating)
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
            book, ordered = (sustained, sorted_s) if ok else (violating, sorted_v)
            old = book.get(name, ())
            new, gone = _appended(old, per_replica, self.window)
            book[name] = new
            ordered[name] = _sorted_after(ordered.get(name), old, gone, per_replica)
        return evolve(
            self,
            sustained=sustained,
            violating=violating,
            last_t=t,
            sorted_sustained=sorted_s,
            sorted_violating=sorted_v,
            caps_cache=None,
        )

    def capacity(self, name: str) -> float | None:
        """Per-replica capacity for ``name``, or ``None`` when neither learned nor set."""
        threshold = self.fallback.get(name)
        seen = self.sustained.get(name, ())
        learned = (
            quantile_sorted(_ordered(self.sorted_sustained, name, seen), self.quantile)
            if len(seen) >= self.min_samples
            else None
        )
        if learned is None and threshold is None:
            return None
        value = max(x for x in (learned, threshold) if x is not None)
        bad = self.violating.get(name, ())
        if len(bad) >= self.min_samples:
            ordered = _ordered(self.sorted_violating, name, bad)
            ceiling = quantile_sorted(ordered, self.violation_quantile)
            if ceiling > 0:
                value = min(value, ceiling)
        return value

    def learned(self, name: str) -> bool:
        return len(self.sustained.get(name, ())) >= self.min_samples

    def capacities(self) -> dict[str, float]:
        """Every signal with a known per-replica capacity (computed once per state)."""
        if self.caps_cache is None:
            names = set(self.fallback) | set(self.sustained)
            out = {n: self.capacity(n) for n in sorted(names)}
            caps = {n: v for n, v in out.items() if v is not None}
            object.__setattr__(self, "caps_cache", caps)
            return dict(caps)
        return dict(self.caps_cache)


def _ordered(
    books: Mapping[str, Sequence[float]], name: str, book: Sequence[float]
) -> Sequence[float]:
    """``book`` in ascending order: the kept copy, or sorted now (an estimator built by
    hand, without `observe`)."""
    kept = books.get(name)
    return kept if kept is not None and len(kept) == len(book) else sorted(book)


def _appended(
    old: Sequence[float], added: float, window: int
) -> tuple[array[float], Sequence[float]]:
    """A new book: ``old`` + ``added``, its oldest samples dropped to hold ``window``;
    and the dropped samples. ``old`` is left alone (an older state holds it)."""
    new = old.__copy__() if isinstance(old, array) else array("d", old)  # exact size
    excess = len(new) + 1 - window
    gone: Sequence[float] = ()
    if excess > 0:
        gone = new[:excess]
        del new[:excess]  # shrinks in place: the append below needs no reallocation
    new.append(added)
    return new, gone


def _sorted_after(
    kept: Sequence[float] | None, old: Sequence[float], gone: Sequence[float], added: float
) -> array[float]:
    """The ascending copy of ``old`` + ``added`` minus ``gone`` (what fell out of the
    window): deletions and one insertion, not a sort (``kept`` is ``old`` sorted).
    Deleting the leftmost equal sample and inserting right of the equal ones commute,
    so the result is the one the sorted list gave, bit for bit."""
    if kept is not None and len(kept) == len(old):
        ordered = kept.__copy__() if isinstance(kept, array) else array("d", kept)
    else:
        ordered = array("d", sorted(old))
    for value in gone:
        del ordered[bisect_left(ordered, value)]
    insort(ordered, added)
    return ordered
