"""Histogram quantiles computed in the controller from one bucket query per family.

Prometheus evaluates ``histogram_quantile(q, sum by (namespace, llm_target, le)
(rate(x_bucket[1m])))`` by computing the ``rate`` of every bucket series first; PromQL
has no way to share that between the TTFT p50, p95 and p99 queries, so each one pays
for reading every pod's bucket samples again (~3 s of Prometheus CPU per query at 1,000
targets x 8 pods: docs/metrics.md, "Prometheus mode"). Instead the source sends the inner
``sum by (..., le) (rate(x_bucket[1m]))`` once per family per tick and computes each
wanted quantile here, with Prometheus 2.42's ``histogram_quantile`` semantics for
classic histograms (promql/quantile.go, ``bucketQuantile``, as in 2.20-2.48):

- a series whose ``le`` does not parse as a float is skipped; series are grouped by
  their other labels; buckets with the same bound are summed (``coalesceBuckets``);
- NaN if the highest bound is not +Inf, if fewer than two buckets remain, or if there
  are no observations (the +Inf bucket's count is 0); ``q`` NaN -> NaN, ``q`` < 0 ->
  -Inf, ``q`` > 1 -> +Inf;
- non-monotonic counts (e.g. after ``rate`` of buckets scraped apart) are raised to the
  running maximum (``ensureMonotonic``; 2.49+ also ignores relative differences below
  1e-12 first, ``correctPrecisionErrors``: not done here, as 2.42 does not);
- the rank ``q x observations`` falls into the first bucket whose count reaches it
  (Go's ``sort.Search`` over all but the +Inf bucket); in the +Inf bucket the result is
  the highest finite bound; in the lowest bucket the lower bound is 0 if its upper bound
  is > 0, else the result is that upper bound; otherwise linear interpolation
  ``start + (end - start) * (rank / count)`` (0/0, q = 0 over an empty lowest bucket,
  is NaN as in Go).

The arithmetic is the same IEEE operations in the same order, so given the same summed
bucket rates (Prometheus prints them exactly: shortest round-trip decimal) the result
is the same float; tests/metrics/test_prometheus_buckets.py checks it against a real
Prometheus 2.42. Known differences, none reachable with vLLM's numeric bounds: a NaN
``le`` (Go's sort order with NaN is unspecified) reads NaN here, and ``le`` values in
Go-only syntax (underscores, hex without ``p``) are skipped. A NaN result is missing
data for the caller, never 0.

Which templates: a query template of exactly the form the default quantile templates
have, ``histogram_quantile(<number>, sum by ($by le) ($(rate(<selector>)$)))`` or, for
recorded bucket rates (`prometheus.RECORDED_QUERIES`), ``histogram_quantile(<number>,
sum by ($by le) ($(<recorded metric>{$selector}$)))``, or an ``or`` of such (the first
branch with series for a target wins, as PromQL's ``or`` keeps a left-hand series even
when its value is NaN). Any other template is sent to Prometheus as written.

Decoding cost: a bucket answer holds one series per target per bound (~23,000 at 1,000
targets for TTFT). `BucketLayout` keeps what a parsed answer looked like without its
numbers (the "skeleton": the JSON text with every sample's timestamp and value cut
out); the next answer whose skeleton is byte-identical (the steady state: same targets,
same buckets, same order) is decoded by splitting the text at the values and parsing
only the numbers, into one row of counts per target shared by that family's quantiles
(plain Python: the controller does not import numpy), the same operations as above. Any
other answer is parsed as JSON.
"""

from __future__ import annotations

import json
import math
import re
from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any, Final

Group = tuple[str, str]  # (namespace, llm_target) of a grouped answer's series

_NUMBER: Final = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
# one branch of a quantile template (see the module docstring)
_BRANCH: Final = re.compile(
    rf"histogram_quantile\(({_NUMBER}), "
    r"(sum by \(\$by le\) \(\$\((?:rate\([^()]*\)|[a-zA-Z_:][a-zA-Z0-9_:]*\{\$selector\})\$\)\))\)"
)


