"""Prometheus text format 0.0.4 and OpenMetrics 1.0 parser that builds only wanted families.

Why not `prometheus_client.parser`: it parses every line of a ~500-line vLLM page
character by character (~6 ms) while an adapter needs about ten families. `parse_page`
with ``families=`` finds each wanted family with C string searches (`str.rfind` proves
where its lines start and end), reads the run of lines there (wanted families that
follow each other in one run) and parses only those lines; `strict=True` (or
``families=None``) parses and validates every line. What the fast mode learns from a
page is kept for the next one, keyed by text and never by values (line heads
``name{labels}`` with their parsed label sets, HELP/TYPE lines, comment blocks, where
families were): a page that changed is read exactly as the strict mode reads it, only
slower. A page whose skeleton (text without digits and value signs) was seen twice is read
through its *layout* by line index, with C loops only (see `_Layout`). All caches are
bounded in bytes (see CACHE_BUDGET_BYTES) and a page is bounded in wanted lines
(MAX_WANTED_LINES). `clear_caches` forgets it all. Everything here is a plain function
of its text (no event loop, no I/O): it runs in worker threads or processes alike.

Correctness rules (both modes, for every line they parse):
- label values: escapes ``\\\\``, ``\\"``, ``\\n``; other escapes are kept verbatim like
  `prometheus_client` does; label names ``[a-zA-Z_][a-zA-Z0-9_]*``, no duplicates;
- values and timestamps: decimal floats with exponents, ``NaN``, ``+Inf``/``-Inf``
  (case-insensitive), no ``_`` separators; an optional OpenMetrics exemplar
  (``# {labels} value [timestamp]``) is checked and ignored;
- ``# HELP`` / ``# TYPE`` / ``# UNIT`` / ``# EOF``; a second ``TYPE`` for one name and an
  unknown type are errors; anything after ``# EOF`` is an error;
- a sample belongs to a family by its name and the family's type (``x_bucket`` belongs to
  histogram ``x``, ``x_total``/``x_created`` to counter ``x``, in either format); samples
  with no ``TYPE`` are ``untyped`` families of their own name.
Invalid input raises `ParseError` (with the 1-based line) and nothing else.
The fast mode rejects pages whose first line cannot start an exposition page (HTML,
JSON), validates every line of the wanted families and the comment lines around them
(so ``# EOF`` followed by a wanted line is an error), but does not validate lines of
families it was not asked for. A wanted family split into several groups (invalid in
both formats, accepted by the strict mode) is still read whole: after each group the
rest of the page is searched for more.
"""

from __future__ import annotations

import math
import operator
import re
import sys
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any, Generic, NamedTuple, TypeVar

from autoscaler.errors import ParseError

__all__ = [
    "CACHE_BUDGET_BYTES",
    "CACHE_ENTRY_MAX_BYTES",
    "MAX_WANTED_LINES",
    "PAGE_CACHE_ALLOWANCE_BYTES",
    "Family",
    "HistogramData",
    "Page",
    "Sample",
    "cache_bytes",
    "clear_caches",
    "merge_histogram",
    "parse_page",
]

