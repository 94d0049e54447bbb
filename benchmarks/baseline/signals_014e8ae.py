"""`autoscaler/metrics/signals.py` as landed in 014e8ae (one flat point per scrape), kept
only so benchmarks/bench_memory.py can measure it side by side with the current windows.
Not used by the product or the tests."""

# ruff: noqa
from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from autoscaler.domain import FRACTION_SIGNALS
from autoscaler.metrics.engines import EngineSnapshot
from autoscaler.metrics.exposition import HistogramData

DEFAULT_WINDOW_S = 60.0
QUANTILES: tuple[tuple[str, str, float], ...] = (
    ("ttft_p50_s", "ttft", 0.50),
    ("ttft_p95_s", "ttft", 0.95),
    ("ttft_p99_s", "ttft", 0.99),
    ("itl_p95_s", "itl", 0.95),
)
RATES: tuple[tuple[str, str], ...] = (
    ("arrival_rate_per_s", "requests"),
    ("prompt_tokens_per_s", "prompt_tokens"),
    ("generation_tokens_per_s", "generation_tokens"),
    ("preemptions_per_s", "preemptions"),
)


NOT_FINITE = "not-finite"
NEGATIVE = "negative"
ABOVE_ONE = "above-one"
REJECT_REASONS: tuple[str, ...] = (NOT_FINITE, NEGATIVE, ABOVE_ONE)
_SNAPSHOT_FRACTIONS = frozenset({"kv_cache_usage"})


@dataclass(frozen=True, slots=True)
class Violation:
    """A number outside its range: which one, its value and the rule it breaks."""

    name: str
    value: float
    reason: str  # one of REJECT_REASONS

    def __str__(self) -> str:
        rule = {NOT_FINITE: "must be finite", NEGATIVE: "must be >= 0", ABOVE_ONE: "must be <= 1"}
        return f"{self.name}={self.value!r}: {rule[self.reason]} ({self.reason})"


def _violation(name: str, value: float, fraction: bool) -> Violation | None:
    if not math.isfinite(value):
        return Violation(name, value, NOT_FINITE)
    if value < 0:
        return Violation(name, value, NEGATIVE)
    if fraction and value > 1:
        return Violation(name, value, ABOVE_ONE)
    return None


def signal_violation(name: str, value: float) -> Violation | None:
    """A canonical signal's range: finite, >= 0, and <= 1 for fractions."""
    return _violation(name, value, name in FRACTION_SIGNALS)


def _histogram_violation(key: str, hist: HistogramData) -> Violation | None:
    for bound, count in zip(hist.bounds, hist.counts, strict=True):
        if math.isnan(bound) or bound == -math.inf:
            return Violation(f"{key}_bucket.le", bound, NOT_FINITE)
        if bound < 0:
            return Violation(f"{key}_bucket.le", bound, NEGATIVE)  # latencies are >= 0
        v = _violation(f"{key}_bucket{{le={bound:g}}}", count, fraction=False)
        if v is not None:
            return v
    for part, value in (("count", hist.count), ("sum", hist.sum)):
        if value is not None and (v := _violation(f"{key}_{part}", value, False)) is not None:
            return v
    return None


def snapshot_violation(snapshot: EngineSnapshot) -> Violation | None:
    """The first value of a pod's page outside its range, or None when all are valid.

    Gauges are counts (>= 0) or usage fractions (within [0, 1]); counters and bucket
    counts are >= 0; every value is finite.
    """
    for key, value in snapshot.gauges.items():
        if (v := _violation(key, value, key in _SNAPSHOT_FRACTIONS)) is not None:
            return v
    for key, value in snapshot.counters.items():
        if (v := _violation(key, value, fraction=False)) is not None:
            return v
    for key, hist in snapshot.histograms.items():
        if (v := _histogram_violation(key, hist)) is not None:
            return v
    return None


def split_valid(signals: Mapping[str, float]) -> tuple[dict[str, float], list[Violation]]:
    """The signals within range, and the violations of the others (dropped)."""
    valid: dict[str, float] = {}
    bad: list[Violation] = []
    for name, value in signals.items():
        v = signal_violation(name, value)
        if v is None:
            valid[name] = value
        else:
            bad.append(v)
    return valid, bad


_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}


def _shared_bounds(bounds: tuple[float, ...]) -> tuple[float, ...]:
    """One tuple object per distinct bucket layout, shared by every point of every pod."""
    if len(_BOUNDS) > 4096:  # layouts are few; never let a pathological page grow this
        _BOUNDS.clear()
    return _BOUNDS.setdefault(bounds, bounds)