@dataclass(frozen=True, slots=True)
class QuantileSpec:
    """A signal computed from bucket answers: per branch (``q``, bucket query template),
    the first branch whose answer has series for the target gives its value."""

    signal: str
    branches: tuple[tuple[float, str], ...]


def quantile_spec(signal: str, template: str) -> QuantileSpec | None:
    """The spec of a quantile template (see the module docstring), else None."""
    branches = []
    for part in template.split(" or "):
        m = _BRANCH.fullmatch(part)
        if m is None:
            return None
        branches.append((float(m.group(1)), m.group(2)))
    return QuantileSpec(signal, tuple(branches))


# Go's strconv.ParseFloat syntax (as Prometheus parses ``le``), without underscores
_LE_SYNTAX: Final = re.compile(
    rf"[+-]?{_NUMBER}|[+-]?(?i:inf(?:inity)?)|(?i:nan)"
    r"|[+-]?0[xX](?:[0-9a-fA-F]+\.?[0-9a-fA-F]*|\.[0-9a-fA-F]+)[pP][+-]?\d+"
)
_LE_CACHE: dict[str, float | None] = {}


def parse_le(text: str) -> float | None:
    """An ``le`` label as Prometheus parses it, None where it fails (series skipped)."""
    try:
        return _LE_CACHE[text]
    except KeyError:
        pass
    value: float | None = None
    if _LE_SYNTAX.fullmatch(text):
        x = float.fromhex(text) if "x" in text or "X" in text else float(text)
        literal_inf = text.lstrip("+-")[:1] in ("i", "I")
        value = None if math.isinf(x) and not literal_inf else x  # out of range: ErrRange
    if len(_LE_CACHE) < 4096:
        _LE_CACHE[text] = value
    return value


def _search(n: int, counts: Sequence[float], rank: float) -> int:
    """Go's ``sort.Search(n, func(i) bool { return counts[i] >= rank })``, probe for probe
    (so NaN counts land where Prometheus' binary search lands)."""
    i, j = 0, n
    while i < j:
        h = (i + j) >> 1
        if not counts[h] >= rank:
            i = h + 1
        else:
            j = h
    return i


# The pod-scrape path's counterpart is signals.histogram_quantile: the same interpolation,
# but None for NaN, counts floored at 0 and q = 0 over an empty lowest bucket read as 0; this
# one (and _rows_quantile) must equal Prometheus' (tests/metrics/test_prometheus_buckets.py).
def bucket_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float:
    """Prometheus 2.42 ``bucketQuantile`` over (upper bound, cumulative count) pairs of
    one group, in any order; NaN where Prometheus returns NaN."""
    if math.isnan(q):
        return math.nan
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    merged: dict[float, float] = {}
    for bound, count in buckets:
        if math.isnan(bound):
            return math.nan  # Go's sort with a NaN bound: unspecified order
        merged[bound] = merged[bound] + count if bound in merged else count
    if not merged:
        return math.nan
    bounds = sorted(merged)
    if bounds[-1] != math.inf:
        return math.nan
    counts = [merged[b] for b in bounds]
    top = counts[0]  # ensureMonotonic: raise decreases to the running maximum
    for i in range(1, len(counts)):
        c = counts[i]
        if c > top:
            top = c
        elif c < top:
            counts[i] = top
    if len(bounds) < 2:
        return math.nan
    observations = counts[-1]
    if observations == 0:
        return math.nan
    rank = q * observations
    b = _search(len(bounds) - 1, counts, rank)
    if b == len(bounds) - 1:
        return bounds[-2]
    if b == 0 and bounds[0] <= 0:
        return bounds[0]
    start = 0.0
    end = bounds[b]
    count = counts[b]
    if b > 0:
        start = bounds[b - 1]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    if count == 0:  # Go divides floats: 0/0 is NaN, x/0 is +-Inf
        if rank == 0 or math.isnan(rank):
            return math.nan
        ratio = math.copysign(math.inf, rank) * math.copysign(1.0, count)
        return start + (end - start) * ratio
    return start + (end - start) * (rank / count)