TYPES = frozenset(
    {
        "counter",
        "gauge",
        "histogram",
        "gaugehistogram",
        "summary",
        "untyped",
        "unknown",
        "info",
        "stateset",
    }
)
_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("", "_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum", "_created"),
    "gaugehistogram": ("_bucket", "_gcount", "_gsum"),
    "summary": ("", "_count", "_sum", "_created"),
    "info": ("", "_info"),
    "stateset": ("",),
    "untyped": ("",),
    "unknown": ("",),
}
_ALL_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
_NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*')
_EXEMPLAR_RE = re.compile(
    r'#[ \t]*\{((?:[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*,?)*)[ \t]*\}'
    r"[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$"
)
_ESCAPE_RE = re.compile(r'\\([\\"n])')
_FIRST_CHARS = frozenset("#abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
_LEADING_BLANKS = re.compile(r"\s*")


class Sample(NamedTuple):
    """One exposition line: full sample name (with suffix), labels, value, timestamp.

    A NamedTuple rather than a frozen dataclass: equally immutable, but built in half
    the time (a fast parse creates one per wanted line).
    """

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None


class _Labels(dict[str, str]):
    """A parsed label set; ``bucket`` memoizes (le, series key) for `merge_histogram`.

    Label sets are cached by their text and shared between scrapes, so the ``le`` float
    and the series identity of a bucket line are computed once per distinct line, not
    once per scrape. Never mutate the mapping itself.
    """

    __slots__ = ("bucket",)

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.bucket: tuple[float, frozenset[tuple[str, str]]] | None = None


_NO_LABELS: Mapping[str, str] = _Labels()


class Family(NamedTuple):
    """A metric family keyed by its base name (counters without ``_total``).

    ``origin`` is the line of the family's first sample, or (page text with a leading
    newline, offset of that line) when the fast parser found it: counting newlines
    costs as much as the parse, so the line is only counted when someone asks.
    A NamedTuple for the same reason as `Sample`.
    """

    name: str
    type: str
    samples: tuple[Sample, ...]
    origin: int | tuple[str, int]
    help: str | None = None

    @property
    def line(self) -> int:
        """The 1-based line of the family's first sample (for error messages)."""
        if isinstance(self.origin, int):
            return self.origin
        text, pos = self.origin
        return text.count("\n", 0, pos)


@dataclass(frozen=True, slots=True)
class Page:
    """The parsed families (only the wanted ones in fast mode)."""

    families: Mapping[str, Family]
    openmetrics: bool = False

    def get(self, name: str) -> Family | None:
        return self.families.get(name)


@dataclass(frozen=True, slots=True)
class HistogramData:
    """Cumulative bucket counts by ascending upper bound (the last bound is +Inf)."""

    bounds: tuple[float, ...]
    counts: tuple[float, ...]
    count: float | None = None
    sum: float | None = None

    @property
    def total(self) -> float:
        return self.counts[-1] if self.counts else 0.0


# --- caches: bounded in bytes --------------------------------------------------------
# Everything the fast mode learns from pages is text-keyed and could be as large as the
# text a pod sends, so every cache is accounted in bytes (`sys.getsizeof` of what an entry
# holds, shared objects counted in each holder, i.e. over- rather than under-counted):
# - one entry over CACHE_ENTRY_MAX_BYTES (a 4 MB label value, a huge HELP line) is never
#   stored: such a line is parsed every time, as a first page would be;
# - one page may add at most PAGE_CACHE_ALLOWANCE_BYTES of new entries (what one scrape of
#   one pod can push into the shared caches); the rest of that page is parsed uncached;
# - each cache has a share of CACHE_BUDGET_BYTES; a full cache evicts its oldest entries.
# So a hostile pod costs CPU on its own scrapes, never memory beyond the budget.
CACHE_BUDGET_BYTES = 24 * 1024 * 1024
CACHE_ENTRY_MAX_BYTES = 4096
PAGE_CACHE_ALLOWANCE_BYTES = 256 * 1024
_MIB = 1024 * 1024
# Shares of CACHE_BUDGET_BYTES: label sets 4, line heads 4, layouts 12 (about 40 kB per
# distinct page layout, e.g. 300 models), the rest 1 MiB each.
_LAYOUT_BUDGET_BYTES = CACHE_BUDGET_BYTES - 12 * _MIB
# Pages up to this size are read through a remembered layout (see `_parse_fast`); larger
# ones always take the walk, so no single C call on them holds the GIL for long.
LAYOUT_MAX_PAGE_BYTES = 1024 * 1024
LAYOUTS_PER_SKELETON = 8
# Lines of the wanted families one fast parse reads at most (~10-30 ms of CPU cold): a
# page with more (200k series of a wanted family) is refused whole with `ParseError`, so
# the pod counts as unread rather than stalling the event loop for seconds.
MAX_WANTED_LINES = 10_000

_K = TypeVar("_K")
_V = TypeVar("_V")
_T = TypeVar("_T")
_LOCK = threading.Lock()  # insertions/evictions (pages may be parsed in worker threads)
_PAGE = threading.local()  # .allowance: bytes the current page may still add


class _ByteCache(dict[_K, _V], Generic[_K, _V]):
    """A dict whose entries are accounted in bytes, evicted oldest first past its budget.

    Lookups are plain `dict.get` (the hot path); only `put` accounts.
    """

    __slots__ = ("budget_bytes", "entry_max_bytes", "sizes", "used_bytes")

    def __init__(self, budget_bytes: int, entry_max_bytes: int = CACHE_ENTRY_MAX_BYTES) -> None:
        super().__init__()
        self.budget_bytes = budget_bytes
        self.entry_max_bytes = entry_max_bytes
        self.sizes: dict[_K, int] = {}
        self.used_bytes = 0

    def put(self, key: _K, value: _V, *parts: object) -> None:
        """Store ``value`` (accounted as ``_size(*parts)``) if it fits the per-entry cap
        and the page's allowance; nothing is measured once the allowance is spent."""
        if getattr(_PAGE, "allowance", PAGE_CACHE_ALLOWANCE_BYTES) > 0:
            self.put_sized(key, value, _size(*parts))

    def put_sized(self, key: _K, value: _V, size_bytes: int) -> None:
        """`put` with the size already known."""
        if size_bytes > self.entry_max_bytes:
            return
        allowance: int = getattr(_PAGE, "allowance", PAGE_CACHE_ALLOWANCE_BYTES)
        if size_bytes > allowance:
            return
        _PAGE.allowance = allowance - size_bytes
        with _LOCK:
            old = self.sizes.pop(key, None)
            if old is not None:
                self.used_bytes -= old
            self.used_bytes += size_bytes
            self.sizes[key] = size_bytes
            self[key] = value
            while self.used_bytes > self.budget_bytes and self.sizes:
                oldest = next(iter(self.sizes))
                self.used_bytes -= self.sizes.pop(oldest)
                self.pop(oldest, None)

    def discard(self, key: _K) -> None:
        with _LOCK:
            self.used_bytes -= self.sizes.pop(key, 0)
            self.pop(key, None)

    def clear(self) -> None:
        with _LOCK:
            super().clear()
            self.sizes.clear()
            self.used_bytes = 0


def _size(*parts: object) -> int:
    """Accounted bytes of an entry made of ``parts`` (a mapping counts its keys and values)."""
    total = 0
    for part in parts:
        total += sys.getsizeof(part)
        if isinstance(part, dict):
            for k, v in part.items():
                total += sys.getsizeof(k) + sys.getsizeof(v)
        elif isinstance(part, tuple):
            total += _size(*part) - sys.getsizeof(())
    return total


def _new_page() -> None:
    """Reset the per-page cache allowance (called once per parse)."""
    _PAGE.allowance = PAGE_CACHE_ALLOWANCE_BYTES


def _unescape(value: str) -> str:
    return _ESCAPE_RE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def _float(text: str, what: str, line: int) -> float:
    if "_" in text:
        raise ParseError(f"invalid {what} {text!r}: digit separators are not allowed", line)
    try:
        return float(text)
    except ValueError:
        raise ParseError(f"invalid {what} {text!r}: not a float", line) from None


def _labels_slow(rest: str, line: int) -> tuple[dict[str, str], str]:
    """Labels with escapes or blanks: regex walk. ``rest`` starts with ``{``."""
    labels = _Labels()
    pos = 1
    n = len(rest)
    while True:
        while pos < n and rest[pos] in " \t":
            pos += 1
        if pos < n and rest[pos] == "}":
            return labels, rest[pos + 1 :]
        m = _LABEL_RE.match(rest, pos)
        if m is None:
            raise ParseError(f'invalid label set {rest[:80]!r}: expected name="value"', line)
        key, raw = m.group(1), m.group(2)
        if key in labels:
            raise ParseError(f"duplicate label {key!r}", line)
        labels[key] = _unescape(raw) if "\\" in raw else raw
        pos = m.end()
        if pos < n and rest[pos] == ",":
            pos += 1
        elif pos < n and rest[pos] == "}":
            return labels, rest[pos + 1 :]
        else:
            raise ParseError(f"invalid label set {rest[:80]!r}: expected ',' or '}}'", line)


_LABEL_CACHE: _ByteCache[str, Mapping[str, str]] = _ByteCache(4 * _MIB)


def _labels_fast(rest: str, line: int) -> tuple[Mapping[str, str], str]:
    """Labels without backslashes: quotes are pure delimiters, so split on them.

    Label sets repeat on every scrape of a pod, so parsed sets are cached by their text
    (bounded; cleared when full). Cached mappings are shared: never mutate them.
    """
    end = rest.find("}")
    if end > 0 and rest.count('"', 0, end) % 2 == 0:
        cached = _LABEL_CACHE.get(rest[1:end])
        if cached is not None:
            return cached, rest[end + 1 :]
    while end >= 0 and rest.count('"', 0, end) % 2:
        end = rest.find("}", end + 1)
    if end < 0:
        raise ParseError(f"unterminated label set {rest[:80]!r}", line)
    raw = rest[1:end]
    if not raw:
        return _NO_LABELS, rest[end + 1 :]
    labels = _Labels()
    pieces = raw.split('",')
    last = len(pieces) - 1
    for i, piece in enumerate(pieces):
        if i == last:
            if not piece:  # trailing comma
                break
            if piece[-1:] != '"':
                return _labels_slow(rest, line)
            piece = piece[:-1]
        key, sep, value = piece.partition('="')
        if not sep or not key.isidentifier() or not key.isascii() or '"' in value:
            return _labels_slow(rest, line)
        if key in labels:
            raise ParseError(f"duplicate label {key!r}", line)
        labels[key] = value
    _LABEL_CACHE.put(raw, labels, raw, labels)
    return labels, rest[end + 1 :]


def _parse_labels(rest: str, line: int) -> tuple[Mapping[str, str], str]:
    """Split what follows a sample name into its label set and the text after it."""
    if rest[:1] == "{":
        return (_labels_slow if "\\" in rest else _labels_fast)(rest, line)
    return _NO_LABELS, rest


def _parse_tail(tail: str, line: int) -> tuple[float, float | None]:
    """Parse `` value [timestamp] [exemplar]`` (the text after the label set)."""
    if not tail or tail[0] not in " \t":
        raise ParseError(f"expected a blank then a value, got {tail[:40]!r}", line)
    hash_at = tail.find("#")
    if hash_at >= 0:
        m = _EXEMPLAR_RE.match(tail, hash_at)
        if m is None:
            raise ParseError(f"invalid exemplar {tail[hash_at:][:80]!r}", line)
        _float(m.group(2), "exemplar value", line)
        if m.group(3) is not None:
            _float(m.group(3), "exemplar timestamp", line)
        tail = tail[:hash_at]
    parts = tail.split()
    if len(parts) == 1:
        return _float(parts[0], "value", line), None
    if len(parts) == 2:
        ts = _float(parts[1], "timestamp", line)
        if math.isnan(ts) or math.isinf(ts):
            raise ParseError(f"invalid timestamp {parts[1]!r}", line)
        return _float(parts[0], "value", line), ts
    if not parts:
        raise ParseError("missing value", line)
    raise ParseError(f"expected 'value [timestamp]', got {tail.strip()[:60]!r}", line)


def _parse_rest(rest: str, line: int) -> tuple[Mapping[str, str], float, float | None]:
    """Parse what follows a sample name: ``{labels}`` value [timestamp] [exemplar]."""
    labels, tail = _parse_labels(rest, line)
    value, ts = _parse_tail(tail, line)
    return labels, value, ts


@dataclass(slots=True)
class _Builder:
    """Collects TYPE/HELP declarations and samples, then resolves families."""

    decl: dict[str, tuple[str, str]] = field(default_factory=dict)  # TYPE name -> (key, type)
    keys: dict[str, str] = field(default_factory=dict)  # family key -> type
    helps: dict[str, str] = field(default_factory=dict)
    resolved: dict[str, tuple[str, str] | None] = field(default_factory=dict)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    first_line: dict[str, int] = field(default_factory=dict)

    def declare(self, name: str, kind: str, line: int) -> None:
        if kind not in TYPES:
            raise ParseError(f"unknown metric type {kind!r} for {name!r}", line)
        if name in self.decl:
            raise ParseError(f"second TYPE line for {name!r}", line)
        key = name[:-6] if kind == "counter" and name.endswith("_total") else name
        self.decl[name] = (key, kind)
        self.keys.setdefault(key, kind)

    def resolve(self, name: str) -> tuple[str, str]:
        """The family (key, type) a sample name belongs to."""
        hit = self.resolved.get(name)
        if hit is not None:
            return hit
        d = self.decl.get(name)
        memo = _RESOLVE.get(name)  # the answer depends only on these two declarations
        if (
            memo is not None
            and memo[0] == d
            and (memo[1] is None or self.keys.get(memo[1]) == memo[2])
        ):
            self.resolved[name] = memo[3]
            return memo[3]
        found: tuple[str, str] | None = None
        base: str | None = None
        kind: str | None = None
        if d is not None and name[len(d[0]) :] in _SUFFIXES[d[1]]:
            found = d
        else:
            for suffix in _ALL_SUFFIXES:
                if name.endswith(suffix):  # at most one suffix ends a name
                    base = name[: -len(suffix)]
                    kind = self.keys.get(base)
                    if kind is not None and suffix in _SUFFIXES[kind]:
                        found = (base, kind)
                    break
        if found is None:
            found = (name, "untyped")
        self.resolved[name] = found
        _RESOLVE.put(name, (d, base, kind, found), name, name, d, base, kind, found)
        return found

    def add(self, name: str, rest: str, line: int, wanted: Collection[str] | None) -> None:
        key, _kind = self.resolve(name)
        if wanted is not None and key not in wanted:
            return
        labels, value, ts = _parse_rest(rest, line)
        bucket = self.samples.get(key)
        if bucket is None:
            bucket = self.samples[key] = []
            self.first_line[key] = line
        bucket.append(Sample(name, labels, value, ts))

    def build(self, openmetrics: bool) -> Page:
        families = {
            key: Family(
                key,
                self.resolve_type(key),
                tuple(samples),
                self.first_line[key],
                self.helps.get(key),
            )
            for key, samples in self.samples.items()
        }
        return Page(families, openmetrics)

    def resolve_type(self, key: str) -> str:
        return self.keys.get(key, "untyped")


def _comment(builder: _Builder, text: str, line: int) -> bool:
    """Handle a ``#`` line; returns True on ``# EOF``."""
    parts = text[1:].split(None, 2)
    if not parts:
        return False
    word = parts[0]
    if word == "EOF" and len(parts) == 1:
        return True
    if word in ("TYPE", "HELP", "UNIT") and text[1:2] in (" ", "\t"):
        if len(parts) < 2 or _NAME_RE.fullmatch(parts[1]) is None:
            raise ParseError(f"{word} line without a valid metric name: {text[:80]!r}", line)
        if word == "TYPE":
            if len(parts) < 3:
                raise ParseError(f"TYPE line without a type: {text[:80]!r}", line)
            builder.declare(parts[1], parts[2].strip(), line)
        elif word == "HELP":
            builder.helps[parts[1]] = parts[2] if len(parts) > 2 else ""
    return False  # other comments are allowed in text format 0.0.4


def _parse_strict(text: str, wanted: Collection[str] | None) -> Page:
    builder = _Builder()
    eof = False
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if eof:
            if line.strip():
                raise ParseError("content after '# EOF'", lineno)
            continue
        if not line or line.isspace():
            continue
        if line[0] == "#":
            eof = _comment(builder, line, lineno)
            continue
        m = _NAME_RE.match(line)
        if m is None:
            raise ParseError(f"expected a metric name, got {line[:40]!r}", lineno)
        rest = line[m.end() :]
        if not rest or rest[0] not in "{ \t":
            raise ParseError(f"invalid metric name in {line[:60]!r}", lineno)
        if wanted is None:
            builder.add(m.group(0), rest, lineno, None)
        else:
            # validate every line, keep only wanted families
            key, _ = builder.resolve(m.group(0))
            if key in wanted:
                builder.add(m.group(0), rest, lineno, None)
            else:
                _parse_rest(rest, lineno)
    return builder.build(eof)


# Sample-line heads (``name{labels}``) already parsed, with their name and label set.
# A line ``head value`` whose head is here skips the label parse; only heads of lines
# the general path accepted as exactly ``head`` + one blank + a value are stored, so a
# hit always parses as the general path would. Shared across pages (bounded).
_HEADS: _ByteCache[str, tuple[str, Mapping[str, str]]] = _ByteCache(4 * _MIB)
_HEADS_MAX = 16384  # entries of the caches keyed by wanted names (bounded by the caller)
# Plain HELP/TYPE lines already read: (is TYPE, name, type or help text).
_DECLS: _ByteCache[str, tuple[bool, str, str]] = _ByteCache(_MIB)
# Sample name -> (its declaration, base name, base type, family) from the last page; the
# family is reused while the two declarations it was derived from are the same.
_RESOLVE: _ByteCache[
    str, tuple[tuple[str, str] | None, str | None, str | None, tuple[str, str]]
] = _ByteCache(_MIB)
# The comment block above each family's first line, with its declarations (see `back`).
_ABOVE: _ByteCache[str, tuple[str, tuple[tuple[int, bool, str, str], ...]]] = _ByteCache(_MIB)
# Where each family's first line was on the last page parsed (a search start, see `_first`).
_FIRST_HINT: dict[str, int] = {}
# Per wanted family set: its order on the page and bases to declare (see `_plan`).
_PLANS: dict[frozenset[str], tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {}
# Bytes of each family's last group (plus slack): the chunk size of its next walk.
_GROUP_BYTES: dict[str, int] = {}
# Layouts of pages seen at least twice, by (wanted families, hash of the page skeleton,
# n < LAYOUTS_PER_SKELETON: pods whose own label values differ only in digits share a
# skeleton, not a layout);
# skeletons seen once (a layout is built on the second sighting: a pod whose layout
# changes on every scrape never pays for building one).
_LAYOUTS: _ByteCache[tuple[frozenset[str], int, int], _Layout] = _ByteCache(
    _LAYOUT_BUDGET_BYTES, 256 * 1024
)
_SKELETONS: _ByteCache[tuple[frozenset[str], int], bool] = _ByteCache(_MIB)
_WANTED: dict[tuple[str, ...], frozenset[str]] = {}  # keyed by adapters' family tuples
_BYTE_CACHES: tuple[_ByteCache[Any, Any], ...] = (
    _LABEL_CACHE,
    _HEADS,
    _DECLS,
    _RESOLVE,
    _ABOVE,
    _LAYOUTS,
    _SKELETONS,
)


def clear_caches() -> None:
    """Forget everything learned from earlier pages (a pod's first scrape, benchmarks).

    The caches only make parsing faster: results never depend on them.
    """
    for cache in _BYTE_CACHES:
        cache.clear()
    for counted in (_FIRST_HINT, _PLANS, _GROUP_BYTES):
        counted.clear()


def cache_bytes() -> int:
    """Bytes accounted by the parser's text-keyed caches (never over CACHE_BUDGET_BYTES)."""
    return sum(cache.used_bytes for cache in _BYTE_CACHES)


def _line_no(scan: str, pos: int) -> int:
    """The 1-based line at offset ``pos`` of ``scan`` (the page with a leading newline)."""
    return scan.count("\n", 0, pos)


def _relined(exc: ParseError, scan: str, pos: int) -> ParseError:
    """``exc`` raised with line 0 (unknown), with the line of offset ``pos`` instead."""
    return ParseError(str(exc).removeprefix("line 0: "), _line_no(scan, pos))


def _simple_decl(scan: str, pos: int, end: int) -> tuple[bool, str, str] | None:
    """(is TYPE, name, type or help text) of a plain ``# TYPE``/``# HELP`` line, else None."""
    if not scan.startswith(("# TYPE ", "# HELP "), pos):
        return None
    name_end = scan.find(" ", pos + 7, end)
    if name_end < 0:
        return None
    name = scan[pos + 7 : name_end]
    if not name or _NAME_RE.fullmatch(name) is None:
        return None
    body = scan[name_end + 1 : end].lstrip()
    if scan[pos + 2] == "T":
        body = body.strip()
        return (True, name, body) if body else None
    return False, name, body


@dataclass(slots=True)
class _Walk:
    """One fast parse: the page, its declarations and the comment lines already read."""

    scan: str
    builder: _Builder
    seen: set[int] = field(default_factory=set)
    first_at: dict[str, int] = field(default_factory=dict)  # family -> its first sample
    lines_left: int = MAX_WANTED_LINES  # lines this parse may still read (see `group`)

    def comment(
        self, pos: int, end: int, family: str | tuple[str, ...], check_only: bool = False
    ) -> bool:
        """Read the comment line at ``pos``; False when it declares a name not ``family*``.

        ``# EOF`` followed by anything but blanks is an error here, so a wanted line
        after ``# EOF`` never goes unnoticed.
        """
        scan = self.scan
        if scan.startswith(("# TYPE ", "# HELP "), pos):  # the usual form: no split
            name_end = scan.find(" ", pos + 7, end)
            name = scan[pos + 7 : end if name_end < 0 else name_end]
            if name and "\t" not in name:
                if not name.startswith(family):
                    return False
                if check_only or pos in self.seen:
                    return True
                body = "" if name_end < 0 else scan[name_end + 1 : end].lstrip()
                if scan[pos + 2] == "H" and _NAME_RE.fullmatch(name):
                    self.seen.add(pos)
                    self.builder.helps[name] = body
                    return True
                if body and _NAME_RE.fullmatch(name):
                    self.seen.add(pos)
                    try:
                        self.builder.declare(name, body.strip(), 0)
                    except ParseError as exc:
                        raise _relined(exc, scan, pos) from None
                    return True
        line = scan[pos:end]
        parts = line[1:].split(None, 2)
        if not parts:
            return True
        word = parts[0]
        if word == "EOF" and len(parts) == 1:
            rest = scan[end:]
            if rest.strip():
                after = len(scan) - len(rest.lstrip())
                raise ParseError("content after '# EOF'", _line_no(scan, after))
            return True
        if word in ("TYPE", "HELP", "UNIT") and line[1:2] in (" ", "\t"):
            if len(parts) > 1 and not parts[1].startswith(family):
                return False
            if not check_only and pos not in self.seen:
                self.seen.add(pos)
                try:
                    _comment(self.builder, line, 0)
                except ParseError as exc:
                    raise _relined(exc, scan, pos) from None
        return True

    def declaration_of(self, name: str) -> None:
        """Read the ``# TYPE`` lines declaring family ``name`` (as ``name`` or
        ``name_total``), wherever they are on the page."""
        scan = self.scan
        needle = "\n# TYPE " + name
        hit = scan.find(needle)
        while hit >= 0:
            end = scan.find("\n", hit + 1)
            end = len(scan) if end < 0 else end
            rest = scan[hit + len(needle) : end]
            if rest[:1] in (" ", "\t") or (rest.startswith("_total") and rest[6:7] in (" ", "\t")):
                self.comment(hit + 1, end, name)
            hit = scan.find(needle, end)

    def back(self, nl: int, family: str) -> None:
        """Read, top down, the comment lines just above the line after newline ``nl``.

        The block is usually the same text on every page of a pod (HELP and TYPE
        lines), so its declarations are remembered with its text and replayed when the
        same text sits in the same place, above a line that is not a comment.
        """
        scan = self.scan
        cached = _ABOVE.get(family)
        if cached is not None:
            block, effects = cached
            start = nl + 1 - len(block)
            if start > 0 and scan[start - 1] == "\n" and scan.startswith(block, start):
                above = scan.rfind("\n", 0, start - 1) + 1
                if scan[above : above + 1] != "#":
                    self.replay(start, effects)
                    return
        lines: list[tuple[int, int]] = []
        while nl > 0:
            prev = scan.rfind("\n", 0, nl)
            if scan[prev + 1 : prev + 2] != "#" or not self.comment(prev + 1, nl, family, True):
                break
            lines.append((prev + 1, nl))
            nl = prev
        lines.reverse()
        for start, end in lines:
            self.comment(start, end, family)
        block_start = lines[0][0] if lines else nl + 1
        recorded: list[tuple[int, bool, str, str]] = []
        for start, end in lines:
            decl = _simple_decl(scan, start, end)
            if decl is None:  # an unusual comment: always read in full
                _ABOVE.discard(family)
                return
            recorded.append((start - block_start, *decl))
        entry = (scan[block_start : (lines[-1][1] + 1) if lines else block_start], tuple(recorded))
        _ABOVE.put(family, entry, family, entry)

    def replay(self, start: int, effects: tuple[tuple[int, bool, str, str], ...]) -> None:
        """Apply remembered declarations of a comment block found at offset ``start``."""
        builder = self.builder
        for offset, is_type, name, body in effects:
            pos = start + offset
            if pos in self.seen:
                continue
            self.seen.add(pos)
            if is_type:
                try:
                    builder.declare(name, body, 0)
                except ParseError as exc:
                    raise _relined(exc, self.scan, pos) from None
            else:
                builder.helps[name] = body

    def group(self, pos: int, collect: dict[str, list[Sample]], prefixes: tuple[str, ...]) -> int:
        """Parse the run of lines from offset ``pos`` whose names start with ``prefixes``.

        Samples of the families in ``collect`` go to their lists; samples of other
        families whose names start with a prefix (``x_created`` declared as its own
        gauge) are stepped over. Wanted families that follow each other on the page
        are read in one run. Returns the offset of the newline before the line that
        ends the run (a line or declaration of another name). Lines are split in
        chunks sized from the previous run, so a line costs no `find`.
        """
        scan = self.scan
        n = len(scan)
        heads = _HEADS
        resolved = self.builder.resolved
        new = tuple.__new__
        get = collect.get
        first_at = self.first_at
        sizing = prefixes[0]
        decls = _DECLS
        seen = self.seen
        helps = self.builder.helps
        declared = self.builder.decl
        keys = self.builder.keys
        start = pos
        while pos < n:
            chunk_end = pos + _GROUP_BYTES.get(sizing, 4096)
            lines = scan[pos:chunk_end].split("\n")
            if chunk_end < n:
                lines.pop()  # maybe cut short: read it with the next chunk
                if not lines:
                    _GROUP_BYTES[sizing] = 2 * _GROUP_BYTES.get(sizing, 4096)
                    continue
            self.lines_left -= len(lines)
            if self.lines_left < 0:
                raise _too_many_lines(scan, pos)
            for line in lines:
                head, _, value_text = line.rpartition(" ")
                hit = heads.get(head)
                if hit is not None and "_" not in value_text:
                    name, labels = hit
                    key = (resolved.get(name) or self.builder.resolve(name))[0]
                    rows = get(key)
                    if rows is None:
                        if not name.startswith(prefixes):
                            _GROUP_BYTES[sizing] = pos - start + 256
                            return pos - 1
                    else:
                        if not rows:
                            first_at[key] = pos
                        try:
                            rows.append(new(Sample, (name, labels, float(value_text), None)))
                        except ValueError:
                            self.general(pos, line, collect, prefixes)  # raises with the line
                elif (decl := decls.get(line)) is not None:  # a HELP/TYPE line seen before
                    if not decl[1].startswith(prefixes):
                        _GROUP_BYTES[sizing] = pos - start + 256
                        return pos - 1
                    if pos not in seen:
                        seen.add(pos)
                        name, kind = decl[1], decl[2]
                        if not decl[0]:
                            helps[name] = kind
                        elif name in declared or kind not in TYPES:
                            try:  # raises the precise error
                                self.builder.declare(name, kind, 0)
                            except ParseError as exc:
                                raise _relined(exc, scan, pos) from None
                        else:  # `_Builder.declare`, inline
                            key = (
                                name[:-6] if kind == "counter" and name.endswith("_total") else name
                            )
                            declared[name] = (key, kind)
                            keys.setdefault(key, kind)
                elif not self.general(pos, line, collect, prefixes):
                    _GROUP_BYTES[sizing] = pos - start + 256
                    return pos - 1
                pos += len(line) + 1
        return n

    def general(
        self, pos: int, line: str, collect: dict[str, list[Sample]], prefixes: tuple[str, ...]
    ) -> bool:
        """A line whose head is not cached: blank, comment, new label set, or an error.

        Returns False when the line ends the run (it does not start with a prefix).
        """
        if not line or line.isspace():
            return True
        if line[0] == "#":
            decl = _DECLS.get(line)
            if decl is None:
                decl = _simple_decl(line, 0, len(line))
                if decl is None:  # not a plain HELP/TYPE line
                    return self.comment(pos, pos + len(line), prefixes)
                _DECLS.put(line, decl, line, decl)
            if not decl[1].startswith(prefixes):
                return False
            self.replay(pos, ((0, *decl),))
            return True
        if not line.startswith(prefixes):
            return False
        m = _NAME_RE.match(line)
        if m is None:  # pragma: no cover - the line starts with a family's name
            raise ParseError(f"expected a metric name, got {line[:40]!r}", _line_no(self.scan, pos))
        name = m.group(0)
        rest = line[m.end() :]
        if not rest or rest[0] not in "{ \t":
            raise ParseError(f"invalid metric name in {line[:60]!r}", _line_no(self.scan, pos))
        try:
            labels, tail = _parse_labels(rest, 0)
            value, ts = _parse_tail(tail, 0)
        except ParseError as exc:
            raise _relined(exc, self.scan, pos) from None
        key = self.builder.resolve(name)[0]
        rows = collect.get(key)
        if rows is not None:
            if not rows:
                self.first_at[key] = pos
            rows.append(Sample(name, labels, value, ts))
        if ts is None and tail[:1] == " " and tail.split() == [tail[1:]]:
            head = line[: len(line) - len(tail)]
            _HEADS.put(head, (name, labels), head, name, labels)
        return True


def _first(scan: str, needle: str, last: int) -> int:
    """The offset of the first ``needle`` in ``scan`` (``last`` is the last one).

    `str.rfind` runs 2-3x faster than `str.find` here, so the search starts from where
    the family began on the previous page and proves, searching backwards, that no
    earlier line has the name; without a hint (or if the layout moved) it is a plain
    forward search. Exact either way: the hint only picks the search.
    """
    hint = _FIRST_HINT.get(needle)
    if hint is not None and hint <= last:
        found = scan.rfind(needle, 0, hint + len(needle))
        if found < 0:
            found = scan.find(needle, hint)
        elif scan.rfind(needle, 0, found) >= 0:
            found = scan.find(needle)
    else:
        found = scan.find(needle)
    _FIRST_HINT[needle] = found
    return found


def _plan(wanted: frozenset[str]) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...]]:
    """The wanted families in page order (as on the last page) with their search needles,
    and the bases whose TYPE lines decide where a wanted ``x_count``-like name belongs.

    Page order lets a run started for one family read the wanted families that follow
    it too (see `_parse_fast`). Computed once per family set, after a first page.
    """
    order = tuple((f, "\n" + f) for f in sorted(wanted, key=lambda f: _FIRST_HINT.get("\n" + f, 0)))
    bases = tuple(f[: f.rfind("_")] for f in sorted(wanted) if f.endswith(_ALL_SUFFIXES))
    if any("\n" + f in _FIRST_HINT for f in wanted):  # else: no page seen yet
        if len(_PLANS) >= 1024:
            _PLANS.clear()
        _PLANS[wanted] = (order, bases)
    return order, bases