@dataclass(frozen=True, slots=True)
class _Buckets:
    """One histogram's cumulative counts at one point, aligned to ``bounds``."""

    bounds: tuple[float, ...]
    counts: array[float]

    @classmethod
    def of(cls, by_bound: Mapping[float, float]) -> _Buckets:
        return cls(_shared_bounds(tuple(by_bound)), array("d", by_bound.values()))

    def as_dict(self) -> dict[float, float]:
        return dict(zip(self.bounds, self.counts, strict=True))


# Which counters, then which histograms with which bounds, a point's values hold in order.
_Layout = tuple[tuple[str, ...], tuple[tuple[str, tuple[float, ...]], ...]]
_LAYOUTS: dict[_Layout, _Layout] = {}


@dataclass(frozen=True, slots=True)
class _Point:
    """Reset-adjusted cumulative values at one scrape (monotonic across restarts), flat:
    the counters then every histogram's bucket counts in one float array, in the order of
    ``layout`` (one tuple shared by every point of the same page families). A pod keeps a
    point per scrape over the window: as dicts that was ~200 KiB per pod for the vLLM V1
    page at 1 s scrapes over 60 s, flat it is ~30 KiB."""

    t: float
    layout: _Layout
    values: array[float]

    @classmethod
    def make(
        cls, t: float, counters: Mapping[str, float], buckets: Mapping[str, _Buckets]
    ) -> _Point:
        layout: _Layout = (tuple(counters), tuple((k, b.bounds) for k, b in buckets.items()))
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        values = array("d", counters.values())
        for b in buckets.values():
            values.extend(b.counts)
        return cls(t, _LAYOUTS.setdefault(layout, layout), values)

    @property
    def counters(self) -> dict[str, float]:
        keys = self.layout[0]
        return dict(zip(keys, self.values[: len(keys)], strict=True))

    @property
    def buckets(self) -> dict[str, _Buckets]:
        out: dict[str, _Buckets] = {}
        at = len(self.layout[0])
        for key, bounds in self.layout[1]:
            out[key] = _Buckets(bounds, self.values[at : at + len(bounds)])
            at += len(bounds)
        return out


@dataclass(frozen=True, slots=True)
class PodHistory:
    """One pod's latest snapshot and its adjusted points inside the window."""

    snapshot: EngineSnapshot
    t: float
    points: tuple[_Point, ...]


def _counter_increase(prev: float, cur: float) -> float:
    return cur - prev if cur >= prev else cur  # reset: the counter restarted from zero


def _histogram_increase(prev: HistogramData | None, cur: HistogramData) -> dict[float, float]:
    current = dict(zip(cur.bounds, cur.counts, strict=True))
    if prev is None:
        return dict.fromkeys(current, 0.0)
    before = dict(zip(prev.bounds, prev.counts, strict=True))
    reset = before.keys() != current.keys() or any(current[b] < before[b] for b in current)
    if reset:
        return current
    return {b: current[b] - before[b] for b in current}


def observe(
    history: PodHistory | None, snapshot: EngineSnapshot, t: float, window_s: float
) -> PodHistory:
    """Add one successful scrape of a pod taken at ``t``; drops points older than the window."""
    if history is None or t <= history.t:
        if history is not None and t < history.t:
            raise ValueError(f"t={t}: scrape times must not go backwards (last {history.t})")
        first = _Point.make(
            t,
            dict(snapshot.counters),
            {
                k: _Buckets.of(dict(zip(h.bounds, h.counts, strict=True)))
                for k, h in snapshot.histograms.items()
            },
        )
        return PodHistory(snapshot, t, (first,))
    last = history.points[-1]
    last_counters, last_buckets = last.counters, last.buckets
    prev = history.snapshot
    counters: dict[str, float] = {}
    for key, value in snapshot.counters.items():
        before = prev.counters.get(key)
        base = last_counters.get(key)
        if before is None or base is None:
            counters[key] = value  # first sight of this counter: no increase yet
        else:
            counters[key] = base + _counter_increase(before, value)
    buckets: dict[str, _Buckets] = {}
    for key, hist in snapshot.histograms.items():
        base_buckets = last_buckets.get(key)
        increase = _histogram_increase(prev.histograms.get(key), hist)
        if base_buckets is None:
            buckets[key] = _Buckets.of(dict(zip(hist.bounds, hist.counts, strict=True)))
        elif base_buckets.bounds == tuple(increase):  # the usual case: the same layout
            added = array("d", map(float.__add__, base_buckets.counts, increase.values()))
            buckets[key] = _Buckets(base_buckets.bounds, added)
        else:
            had = base_buckets.as_dict()
            buckets[key] = _Buckets.of({b: had.get(b, 0.0) + inc for b, inc in increase.items()})
    point = _Point.make(t, counters, buckets)
    keep = [p for p in history.points if p.t >= t - window_s]
    return PodHistory(snapshot, t, (*keep, point))


