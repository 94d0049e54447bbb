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

Memory (issue 16): each book (`Book`) holds its up to ``window`` samples once, sorted
(``array('f')``, what a quantile reads), each with its arrival number beside it
(``array('H')``, 2 bytes, modulo 65,536): 6 bytes per sample, where a float64 book took
10, the book in arrival order plus its sorted copy 16 and a tuple of Python floats with
its sorted list ~40. A sample is kept as float32: rounded to 24 significant bits
(relative error <= 2**-24, ~6e-8), far finer than any per-replica load is measured, so
the learned capacities move in their 8th digit and no decision changes (the control
loop's recorded scale writes and warm-pool sizes are the same, tests/control/
test_loop_golden.py). A sample outside float32's normal range (over ~3.4e38, or under
~1.2e-38 and not zero) widens its book to float64 for good, so no sample overflows to
inf or loses its digits. The oldest sample is the one whose number is the book's end
minus its length, found by a C scan of the numbers. A state transition copies the books
it changes (two memcpy) and never mutates a buffer an older state holds, so earlier
states stay valid (they may be kept and compared).
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import overload

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
    # sequence when built by hand; a `Book`, sorted inside, once observed).
    sustained: Mapping[str, Sequence[float]] = field(default_factory=dict)
    violating: Mapping[str, Sequence[float]] = field(default_factory=dict)
    last_t: float | None = None
    # Derived, never compared: `capacities()` once computed. Until then, after
    # `observe`: an earlier state's capacities and the names whose books changed since
    # (the others' capacities are the same: each is a function of its own books).
    caps_cache: Mapping[str, float] | None = field(default=None, repr=False, compare=False)
    caps_before: Mapping[str, float] | None = field(
        default=None, init=False, repr=False, compare=False
    )
    changed: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    # the signals `observe` looks at: the fallback's and DEFAULT_CAPACITY_SIGNALS
    signal_names: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)

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
        names = tuple(set(self.fallback) | set(DEFAULT_CAPACITY_SIGNALS))
        object.__setattr__(self, "signal_names", _NAMES.setdefault(names, names))

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
        queued = queue is None or not _isfinite(queue) or queue >= self.min_queue
        near_slo = queued and latency >= self.near_slo_fraction * self.slo_s
        if not ok and not queued:
            # slow without a queue: the requests' own size, not the load (every signal)
            return evolve(self, last_t=t)
        fallback = self.fallback
        window = self.window
        min_load = self.min_load_fraction
        old_books = self.sustained if ok else self.violating
        books: dict[str, Sequence[float]] | None = None  # copied on the first change
        changed: list[str] = []
        for name in self.signal_names:
            value = signals.get(name)
            if value is None or not _isfinite(value) or value < 0:
                continue
            per_replica = value / ready_replicas
            if ok and not near_slo:
                threshold = fallback.get(name)
                if threshold is None or not per_replica >= min_load * threshold:
                    continue  # light load proves nothing about the limit
            if books is None:
                books = dict(old_books)
            old = books.get(name)
            if not isinstance(old, Book):
                old = Book.of(() if old is None else old, window)
            books[name] = old.appended(per_replica, window)
            changed.append(name)
        if books is None:
            return evolve(self, last_t=t)  # no book changed: the capacities stay
        sustained = books if ok else self.sustained
        violating = self.violating if ok else books
        before: Mapping[str, float] | None = self.caps_cache
        since: tuple[str, ...] = ()
        if before is None:  # not computed here: an earlier state's, if any
            before, since = self.caps_before, self.changed
        return evolve(
            self,
            sustained=sustained,
            violating=violating,
            last_t=t,
            caps_cache=None,
            caps_before=before,
            # each name once: bounded while nothing reads the capacities
            changed=(*since, *(n for n in changed if n not in since)) if before is not None else (),
        )

    def capacity(self, name: str) -> float | None:
        """Per-replica capacity for ``name``, or ``None`` when neither learned nor set."""
        threshold = self.fallback.get(name)
        seen = self.sustained.get(name)
        learned = None
        if seen is not None and _length(seen) >= self.min_samples:
            learned = quantile_sorted(_ordered(seen), self.quantile)
        if learned is None:
            if threshold is None:
                return None
            value = threshold
        elif threshold is not None and threshold > learned:  # max(learned, threshold)
            value = threshold
        else:
            value = learned
        bad = self.violating.get(name)
        if bad is not None and _length(bad) >= self.min_samples:
            ceiling = quantile_sorted(_ordered(bad), self.violation_quantile)
            if ceiling > 0 and ceiling < value:  # min(value, ceiling)
                value = ceiling
        return value

    def learned(self, name: str) -> bool:
        book = self.sustained.get(name)
        return book is not None and _length(book) >= self.min_samples

    def capacities(self) -> dict[str, float]:
        """Every signal with a known per-replica capacity (computed once per state)."""
        if self.caps_cache is None:
            names = sorted(set(self.fallback) | set(self.sustained))
            before, changed = self.caps_before, self.changed
            caps: dict[str, float] = {}
            for n in names:
                if before is not None and n in before and n not in changed:
                    caps[n] = before[n]  # its books are the ones `before` was built from
                elif (v := self.capacity(n)) is not None:
                    caps[n] = v
            object.__setattr__(self, "caps_cache", caps)
            object.__setattr__(self, "caps_before", None)
            object.__setattr__(self, "changed", ())
            return dict(caps)
        return dict(self.caps_cache)