def _too_many_lines(scan: str, pos: int) -> ParseError:
    return ParseError(
        f"page refused: more than max_lines={_PAGE.max_lines} lines of the wanted families"
        " (a bound on the parse time per page)",
        _line_no(scan, pos),
    )


# --- layouts: a live pod's next page, read by its previous page's layout ---------------
# A pod's pages differ from scrape to scrape in their values only. The skeleton of a page
# (its bytes without digits, '.', '+', '-' and 'e') is the same on both pages then, and
# so is every line's skeleton (newlines are kept): a line that could belong to a wanted
# family (its skeleton starts with a wanted name's skeleton, or for a comment contains
# one) was such a line on the page the layout was built from. Those lines are compared
# exactly (sample lines by their text before the value, comments whole, the page from a
# line holding "EOF" on whole); their values are parsed as the walk parses them. Any
# difference, an odd value or a changed skeleton -> the walk reads the page.
_SKELETON_DELETE = b"0123456789.+-e"


_cut: Callable[[str, slice], str] = operator.getitem


def _picker(indexes: list[int]) -> Callable[[list[_T]], tuple[_T, ...]]:
    """The items at ``indexes`` as a tuple (`operator.itemgetter` for two or more)."""
    if len(indexes) >= 2:
        return operator.itemgetter(*indexes)
    if len(indexes) == 1:
        only = indexes[0]
        return lambda items: (items[only],)
    return lambda items: ()


