"""Signals over time: per-pod counter rates and histogram windows, merged per target.

Pure: no clock, no I/O; ``t`` is passed in. Semantics follow PromQL so that numbers
match what users see in Grafana:
- counters: ``rate(x[window])`` without extrapolation: (last - first) / (t_last - t_first)
  over the scrapes inside the window; a value lower than the previous one is a reset
  and counts as an increase from zero (as Prometheus does);
- histograms: ``histogram_quantile(q, sum by (le) (rate(x_bucket[window])))``: bucket
  increases over the window, summed over pods by ``le``, interpolated linearly inside
  the bucket where the rank falls; the +Inf bucket yields the highest finite bound;
- per target: counts are summed over the pods read, fractions averaged (and maxed),
  quantiles computed over the merged bucket increases.
Anything that cannot be computed (one scrape only, no observation in the window, no pod
reporting the metric) is absent from the result, never 0.

A window does not keep every scrape: rates and increases are measured from the oldest
kept row, which is at most ``window_s / WINDOW_POINTS`` (2.5 s at 30 s) later than the
oldest scrape inside the window, to the newest scrape (exact). A family that appears
(or reappears) is measured from its first sight; one that disappears is forgotten; a
histogram whose bounds change restarted (every bucket's count is an increase, new
bounds from zero). Why: docs/architecture.md, "Fleet scale: informers and memory".

This module is also the one boundary where numbers enter: `snapshot_violation` checks a
pod's page values and `signal_violation` a canonical signal (finite; counts, rates and
latencies >= 0; fractions within [0, 1], `FRACTION_SLACK` above 1 read as 1) and their
plausibility (upper bounds per pod, `MAX_REQUESTS_PER_POD`, `MAX_COUNT`,
`MAX_RATE_PER_POD`, `MAX_LATENCY_S`; docs/metrics.md "Plausibility bounds"). A pod that
violates counts as unread (it can hold or scale a target up, never down), and the
violation's reason is one of `REJECT_REASONS` (a closed set: it labels a metric).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import accumulate, pairwise

from autoscaler.domain import FRACTION_SIGNALS, LATENCY_SIGNALS
from autoscaler.metrics.engines import EngineSnapshot
from autoscaler.metrics.exposition import HistogramData
from autoscaler.packing import pack_floats, unpack_floats

# The pod-scrape window of rates and quantiles. 30 s, not PromQL's usual 1m: at a 1 s
# scrape it still holds ~30 scrapes, and it reacts to a burst twice as soon; measured side
# by side with 60 s in the simulator (docs/metrics.md, "Window"), which reads this same
# constant for its `ours` rows. Prometheus mode keeps `[1m]` (15 s scrapes need >= 4x).
DEFAULT_WINDOW_S = 30.0
# A pod's window keeps about this many rows, so its start is at most window_s / 12 late
# (2.5 s at 30 s); every scrape is still counted, only intermediate rows are dropped.
WINDOW_POINTS = 12
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
IMPLAUSIBLE = "implausible"
REJECT_REASONS: tuple[str, ...] = (NOT_FINITE, NEGATIVE, ABOVE_ONE, IMPLAUSIBLE)
_SNAPSHOT_FRACTIONS = frozenset({"kv_cache_usage"})

# Plausibility: the largest value one pod can honestly report (docs/metrics.md
# "Plausibility bounds"); above, the pod is unread with reason `IMPLAUSIBLE`.
# Requests waiting or running on one pod: engines cap a batch at thousands and a queue is
# bounded by the server's memory; 1e6 is three orders of magnitude above either.
MAX_REQUESTS_PER_POD = 1e6
# A counter, a histogram's bucket count or sum: above 2**53 a float64 no longer holds
# every whole number, so increments (rates) are no longer exact.
MAX_COUNT = 2.0**53
# Rates per pod, per second: requests, tokens and preemptions far above what one
# engine serves (a large GPU node serves ~1e4-1e5 tokens/s).
MAX_RATE_PER_POD: dict[str, float] = {
    "arrival_rate_per_s": 1e5,
    "prompt_tokens_per_s": 1e7,
    "generation_tokens_per_s": 1e6,
    "preemptions_per_s": 1e5,
}
# A latency quantile (TTFT, ITL): a bucket bound of 1e308 would otherwise be a p99.
MAX_LATENCY_S = 1e5
# A usage fraction this much above 1 is float rounding in the engine: read as 1.
FRACTION_SLACK = 1e-3
_COUNT_SIGNALS = frozenset({"waiting", "running"})


@dataclass(frozen=True, slots=True)
class Violation:
    """A number outside its range: which one, its value and the rule it breaks."""

    name: str
    value: float
    reason: str  # one of REJECT_REASONS

    limit: float = math.inf  # with IMPLAUSIBLE: the bound it is above

    def __str__(self) -> str:
        rule = {
            NOT_FINITE: "must be finite",
            NEGATIVE: "must be >= 0",
            ABOVE_ONE: "must be <= 1",
            IMPLAUSIBLE: f"must be <= {self.limit:g}",
        }
        return f"{self.name}={self.value!r}: {rule[self.reason]} ({self.reason})"


def _violation(
    name: str, value: float, fraction: bool, limit: float = MAX_COUNT
) -> Violation | None:
    if not math.isfinite(value):
        return Violation(name, value, NOT_FINITE)
    if value < 0:
        return Violation(name, value, NEGATIVE)
    if fraction:
        if value > 1 + FRACTION_SLACK:
            return Violation(name, value, ABOVE_ONE)
    elif value > limit:
        return Violation(name, value, IMPLAUSIBLE, limit)
    return None


def signal_limit(name: str, pods: int = 1) -> float:
    """The plausible upper bound of a target's signal ``name`` summed over ``pods`` pods
    (fractions: 1, checked apart)."""
    if name in LATENCY_SIGNALS:
        return MAX_LATENCY_S
    n = max(pods, 1)
    if name in _COUNT_SIGNALS:
        return MAX_REQUESTS_PER_POD * n
    rate = MAX_RATE_PER_POD.get(name)
    return MAX_COUNT if rate is None else rate * n


def signal_violation(name: str, value: float, pods: int = 1) -> Violation | None:
    """A canonical signal's range: finite, >= 0, <= 1 for fractions (with
    `FRACTION_SLACK`), and at most `signal_limit` (over ``pods`` pods) for the others."""
    return _violation(name, value, name in FRACTION_SIGNALS, signal_limit(name, pods))


_VALID_BOUNDS: dict[int, tuple[float, ...]] = {}  # bounds tuples found valid, by identity


def _numbers_valid(values: Collection[float]) -> bool:
    """Whether every value is finite and >= 0, in C loops (a finite sum means no NaN or
    infinity; then ``min`` is meaningful). False may also mean "look closer" (a sum
    that overflows)."""
    return not values or (math.isfinite(sum(values)) and min(values) >= 0)


def _histogram_valid(hist: HistogramData) -> bool:
    """Whether every number of ``hist`` is in range, in C loops (no Python code per bucket).

    A finite sum means every count is finite (an infinity or NaN makes the sum one); only
    then is ``min`` meaningful. False may also mean "look closer" (a sum that overflows).
    """
    bounds, counts = hist.bounds, hist.counts
    if not bounds or len(bounds) != len(counts):
        return False
    if _VALID_BOUNDS.get(id(bounds)) is not bounds:  # a layout's bounds: checked once
        if not (min(bounds) >= 0 and not any(map(math.isnan, bounds))):
            return False
        if len(_VALID_BOUNDS) >= 256:
            _VALID_BOUNDS.clear()
        _VALID_BOUNDS[id(bounds)] = bounds  # held: the id is not reused while here
    if not (math.isfinite(sum(counts)) and min(counts) >= 0 and max(counts) <= MAX_COUNT):
        return False
    for value in (hist.count, hist.sum):
        if value is not None and not (math.isfinite(value) and 0 <= value <= MAX_COUNT):
            return False
    return True


def _histogram_violation(key: str, hist: HistogramData) -> Violation | None:
    if _histogram_valid(hist):  # the common case; else the first violation, in order
        return None
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


def _gauge_limit(key: str) -> float:
    return MAX_REQUESTS_PER_POD if key in _COUNT_SIGNALS else MAX_COUNT


def snapshot_violation(snapshot: EngineSnapshot) -> Violation | None:
    """The first value of a pod's page outside its range, or None when all are valid.

    Gauges are counts (>= 0, waiting and running at most `MAX_REQUESTS_PER_POD`) or
    usage fractions (within [0, 1] + `FRACTION_SLACK`); counters and bucket counts are
    >= 0 and at most `MAX_COUNT`; every value is finite.
    """
    gauges, counters = snapshot.gauges, snapshot.counters
    if not (  # the common case, in C loops; else the first violation, in order
        _numbers_valid(gauges.values())
        and _numbers_valid(counters.values())
        and (not counters or max(counters.values()) <= MAX_COUNT)
        and all(gauges[k] <= 1 + FRACTION_SLACK for k in _SNAPSHOT_FRACTIONS if k in gauges)
        and all(gauges[k] <= MAX_REQUESTS_PER_POD for k in _COUNT_SIGNALS if k in gauges)
        and (not gauges or max(gauges.values()) <= MAX_COUNT)
    ):
        for key, value in gauges.items():
            fraction = key in _SNAPSHOT_FRACTIONS
            if (v := _violation(key, value, fraction, _gauge_limit(key))) is not None:
                return v
        for key, value in counters.items():
            if (v := _violation(key, value, fraction=False)) is not None:
                return v
    for key, hist in snapshot.histograms.items():
        if (v := _histogram_violation(key, hist)) is not None:
            return v
    return None


def split_valid(
    signals: Mapping[str, float], pods: int = 1
) -> tuple[dict[str, float], list[Violation]]:
    """The signals within range (a fraction within `FRACTION_SLACK` above 1 as 1) and
    plausible for a target of ``pods`` pods, and the violations of the others (dropped)."""
    valid: dict[str, float] = {}
    bad: list[Violation] = []
    for name, value in signals.items():
        v = signal_violation(name, value, pods)
        if v is None:
            valid[name] = min(value, 1.0) if name in FRACTION_SIGNALS else value
        else:
            bad.append(v)
    return valid, bad


_BOUNDS: dict[tuple[float, ...], tuple[float, ...]] = {}


def _shared_bounds(bounds: tuple[float, ...]) -> tuple[float, ...]:
    """One tuple object per distinct bucket layout, shared by every pod of every target."""
    if len(_BOUNDS) > 4096:  # layouts are few; never let a pathological page grow this
        _BOUNDS.clear()
    return _BOUNDS.setdefault(bounds, bounds)


@dataclass(frozen=True, slots=True, eq=False)
class _Layout:
    """What a row holds, in order: the counters, then every histogram's bucket counts.

    One object per distinct page layout (`_layout_of` interns them), shared by every pod
    of every target with that layout; ``rates`` and ``quantiles`` are the parts
    `aggregate` reads, found once per layout instead of once per pod per tick."""

    counters: tuple[str, ...]
    hists: tuple[tuple[str, tuple[float, ...]], ...]
    spans: Mapping[str, tuple[int, int]]  # histogram -> its [start, end) in a row
    width: int
    rates: tuple[tuple[str, int], ...]  # (counter, index) of the counters in RATES
    # (histogram, start, end, bounds, ascending) of the histograms in QUANTILES
    quantiles: tuple[tuple[str, int, int, tuple[float, ...], bool], ...]


_LAYOUTS: dict[object, _Layout] = {}
_RATE_KEYS = frozenset(key for _, key in RATES)
_QUANTILE_KEYS = frozenset(key for _, key, _ in QUANTILES)


def _layout_of(snapshot: EngineSnapshot) -> _Layout:
    counters = tuple(snapshot.counters)
    hists = tuple((k, _shared_bounds(tuple(h.bounds))) for k, h in snapshot.histograms.items())
    key = (counters, hists)
    layout = _LAYOUTS.get(key)
    if layout is None:
        if len(_LAYOUTS) > 4096:
            _LAYOUTS.clear()
        spans: dict[str, tuple[int, int]] = {}
        at = len(counters)
        for k, bounds in hists:
            spans[k] = (at, at + len(bounds))
            at += len(bounds)
        layout = _LAYOUTS[key] = _Layout(
            counters,
            hists,
            spans,
            at,
            tuple((k, i) for i, k in enumerate(counters) if k in _RATE_KEYS),
            tuple(
                (k, *spans[k], bounds, all(a < b for a, b in pairwise(bounds)))
                for k, bounds in hists
                if k in _QUANTILE_KEYS
            ),
        )
    return layout


def _matches(layout: _Layout, snapshot: EngineSnapshot) -> bool:
    """Whether ``snapshot`` has ``layout`` (the usual case: checked without building it)."""
    hists = snapshot.histograms
    if len(hists) != len(layout.hists) or tuple(snapshot.counters) != layout.counters:
        return False
    for (key, bounds), (name, hist) in zip(layout.hists, hists.items(), strict=True):
        if key != name or (hist.bounds is not bounds and hist.bounds != bounds):
            return False
    return True


def _raw(snapshot: EngineSnapshot) -> array[float]:
    values = array("d", snapshot.counters.values())
    for hist in snapshot.histograms.values():
        values.extend(hist.counts)
    return values


_Mapping = list[tuple[int, float]]  # per new position: (old position or -1: absent, factor)


def _mapping(old: _Layout, new: _Layout) -> _Mapping:
    """How a row of ``old`` becomes a row of ``new``: a family that is new is absent (NaN)
    in older rows; a new bound of a histogram whose layout changed counts from zero
    (0 x a value of the same family, so a row without that family stays NaN)."""
    index = {name: i for i, name in enumerate(old.counters)}
    out: _Mapping = [(index.get(name, -1), 1.0) for name in new.counters]
    old_hists = dict(old.hists)
    for key, bounds in new.hists:
        before = old_hists.get(key)
        if before is None:
            out.extend([(-1, 1.0)] * len(bounds))
            continue
        start = old.spans[key][0]
        at = {b: start + i for i, b in enumerate(before)}
        out.extend((at[b], 1.0) if b in at else (start, 0.0) for b in bounds)
    return out


def _convert(row: array[float], mapping: _Mapping) -> array[float]:
    return array("d", [row[i] * f if i >= 0 else math.nan for i, f in mapping])


class _Rows:
    """A pod's window rows, oldest first, as a list reads them (``len``, ``[i]``,
    iteration, ``append``, ``[-1] =``, ``del [:k]``): the oldest and the newest row as
    arrays (what a tick reads), the ones between packed (`autoscaler.packing`: exact,
    ~30% of the bytes; unpacked when one is read or becomes the oldest). A row packs when
    a newer one is appended, i.e. every ``resolution_s`` per pod, not every scrape."""

    __slots__ = ("_items",)

    def __init__(self, rows: Sequence[array[float]]) -> None:
        last = len(rows) - 1
        self._items: list[array[float] | bytes] = [
            r if i in (0, last) else pack_floats(r) for i, r in enumerate(rows)
        ]

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index: int) -> array[float]:
        item = self._items[index]
        return unpack_floats(item) if isinstance(item, bytes) else item

    def __setitem__(self, index: int, row: array[float]) -> None:
        if index != -1:
            raise IndexError("only the newest row is replaced")
        self._items[-1] = row

    def __iter__(self) -> Iterator[array[float]]:
        for item in self._items:
            yield unpack_floats(item) if isinstance(item, bytes) else item

    def append(self, row: array[float]) -> None:
        items = self._items
        if len(items) > 1:
            last = items[-1]
            if not isinstance(last, bytes):
                items[-1] = pack_floats(last)
        items.append(row)

    def __delitem__(self, index: slice) -> None:
        items = self._items
        del items[index]
        if items and isinstance(items[0], bytes):
            items[0] = unpack_floats(items[0])


class PodHistory:
    """One pod's scrapes inside the window, as reset-adjusted cumulative rows.

    A row holds every counter and bucket count of one scrape (flat floats in the order
    of the pod's `_Layout`), adjusted across counter resets so it only grows: a rate is
    (newest row - oldest row) / their time apart. Rows kept: the newest scrape (exact),
    the first one after a (re)start or a change of families, and otherwise only as many
    as keep every scrape in the window within ``resolution_s`` before a kept row; so a
    window's start is at most ``resolution_s`` late (at 1 s scrapes over 60 s with the
    default 5 s: ~12 rows instead of 61). ``snapshot`` keeps the newest scrape's engine
    and gauges only (counters and buckets are in the newest row).

    Mutable: `observe` updates a pod's history in place (its source owns it)."""

    __slots__ = (
        "_cover_t",
        "_pinned",
        "complete_from",
        "layout",
        "offset",
        "raw",
        "rows",
        "snapshot",
        "t",
        "times",
    )

    def __init__(self, snapshot: EngineSnapshot, t: float) -> None:
        self.snapshot = EngineSnapshot(snapshot.engine, snapshot.gauges)
        self.t = t
        self.layout = _layout_of(snapshot)
        self.raw = _raw(snapshot)  # the newest scrape's values as read (reset detection)
        self.offset: array[float] | None = None  # row = raw + offset once a counter reset
        self.times = array("d", [t])
        self.rows = _Rows([self.raw])
        self.complete_from = t  # rows older than this lack a family (NaN)
        self._pinned = True  # the newest row is kept when the next scrape comes
        self._cover_t = t  # the oldest scrape the newest row stands for

    def _add(
        self, snapshot: EngineSnapshot, t: float, window_s: float, resolution_s: float
    ) -> None:
        raw = _raw(snapshot)
        changed = not _matches(self.layout, snapshot)
        if changed:
            row = self._relayout(_layout_of(snapshot), raw, t)
        elif any(map(float.__lt__, raw, self.raw)):
            row = self._reset(raw)
        elif self.offset is None:
            row = raw  # no reset ever: the adjusted row is the page's values
        else:
            row = array("d", map(float.__add__, raw, self.offset))
        self.raw = raw
        self.snapshot = EngineSnapshot(snapshot.engine, snapshot.gauges)
        self.t = t
        times, rows = self.times, self.rows
        if not self._pinned and t - self._cover_t <= resolution_s:
            rows[-1] = row  # the scrapes the newest row stood for are within resolution of t
            times[-1] = t
        else:
            rows.append(row)
            times.append(t)
            self._cover_t = t
        self._pinned = changed
        old = bisect_left(times, t - window_s, 0, len(times) - 1)
        if old:
            del times[:old]
            del rows[:old]

    def _reset(self, raw: array[float]) -> array[float]:
        """A counter or histogram went down: it restarted, and counts on from the last row
        (a histogram restarts as a whole: every bucket's count is an increase)."""
        prev, last, layout = self.raw, self.rows[-1], self.layout
        offset = self.offset if self.offset is not None else array("d", bytes(8 * layout.width))
        for i in range(len(layout.counters)):
            if raw[i] < prev[i]:
                offset[i] = last[i]
        for a, b in layout.spans.values():
            if any(map(float.__lt__, raw[a:b], prev[a:b])):
                offset[a:b] = last[a:b]
        self.offset = offset
        return array("d", map(float.__add__, raw, offset))

    def _relayout(self, new: _Layout, raw: array[float], t: float) -> array[float]:
        """Families came or went, or a histogram's bounds changed: convert the kept rows."""
        old = self.layout
        mapping = _mapping(old, new)
        self.rows = _Rows([_convert(r, mapping) for r in self.rows])
        last = self.rows[-1]
        prev = _convert(self.raw, mapping)
        if self.offset is None:
            offset = array("d", bytes(8 * new.width))
        else:
            offset = _convert(self.offset, mapping)
        for i in range(len(new.counters)):
            if math.isnan(prev[i]):
                offset[i] = 0.0  # first sight: no increase yet
            elif raw[i] < prev[i]:
                offset[i] = last[i]
        old_hists = dict(old.hists)
        for key, bounds in new.hists:
            a, b = new.spans[key]
            if key not in old_hists:
                offset[a:b] = array("d", bytes(8 * (b - a)))
            elif old_hists[key] != bounds or any(map(float.__lt__, raw[a:b], prev[a:b])):
                offset[a:b] = last[a:b]  # a new layout is a restart (new bounds from zero)
        if any(i < 0 for i, _ in mapping):
            self.complete_from = t
        self.layout = new
        self.offset = offset if any(offset) else None
        return array("d", map(float.__add__, raw, offset))

    def start_of(self, at: int) -> int | None:
        """The oldest row holding the family at position ``at``, unless only the newest does."""
        rows = self.rows
        if self.times[0] >= self.complete_from:
            start = 0
        else:
            start = next(i for i, r in enumerate(rows) if not math.isnan(r[at]))
        return start if start < len(rows) - 1 else None