_isfinite = math.isfinite
_ROUND = array("f", [0.0])  # rounds a float to float32 (one slot, written then read)
_NAMES: dict[tuple[str, ...], tuple[str, ...]] = {}  # one tuple per set of signal names


def _length(book: Sequence[float]) -> int:
    """``len(book)``, without `Book.__len__`'s Python call for a `Book`."""
    return len(book.ordered) if type(book) is Book else len(book)


def _ordered(book: Sequence[float]) -> Sequence[float]:
    """``book`` in ascending order: a `Book`'s own, or sorted now (an estimator built by
    hand, without `observe`)."""
    return book.ordered if isinstance(book, Book) else sorted(book)


_MAX_SEQ = 1 << 16  # arrival numbers are kept modulo this ('H'); larger windows use 'Q'
_F32_MAX = (2.0 - 2.0**-23) * 2.0**127  # the largest finite float32
_F32_TINY = 2.0**-126  # the smallest normal float32


def _narrow(value: float) -> bool:
    """Whether a float32 keeps ``value`` to 24 significant bits (zero, or normal range)."""
    magnitude = abs(value)
    return magnitude == 0.0 or _F32_TINY <= magnitude <= _F32_MAX


class Book(Sequence[float]):
    """The last ``window`` samples of one signal: a read-only sequence in arrival order,
    stored sorted (``ordered``: float32, or float64 once a sample needed it) with each
    sample's arrival number (``seqs``, modulo ``_MAX_SEQ`` or 2**64) beside it; ``end``
    is the number the next sample gets. A sample reads back as stored (rounded to
    float32 in a float32 book). Never mutated once built: `appended` returns a new book."""

    __slots__ = ("end", "ordered", "seqs")

    def __init__(self, ordered: array[float], seqs: array[int], end: int) -> None:
        self.ordered = ordered
        self.seqs = seqs
        self.end = end

    @staticmethod
    def of(samples: Sequence[float], window: int) -> Book:
        """A book of ``samples`` (arrival order), its oldest dropped to hold ``window``."""
        book = Book(array("f"), array("H" if window < _MAX_SEQ else "Q"), 0)
        for value in samples:
            book = book.appended(value, window)
        return book

    def _modulus(self) -> int:
        return _MAX_SEQ if self.seqs.typecode == "H" else 1 << 64

    def appended(self, added: float, window: int) -> Book:
        """A new book: this one + ``added``, its oldest samples dropped to hold ``window``.
        The sorted samples come out as deleting the leftmost equal sample and inserting
        right of the equal ones gave (what the sorted list of the stored values gave),
        bit for bit: equal floats are the same bits except 0.0 and -0.0, and those are
        deleted leftmost."""
        ordered = self.ordered.__copy__()  # exact size
        if ordered.typecode == "f":
            if _narrow(added):
                _ROUND[0] = added
                added = _ROUND[0]  # as stored: bisect and delete see the same value
            else:
                ordered = array("d", ordered)  # for good: the values as stored so far
        seqs = self.seqs.__copy__()
        modulus = self._modulus()
        excess = len(ordered) + 1 - window
        if excess > 0:
            oldest = (self.end - len(ordered)) % modulus
            for k in range(excess):
                at = seqs.index((oldest + k) % modulus)
                del ordered[bisect_left(ordered, ordered[at])]
                del seqs[at]
        at = bisect_right(ordered, added)
        ordered.insert(at, added)
        seqs.insert(at, self.end)
        return Book(ordered, seqs, (self.end + 1) % modulus)

    def _arrival(self) -> list[float]:
        n = len(self.ordered)
        modulus = self._modulus()
        oldest = self.end - n
        out = [0.0] * n
        for value, seq in zip(self.ordered, self.seqs, strict=True):
            out[(seq - oldest) % modulus] = value
        return out

    def __len__(self) -> int:
        return len(self.ordered)

    @overload
    def __getitem__(self, index: int) -> float: ...
    @overload
    def __getitem__(self, index: slice) -> list[float]: ...
    def __getitem__(self, index: int | slice) -> float | list[float]:
        return self._arrival()[index]

    def __iter__(self) -> Iterator[float]:
        return iter(self._arrival())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Book):
            return self._arrival() == other._arrival()
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self._arrival()))

    def __repr__(self) -> str:
        return f"Book({self._arrival()!r})"