class _LaidOut(tuple[Sample, ...]):
    """A family's samples read through a layout, with their values and the layout's
    `merge_histogram` memo (the same series in the same order on every page)."""

    values: list[float]
    memo: list[_Merge | None]


@dataclass(frozen=True, slots=True)
class _Merge:
    """`merge_histogram` of one layout's family as index arithmetic on its values."""

    bounds: tuple[float, ...]
    buckets: Callable[[list[float]], tuple[float, ...]] | None  # one series: values by bound
    per_bound: tuple[tuple[int, ...], ...]  # several series: indexes summed per bound
    count: tuple[int, ...]
    sum: tuple[int, ...]

    def apply(self, values: list[float]) -> HistogramData:
        if self.buckets is not None:
            counts = self.buckets(values)
        else:
            counts = tuple([_add(values, indexes) for indexes in self.per_bound])
        count = _add(values, self.count) if self.count else None
        total = _add(values, self.sum) if self.sum else None
        return HistogramData(self.bounds, counts, count, total)

    @staticmethod
    def of(family: Family, merged: HistogramData) -> _Merge:
        per_le: dict[float, list[int]] = {}
        count: list[int] = []
        total: list[int] = []
        for i, (name, labels, _value, _ts) in enumerate(family.samples):
            if name == family.name + "_bucket":
                le = labels.bucket[0] if isinstance(labels, _Labels) and labels.bucket else None
                per_le.setdefault(
                    _bucket_info(labels, family.name)[0] if le is None else le, []
                ).append(i)
            elif name == family.name + "_count":
                count.append(i)
            elif name == family.name + "_sum":
                total.append(i)
        per_bound = tuple(tuple(per_le[b]) for b in merged.bounds)
        single = all(len(indexes) == 1 for indexes in per_bound)
        buckets = _picker([indexes[0] for indexes in per_bound]) if single else None
        return _Merge(merged.bounds, buckets, per_bound, tuple(count), tuple(total))