def observe(
    history: PodHistory | None,
    snapshot: EngineSnapshot,
    t: float,
    window_s: float,
    resolution_s: float | None = None,
) -> PodHistory:
    """Add one successful scrape of a pod taken at ``t``; drops rows older than the window.

    Updates ``history`` in place and returns it (a new one for the first scrape, or a
    second scrape at the same ``t``). ``resolution_s``: how late a window's start may be,
    default ``window_s / WINDOW_POINTS``; 0 keeps every scrape."""
    if history is not None and t < history.t:
        raise ValueError(f"t={t}: scrape times must not go backwards (last {history.t})")
    if history is None or t == history.t:
        return PodHistory(snapshot, t)
    resolution = window_s / WINDOW_POINTS if resolution_s is None else resolution_s
    history._add(snapshot, t, window_s, resolution)
    return history


def pod_rates(history: PodHistory) -> dict[str, float]:
    """Per-second counter rates over the window (needs two rows holding the counter)."""
    rows, times = history.rows, history.times
    out: dict[str, float] = {}
    for i, key in enumerate(history.layout.counters):
        start = history.start_of(i)
        if start is not None:
            out[key] = (rows[-1][i] - rows[start][i]) / (times[-1] - times[start])
    return out


def pod_bucket_increases(history: PodHistory) -> dict[str, dict[float, float]]:
    """Cumulative bucket increases over the window, by histogram and upper bound."""
    rows = history.rows
    out: dict[str, dict[float, float]] = {}
    for key, bounds in history.layout.hists:
        a, b = history.layout.spans[key]
        start = history.start_of(a)
        if start is not None:
            increases = map(float.__sub__, rows[-1][a:b], rows[start][a:b])
            out[key] = dict(zip(bounds, increases, strict=True))
    return out