def _rows_quantile(
    q: float, bounds: Sequence[float], rows: Sequence[Sequence[float]]
) -> list[float]:
    """`bucket_quantile` for every row of ``rows`` (finite cumulative counts, already
    raised to their running maximum, by ascending ``bounds``: the last +Inf, at least
    two), the same float operations. With finite, monotonic counts Go's binary search
    is `bisect_left` over all but the +Inf bucket."""
    if math.isnan(q) or q < 0 or q > 1:
        return [math.nan if math.isnan(q) else math.copysign(math.inf, q)] * len(rows)
    last = len(bounds) - 1
    low = bounds[0] if bounds[0] <= 0 else None
    out: list[float] = []
    for c in rows:
        observations = c[last]
        if observations == 0:
            out.append(math.nan)
            continue
        rank = q * observations
        b = bisect_left(c, rank, 0, last)
        if b == last:
            out.append(bounds[last - 1])
        elif b == 0:
            if low is not None:
                out.append(low)
            elif c[0] == 0:
                out.append(math.nan)  # q = 0 over an empty lowest bucket: 0/0
            else:
                out.append(bounds[0] * (rank / c[0]))  # 0 + (end - 0) * (rank / count)
        else:
            start, prev = bounds[b - 1], c[b - 1]
            out.append(start + (bounds[b] - start) * ((rank - prev) / (c[b] - prev)))
    return out


@dataclass(slots=True)
class Buckets:
    """One bucket query's answer, per group: the common layout's groups as rows of
    cumulative counts raised to their running maximum (``groups``, ``bounds``, ``rows``),
    the others as (bound, count) pairs."""

    groups: list[Group] = field(default_factory=list)
    bounds: tuple[float, ...] = ()
    rows: list[list[float]] = field(default_factory=list)
    other: dict[Group, list[tuple[float, float]]] = field(default_factory=dict)
    _index: dict[Group, int] | None = None  # group -> row (`pairs`), built on first use

    def quantiles(self, q: float) -> dict[Group, float]:
        """``histogram_quantile(q, ...)`` per group present (NaN included)."""
        out: dict[Group, float] = {}
        if self.groups:
            values = _rows_quantile(q, self.bounds, self.rows)
            out = dict(zip(self.groups, values, strict=True))
        for group, pairs in self.other.items():
            out[group] = bucket_quantile(q, pairs)
        return out

    def pairs(self, group: Group) -> list[tuple[float, float]] | None:
        """The group's (upper bound, cumulative count) pairs; None: no series."""
        if group in self.other:
            return list(self.other[group])
        if self._index is None:
            self._index = {g: i for i, g in enumerate(self.groups)}
        i = self._index.get(group)
        return None if i is None else list(zip(self.bounds, self.rows[i], strict=True))


# A sample's timestamp and value in Prometheus' JSON: ``"value":[<ts>,"<value>"]``. Inside
# a JSON string every ``"`` is escaped, so this only matches the sample itself.
_SAMPLE: Final = re.compile(rb'"value":\[[^,\]]*,"([^"]*)"\]')


def _split(body: bytes) -> tuple[bytes, list[bytes]]:
    parts = _SAMPLE.split(body)
    return b"".join(parts[0::2]), parts[1::2]


@dataclass(slots=True)
class BucketLayout:
    """What an answer looked like without its numbers (see the module docstring): the
    values at ``perm``, ``len(bounds)`` at a time, are the common layout's groups' counts
    by ascending bound; ``other`` lists the other groups' (value index, bound)."""

    skeleton: bytes
    size: int  # values in the answer
    groups: list[Group]
    bounds: tuple[float, ...]
    perm: list[int]
    other: dict[Group, list[tuple[int, float]]]

    def decode(self, values: Sequence[bytes]) -> Buckets:
        return self.fill(list(map(float, values)))

    def fill(self, numbers: Sequence[float]) -> Buckets:
        """The groups of an answer with this layout whose values are ``numbers``."""
        width = len(self.bounds)
        flat = [numbers[i] for i in self.perm]
        other = {g: [(b, numbers[i]) for i, b in s] for g, s in self.other.items()}
        groups: list[Group] = []
        rows: list[list[float]] = []
        for r, group in enumerate(self.groups):
            counts = flat[r * width : (r + 1) * width]
            if math.isfinite(sum(counts)):  # the usual case: every count finite
                groups.append(group)
                rows.append(list(accumulate(counts, max)))  # ensureMonotonic, exact here
            else:  # NaN/Inf counts (or a sum overflowing): the exact scalar way
                other[group] = list(zip(self.bounds, counts, strict=True))
        return Buckets(groups, self.bounds, rows, other)