def _add(values: list[float], indexes: tuple[int, ...]) -> float:
    """``values`` at ``indexes`` added in page order from 0.0, as `merge_histogram` adds."""
    total = 0.0
    for i in indexes:
        total += values[i]
    return total


# (name, type, help, first line, sample names, sample label sets, merge memo)
_LaidFamily = tuple[
    str, str, str | None, int, tuple[str, ...], tuple[Mapping[str, str], ...], list[_Merge | None]
]


@dataclass(frozen=True, slots=True)
class _Layout:
    """Where a page's wanted lines are and what they must say, by line index."""

    skeleton_bytes: int
    split: int  # `str.split` maxsplit: 1 + the index of the last line compared
    pick: Callable[[list[str]], tuple[str, ...]]  # wanted samples (by family), then others
    heads: tuple[str, ...]  # the text up to the value of each picked line (with its blank)
    cuts: tuple[slice, ...]  # where the value starts, in each of the first n picked lines
    n_values: int  # the first n picked lines are wanted samples
    exact: Callable[[list[str]], tuple[str, ...]]  # lines compared whole
    exact_lines: tuple[str, ...]
    families: tuple[_LaidFamily, ...]
    openmetrics: bool
    size_bytes: int

    def read(self, lines: list[str]) -> Page | None:
        """The wanted families of a page split in ``lines`` (at least ``split`` of them, or
        all), or None when a line differs from the layout."""
        if len(lines) < self.split or self.exact(lines) != self.exact_lines:
            return None
        picked = self.pick(lines)  # below, C loops only: no Python code per line
        if not all(map(str.startswith, picked, self.heads)):
            return None
        texts: list[str] = list(map(_cut, picked, self.cuts))
        joined = "".join(texts)
        if "_" in joined or " " in joined:  # a separator, a timestamp or an exemplar
            return None
        try:
            values = list(map(float, texts))
        except ValueError:
            return None
        new = tuple.__new__
        families: dict[str, Family] = {}
        at = 0
        for name, kind, help_text, line, names, labels, memo in self.families:
            end = at + len(names)
            mine = values[at:end]
            rows = map(new, repeat(Sample), zip(names, labels, mine, repeat(None)))
            if kind == "histogram":  # what `merge_histogram` can replay
                samples = _LaidOut(rows)
                samples.values = mine
                samples.memo = memo
                families[name] = new(Family, (name, kind, samples, line, help_text))
            else:
                families[name] = new(Family, (name, kind, tuple(rows), line, help_text))
            at = end
        return Page(families, self.openmetrics)

    @staticmethod
    def build(text: str, skeleton: bytes, wanted: frozenset[str], page: Page) -> _Layout | None:
        """The layout of ``text`` (already read by the walk as ``page``), if it has one."""
        lines = text.split("\n")
        skeletons = skeleton.split(b"\n")
        if len(skeletons) != len(lines):  # pragma: no cover - newlines are never deleted
            return None
        bases = (_PLANS.get(wanted) or _plan(wanted))[1]
        prefixes = tuple(n.encode().translate(None, _SKELETON_DELETE) for n in (*wanted, *bases))
        eof_at = next((i for i, sk in enumerate(skeletons) if b"EOF" in sk), len(lines))
        owner = {s.name: f.name for f in page.families.values() for s in f.samples}
        mine: dict[str, list[int]] = {name: [] for name in page.families}
        others: list[int] = []
        exact: list[int] = list(range(eof_at, len(lines)))
        for i, sk in enumerate(skeletons):  # lines from eof_at on are compared whole too
            if sk[:1] == b"#":
                if i < eof_at and any(prefix in sk for prefix in prefixes):
                    exact.append(i)
            elif sk.startswith(prefixes):
                head = lines[i].rpartition(" ")[0]
                owned_by = owner.get(head.partition("{")[0])
                (others if owned_by is None else mine[owned_by]).append(i)
        families: list[_LaidFamily] = []
        for name, family in page.families.items():
            if len(mine[name]) != len(family.samples):
                return None
            for i, sample in zip(mine[name], family.samples, strict=True):
                if not _reads_as(lines[i], sample):
                    return None
            names = tuple(s.name for s in family.samples)
            labels = tuple(s.labels for s in family.samples)
            families.append((name, family.type, family.help, family.line, names, labels, [None]))
        picked = [i for name in page.families for i in mine[name]] + others
        exact.sort()
        heads = tuple(lines[i].rpartition(" ")[0] + " " for i in picked)
        exact_lines = tuple(lines[i] for i in exact)
        frozen = tuple(families)
        return _Layout(
            skeleton_bytes=len(skeleton),
            split=max([*picked, *exact, 0]) + 1,
            pick=_picker(picked),
            heads=heads,
            cuts=tuple(slice(len(head), None) for head in heads[: len(picked) - len(others)]),
            n_values=len(picked) - len(others),
            exact=_picker(exact),
            exact_lines=exact_lines,
            families=frozen,
            openmetrics=page.openmetrics,
            size_bytes=_size(heads, exact_lines, frozen) + 80 * len(picked) + 512,
        )