def pod_rates(history: PodHistory) -> dict[str, float]:
    """Per-second counter rates over the window (needs two scrapes of the counter)."""
    first, last = history.points[0], history.points[-1]
    dt = last.t - first.t
    if dt <= 0:
        return {}
    then = first.counters
    return {key: (value - then[key]) / dt for key, value in last.counters.items() if key in then}


def pod_bucket_increases(history: PodHistory) -> dict[str, dict[float, float]]:
    """Cumulative bucket increases over the window, by histogram and upper bound."""
    first, last = history.points[0], history.points[-1]
    if last.t <= first.t:
        return {}
    out: dict[str, dict[float, float]] = {}
    first_buckets = first.buckets
    for key, now in last.buckets.items():
        then = first_buckets.get(key)
        if then is None:
            continue
        if then.bounds == now.bounds:
            out[key] = dict(
                zip(now.bounds, map(float.__sub__, now.counts, then.counts), strict=True)
            )
        else:
            had = then.as_dict()
            out[key] = {b: c - had.get(b, 0.0) for b, c in now.as_dict().items()}
    return out


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus ``histogram_quantile`` over cumulative counts by upper bound.

    Returns None where PromQL returns NaN (no +Inf bucket, fewer than two buckets, no
    observations). Non-monotonic counts are fixed like Prometheus (running maximum).
    """
    if math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bounds = sorted(buckets)
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    counts: list[float] = []
    running = 0.0
    for b in bounds:
        running = max(running, buckets[b])
        counts.append(running)
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    idx = next(i for i, c in enumerate(counts) if c >= rank)
    if idx == len(bounds) - 1:
        return bounds[-2]
    if idx == 0 and bounds[0] <= 0:
        return bounds[0]
    start = 0.0
    end = bounds[idx]
    count = counts[idx]
    if idx > 0:
        start = bounds[idx - 1]
        count -= counts[idx - 1]
        rank -= counts[idx - 1]
    if count == 0:
        return start
    return start + (end - start) * (rank / count)


def merge_buckets(parts: Iterable[Mapping[float, float]]) -> dict[float, float]:
    """``sum by (le)`` over pods."""
    merged: dict[float, float] = {}
    for part in parts:
        for b, c in part.items():
            merged[b] = merged.get(b, 0.0) + c
    return merged


def aggregate(histories: Sequence[PodHistory]) -> dict[str, float]:
    """Canonical target signals from the pods read this tick (see module docstring).

    Inputs were checked by `snapshot_violation`; the result is checked again with
    `split_valid` by the caller (a histogram's bounds could still place a quantile
    anywhere), so nothing out of range leaves a source."""
    out: dict[str, float] = {}
    snaps = [h.snapshot for h in histories]
    for key in ("waiting", "running"):
        values = [s.gauges[key] for s in snaps if key in s.gauges]
        if values:
            out[key] = float(sum(values))
    usage = [s.gauges["kv_cache_usage"] for s in snaps if "kv_cache_usage" in s.gauges]
    if usage:
        out["kv_cache_usage"] = sum(usage) / len(usage)
        out["kv_cache_usage_max"] = max(usage)
    rates = [pod_rates(h) for h in histories]
    for signal, key in RATES:
        values = [r[key] for r in rates if key in r]
        if values:
            out[signal] = sum(values)
    increases = [pod_bucket_increases(h) for h in histories]
    merged_by_key: dict[str, dict[float, float]] = {}  # merged once per histogram
    for signal, key, q in QUANTILES:
        merged = merged_by_key.get(key)
        if merged is None:
            merged = merged_by_key[key] = merge_buckets(inc[key] for inc in increases if key in inc)
        value = histogram_quantile(q, merged) if merged else None
        if value is not None:
            out[signal] = value
    return out