# Prometheus mode's counterpart is buckets.bucket_quantile (Prometheus 2.42 to the bit); this
# one, the pod-scrape path's, differs at the edges, as tests/metrics/test_signals.py pins: None
# for NaN, counts floored at 0, and q = 0 over an empty lowest bucket reads 0, not NaN.
def length_buckets(histories: Sequence[PodHistory]) -> dict[float, float]:
    """The prompt-length histogram (``prompt_len``: tokens per request) over the window,
    ``sum by (le)`` over the pods read: cumulative increases by upper bound. Empty when
    no pod has it over the window (unknown, never "no long requests")."""
    return merge_buckets(
        parts["prompt_len"]
        for parts in (pod_bucket_increases(h) for h in histories)
        if "prompt_len" in parts
    )


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
    return _quantile(q, bounds, [buckets[b] for b in bounds])


def _quantile(q: float, bounds: Sequence[float], cumulative: Sequence[float]) -> float | None:
    """`histogram_quantile` for 0 <= q <= 1 over ascending ``bounds``."""
    if len(bounds) < 2 or bounds[-1] != math.inf:
        return None
    # the running maximum (non-monotonic counts fixed as Prometheus does), in C loops
    counts = list(accumulate(cumulative, max, initial=0.0))
    del counts[0]
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations  # <= observations: some bucket reaches it
    idx = bisect_left(counts, rank)  # the first bucket whose count reaches the rank
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
    rates: dict[str, float] = {}
    # per histogram: each pod's (bounds, ascending, bucket increases), merged below
    parts: dict[str, list[tuple[tuple[float, ...], bool, list[float]]]] = {}
    for h in histories:
        rows, times = h.rows, h.times
        if len(rows) < 2:
            continue
        last = rows[-1]
        complete = times[0] >= h.complete_from  # the usual case: the oldest row has it all
        first, dt = rows[0], times[-1] - times[0]
        for key, i in h.layout.rates:
            if complete:
                rate = (last[i] - first[i]) / dt
            elif (start := h.start_of(i)) is not None:
                rate = (last[i] - rows[start][i]) / (times[-1] - times[start])
            else:
                continue
            rates[key] = rates.get(key, 0.0) + rate
        for key, a, b, bounds, ascending in h.layout.quantiles:
            then = first
            if not complete:
                start = h.start_of(a)
                if start is None:
                    continue
                then = rows[start]
            increases = list(map(float.__sub__, last[a:b], then[a:b]))
            parts.setdefault(key, []).append((bounds, ascending, increases))
    for signal, key in RATES:
        if key in rates:
            out[signal] = rates[key]
    merged_by_key: dict[str, tuple[Sequence[float], Sequence[float]] | None] = {}
    for signal, key, q in QUANTILES:
        if key not in merged_by_key:
            merged_by_key[key] = _merge(parts.get(key, ()))
        merged = merged_by_key[key]
        value = _quantile(q, *merged) if merged else None
        if value is not None:
            out[signal] = value
    return out


def _merge(
    parts: Sequence[tuple[tuple[float, ...], bool, list[float]]],
) -> tuple[Sequence[float], Sequence[float]] | None:
    """``sum by (le)`` of the pods' increases: (ascending bounds, cumulative counts)."""
    if not parts:
        return None
    bounds, ascending, _ = parts[0]
    if ascending and all(p[0] is bounds for p in parts):  # one layout: add column-wise
        return bounds, [sum(col) for col in zip(*(p[2] for p in parts), strict=True)]
    merged = merge_buckets(dict(zip(p[0], p[2], strict=True)) for p in parts)
    ordered = sorted(merged)
    return ordered, [merged[b] for b in ordered]