def _reads_as(line: str, sample: Sample) -> bool:
    """Whether ``line`` is exactly ``name{labels} value`` of ``sample`` (no timestamp)."""
    head, _, value_text = line.rpartition(" ")
    if sample.timestamp is not None or "_" in value_text or not head.startswith(sample.name):
        return False
    try:
        value = float(value_text)
        labels, tail = _parse_labels(head[len(sample.name) :], 0)
    except (ValueError, ParseError):
        return False
    same = value == sample.value or (math.isnan(value) and math.isnan(sample.value))
    return same and not tail and dict(labels) == dict(sample.labels)


def _parse_fast(text: str, wanted: frozenset[str], max_lines: int) -> Page:
    lead = _LEADING_BLANKS.match(text).end()  # type: ignore[union-attr]  # always matches
    if lead < len(text) and text[lead] not in _FIRST_CHARS:
        line = text.count("\n", 0, lead) + 1
        raise ParseError(f"not an exposition page: starts with {text[lead : lead + 20]!r}", line)
    if "\r" in text:
        return _parse_walk(text.replace("\r\n", "\n"), wanted, max_lines)
    if len(text) > LAYOUT_MAX_PAGE_BYTES:
        return _parse_walk(text, wanted, max_lines)
    skeleton = text.encode().translate(None, _SKELETON_DELETE)
    key = (wanted, hash(skeleton))
    lines: list[str] = []
    split = -1
    n = 0  # layouts of this skeleton: pods whose label values differ only in digits
    while (layout := _LAYOUTS.get((*key, n))) is not None:
        if layout.skeleton_bytes == len(skeleton):
            if layout.split > split:
                split = layout.split
                lines = text.split("\n", split)
            page = layout.read(lines)
            if page is not None:
                return page
        n += 1
    page = _parse_walk(text, wanted, max_lines)
    if n or key in _SKELETONS:  # the second page with this skeleton: worth remembering
        if n < LAYOUTS_PER_SKELETON:
            built = _Layout.build(text, skeleton, wanted, page)
            if built is not None:
                _LAYOUTS.put_sized((*key, n), built, built.size_bytes)
    else:
        _SKELETONS.put_sized(key, True, 200)
    return page