def _series(doc: Any) -> list[Any] | str:
    data = doc.get("data") if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if not isinstance(data, dict) or data.get("resultType") != "vector":
        return f"unexpected answer {doc!r:.120}"
    if not isinstance(result, list):
        return f"unexpected answer {doc!r:.120}"
    return result


def parse_buckets(
    body: bytes, layout: BucketLayout | None
) -> tuple[Buckets, BucketLayout | None] | str:
    """A successful bucket answer's groups, and the layout to decode the next one with
    (``layout`` itself when this answer matched it); an error message if malformed."""
    if layout is not None:
        skeleton, values = _split(body)
        if len(values) == layout.size and skeleton == layout.skeleton:
            return layout.decode(values), layout
    try:
        doc = json.loads(body)
    except ValueError:
        return f"not JSON: {body[:120]!r}"
    result = _series(doc)
    if isinstance(result, str):
        return result
    try:  # comprehensions, not a loop with a try per series: ~2x faster
        metrics = [series["metric"] for series in result]
        texts = [series["value"][1] for series in result]
        numbers = [float(text) for text in texts]
        les = [m.get("le") for m in metrics]
        groups = [(m.get("namespace", ""), m.get("llm_target", "")) for m in metrics]
    except (KeyError, IndexError, TypeError, ValueError, AttributeError):
        return f"unexpected series in {result!r:.120}"
    pairs: dict[Group, list[tuple[int, float]]] = {}  # group -> (series index, bound)
    for i, (group, le) in enumerate(zip(groups, les, strict=True)):
        bound = parse_le(le) if isinstance(le, str) else None
        if bound is not None:
            pairs.setdefault(group, []).append((i, bound))
    new = _layout(body, numbers, pairs)
    if new is not None:
        return new.fill(numbers), new
    return Buckets(other={g: [(b, numbers[i]) for i, b in s] for g, s in pairs.items()}), None


def _layout(
    body: bytes, numbers: list[float], pairs: dict[Group, list[tuple[int, float]]]
) -> BucketLayout | None:
    """The layout of a parsed answer, if its values split out of the text as parsed
    (the same numbers in the same order)."""
    skeleton, values = _split(body)
    if len(values) != len(numbers):
        return None
    try:
        split = list(map(float, values))
    except ValueError:
        return None
    if split != numbers and not all(map(_same, split, numbers)):
        return None
    shapes: dict[tuple[float, ...], int] = {}
    ordered: dict[Group, list[tuple[int, float]]] = {}
    for group, s in pairs.items():
        ordered[group] = o = sorted(s, key=lambda p: p[1])
        bounds = tuple(b for _, b in o)
        shapes[bounds] = shapes.get(bounds, 0) + 1
    common = max(shapes, key=shapes.__getitem__, default=())
    valid = (
        len(common) >= 2
        and common[-1] == math.inf
        and len(set(common)) == len(common)
        and not any(map(math.isnan, common))
    )
    groups: list[Group] = []
    perm: list[int] = []
    other: dict[Group, list[tuple[int, float]]] = {}
    for group, o in ordered.items():
        if valid and tuple(b for _, b in o) == common:
            groups.append(group)
            perm.extend(i for i, _ in o)
        else:
            other[group] = o
    if not valid:
        common = ()
    return BucketLayout(
        skeleton,
        len(values),
        groups,
        common,
        perm,
        other,
    )


def _same(a: float, b: float) -> bool:
    return a == b or (a != a and b != b)  # NaN == NaN here