def _parse_walk(text: str, wanted: frozenset[str], max_lines: int) -> Page:
    """The fast parse proper: locate and read each wanted family's lines."""
    scan = "\n" + text
    builder = _Builder()
    walk = _Walk(scan, builder, lines_left=max_lines)
    if len(_FIRST_HINT) > 4096 or len(_GROUP_BYTES) > 4096:  # keyed by wanted names: bound
        _FIRST_HINT.clear()
        _GROUP_BYTES.clear()
    plan = _PLANS.get(wanted)
    if plan is None:
        plan = _plan(wanted)
    order, bases = plan
    for base in bases:  # a wanted x_count's lines may be histogram x's
        walk.declaration_of(base)
    rows: dict[str, list[Sample]] = {}
    absent: set[str] = set()
    for family, needle in order:
        if family in rows or family in absent:
            continue
        last = scan.rfind(needle)  # lines after the first run are at most up to here
        if last < 0:
            absent.add(family)
            continue
        hit = _first(scan, needle, last)
        if last > hit and scan.count(needle, hit, last + len(needle)) > walk.lines_left:
            raise _too_many_lines(scan, hit + 1)  # before parsing any: a C count, not a walk
        walk.back(hit, family)
        collect: dict[str, list[Sample]] = {family: []}
        collect.update((f, []) for f, _ in order if f not in rows and f not in absent)
        stop = walk.group(hit + 1, collect, tuple(collect))
        for other, got in collect.items():
            other_needle = "\n" + other
            if other == family:
                other_last = last
            elif not got or scan.rfind(other_needle, 0, hit + 1) >= 0:
                continue  # not in this run, or earlier lines: read on its own
            else:
                _FIRST_HINT[other_needle] = walk.first_at[other] - 1
                other_last = scan.rfind(other_needle)
            rows[other] = got
            end = stop
            while end < other_last:  # a later group of the same family
                later = scan.find(other_needle, end, other_last + len(other_needle))
                if later < 0:
                    break
                walk.back(later, other)
                end = walk.group(later + 1, {other: got}, (other,))
    families: dict[str, Family] = {}
    for family, got in rows.items():
        if got:
            families[family] = tuple.__new__(  # Family(...) without its Python __new__
                Family,
                (
                    family,
                    builder.keys.get(family, "untyped"),
                    tuple(got),
                    (scan, walk.first_at[family]),
                    builder.helps.get(family),
                ),
            )
    end = len(text)
    while end and text[end - 1] in " \t\n":
        end -= 1
    last_line = text[text.rfind("\n", 0, end) + 1 : end]
    openmetrics = last_line[:1] == "#" and last_line[1:].split() == ["EOF"]
    return Page(families, openmetrics)


def parse_page(
    text: str,
    families: Collection[str] | None = None,
    *,
    strict: bool = False,
    max_lines: int | None = None,
) -> Page:
    """Parse an exposition page; ``families`` restricts the result to those base names.

    Fast mode (``families`` given, ``strict`` false) parses only the wanted families'
    lines, at most ``max_lines`` of them (default MAX_WANTED_LINES); strict mode
    validates every line (of a page of at most ``max_lines`` lines, if given). Raises
    `ParseError` on invalid input and on a page over the bound (never a partial page).
    """
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", 1)
    _new_page()
    _PAGE.max_lines = MAX_WANTED_LINES if max_lines is None else max_lines
    if families is None or strict:
        if max_lines is not None and text.count("\n") > max_lines:
            raise ParseError(f"page refused: more than max_lines={max_lines} lines", max_lines + 1)
        return _parse_strict(text, None if families is None else frozenset(families))
    wanted = _WANTED.get(families) if type(families) is tuple else None
    if wanted is None:
        wanted = frozenset(families)
        if type(families) is tuple and len(_WANTED) < 1024:
            _WANTED[families] = wanted  # one set object per caller tuple: its hash is kept
    if not wanted:
        return Page({})
    return _parse_fast(text, wanted, _PAGE.max_lines)


def _bucket_info(
    labels: Mapping[str, str], family: str
) -> tuple[float, frozenset[tuple[str, str]]]:
    """A bucket line's ``le`` bound and series identity (its other labels, as a set)."""
    le_text = labels.get("le")
    if le_text is None:
        raise ParseError(f"{family}: bucket without an 'le' label", 0)
    le = _float(le_text, f"{family} bucket bound 'le'", 0)
    if math.isnan(le):
        raise ParseError(f"{family}: bucket bound 'le' is NaN", 0)
    return le, frozenset((k, v) for k, v in labels.items() if k != "le")  # hash cached


def merge_histogram(family: Family | None, line_hint: int | None = None) -> HistogramData | None:
    """Sum every series of a histogram family by ``le`` (PromQL ``sum by (le)``).

    Returns None when the family is absent or has no buckets (missing data). A bucket
    without a float ``le`` or a series without ``+Inf`` is a `ParseError`. The ``le``
    and series of a label set are memoized on it (label sets are shared by scrapes).
    """
    if family is None:
        return None
    samples = family.samples
    if type(samples) is _LaidOut:
        plan = samples.memo[0]
        if plan is not None:
            return plan.apply(samples.values)
        merged = _merge_samples(family, line_hint)
        if merged is not None:
            samples.memo[0] = _Merge.of(family, merged)
        return merged
    return _merge_samples(family, line_hint)


def _merge_samples(family: Family, line_hint: int | None) -> HistogramData | None:
    by_le: dict[float, float] = {}
    inf_series = 0
    count: float | None = None
    total: float | None = None
    suffix_bucket = family.name + "_bucket"
    suffix_count = family.name + "_count"
    suffix_sum = family.name + "_sum"
    seen: set[frozenset[tuple[str, str]]] = set()
    inf = math.inf
    for name, labels, value, _ts in family.samples:
        if name == suffix_bucket:
            info = labels.bucket if type(labels) is _Labels else None
            if info is None:
                try:
                    info = _bucket_info(labels, family.name)
                except ParseError as exc:
                    line = family.line if line_hint is None else line_hint
                    raise ParseError(str(exc).removeprefix("line 0: "), line) from None
                if type(labels) is _Labels:
                    labels.bucket = info
            le, key = info
            by_le[le] = by_le.get(le, 0.0) + value
            if le == inf:
                inf_series += 1
            seen.add(key)
        elif name == suffix_count:
            count = (count or 0.0) + value
        elif name == suffix_sum:
            total = (total or 0.0) + value
    if not by_le:
        return None
    if inf_series < len(seen):
        line = family.line if line_hint is None else line_hint
        raise ParseError(f'{family.name}: a histogram series has no le="+Inf" bucket', line)
    bounds = tuple(sorted(by_le))
    return HistogramData(bounds, tuple(by_le[b] for b in bounds), count, total)
