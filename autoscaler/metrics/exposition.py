"""Prometheus text format 0.0.4 and OpenMetrics 1.0 parser that builds only wanted families.

Why not `prometheus_client.parser`: it parses every line of a ~500-line vLLM page
character by character (~6 ms) while an adapter needs about ten families. `parse_page`
with ``families=`` finds the wanted lines with one C-level regex scan (the scan pattern
starts with a literal, so `re` skips non-matching lines at memchr speed) and fully parses
only those lines; `strict=True` (or ``families=None``) parses and validates every line.

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
The fast mode additionally rejects pages whose first line cannot start an exposition page
(HTML, JSON) but does not validate lines of families it was not asked for.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from autoscaler.errors import ParseError

__all__ = [
    "Family",
    "HistogramData",
    "Page",
    "Sample",
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
_NO_LABELS: Mapping[str, str] = {}


@dataclass(frozen=True, slots=True)
class Sample:
    """One exposition line: full sample name (with suffix), labels, value, timestamp."""

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None


@dataclass(frozen=True, slots=True)
class Family:
    """A metric family keyed by its base name (counters without ``_total``)."""

    name: str
    type: str
    samples: tuple[Sample, ...]
    line: int  # line of the family's first sample, for error messages
    help: str | None = None


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
    labels: dict[str, str] = {}
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


_LABEL_CACHE: dict[str, Mapping[str, str]] = {}
_LABEL_CACHE_MAX = 8192


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
    labels: dict[str, str] = {}
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
    if len(_LABEL_CACHE) >= _LABEL_CACHE_MAX:
        _LABEL_CACHE.clear()
    _LABEL_CACHE[raw] = labels
    return labels, rest[end + 1 :]


def _parse_rest(rest: str, line: int) -> tuple[Mapping[str, str], float, float | None]:
    """Parse what follows a sample name: ``{labels}`` value [timestamp] [exemplar]."""
    if rest[:1] == "{":
        labels, tail = (_labels_slow if "\\" in rest else _labels_fast)(rest, line)
    else:
        labels, tail = _NO_LABELS, rest
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
        return labels, _float(parts[0], "value", line), None
    if len(parts) == 2:
        ts = _float(parts[1], "timestamp", line)
        if math.isnan(ts) or math.isinf(ts):
            raise ParseError(f"invalid timestamp {parts[1]!r}", line)
        return labels, _float(parts[0], "value", line), ts
    if not parts:
        raise ParseError("missing value", line)
    raise ParseError(f"expected 'value [timestamp]', got {tail.strip()[:60]!r}", line)


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
        found: tuple[str, str] | None = None
        d = self.decl.get(name)
        if d is not None and name[len(d[0]) :] in _SUFFIXES[d[1]]:
            found = d
        else:
            for suffix in _ALL_SUFFIXES:
                if name.endswith(suffix):
                    base = name[: -len(suffix)]
                    kind = self.keys.get(base)
                    if kind is not None and suffix in _SUFFIXES[kind]:
                        found = (base, kind)
                        break
        if found is None:
            found = (name, "untyped")
        self.resolved[name] = found
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


@lru_cache(maxsize=64)
def _scanners(
    wanted: frozenset[str],
) -> tuple[str, re.Pattern[str], re.Pattern[str], re.Pattern[str]]:
    """Scan patterns that start with a literal (``\\n`` + the names' common prefix).

    `re` only skips ahead with its fast literal search when the pattern begins with a
    literal outside any group, so the common prefix stays outside the captured name.
    """
    names = sorted(wanted, key=len, reverse=True)
    prefix = _common_prefix(names)
    alts = "|".join(re.escape(n[len(prefix) :]) for n in names)
    suffixes = "|".join(_ALL_SUFFIXES)
    body = "((?:" + alts + ")(?:" + suffixes + ")?)"
    sample = re.compile(r"\n" + re.escape(prefix) + body + r"([{ \t][^\n]*)")
    decl = re.compile(r"\n# TYPE " + re.escape(prefix) + body + r"(?:[ \t]+([^\n]*))?")
    loose = re.compile(r"\n# TYPE[ \t]+" + re.escape(prefix) + body + r"(?:[ \t]+([^\n]*))?")
    return prefix, sample, decl, loose


def _common_prefix(names: Iterable[str]) -> str:
    items = list(names)
    if not items:
        return ""
    lo, hi = min(items), max(items)
    i = 0
    while i < len(lo) and lo[i] == hi[i]:
        i += 1
    return lo[:i]


def _parse_fast(text: str, wanted: frozenset[str]) -> Page:
    stripped = text.lstrip()
    if stripped and stripped[0] not in _FIRST_CHARS:
        line = text.count("\n", 0, len(text) - len(stripped)) + 1
        raise ParseError(f"not an exposition page: starts with {stripped[:20]!r}", line)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    scan = "\n" + text
    prefix, sample_re, decl_re, loose_re = _scanners(wanted)
    if "# TYPE\t" in scan or "# TYPE  " in scan:  # unusual blanks: slower general pattern
        decl_re = loose_re
    builder = _Builder()
    for m in decl_re.finditer(scan):
        body = (m.group(2) or "").strip()
        if body not in TYPES or prefix + m.group(1) in builder.decl:  # error: find its line
            builder.declare(prefix + m.group(1), body, scan.count("\n", 0, m.start() + 1))
        builder.declare(prefix + m.group(1), body, 0)
    eof_at = scan.find("\n# EOF")
    samples = builder.samples
    first_line = builder.first_line
    for m in sample_re.finditer(scan):
        name, rest = prefix + m.group(1), m.group(2)
        key, _kind = builder.resolve(name)
        if key not in wanted:
            continue
        pos = m.start()
        if 0 <= eof_at < pos:
            raise ParseError("content after '# EOF'", scan.count("\n", 0, pos + 1))
        if rest[-1:] == "\r":
            rest = rest[:-1]
        try:
            labels, value, ts = _parse_rest(rest, 0)
        except ParseError as exc:  # re-raise with the line number, computed only now
            message = str(exc).removeprefix("line 0: ")
            raise ParseError(message, scan.count("\n", 0, pos + 1)) from None
        bucket = samples.get(key)
        if bucket is None:
            bucket = samples[key] = []
            first_line[key] = pos  # converted to a line number below
        bucket.append(Sample(name, labels, value, ts))
    last_pos, last_line = 0, 0  # positions ascend: count newlines incrementally
    for key, pos in first_line.items():
        last_line += scan.count("\n", last_pos, pos + 1)
        last_pos = pos + 1
        first_line[key] = last_line
    openmetrics = eof_at >= 0
    if openmetrics and scan[eof_at + 6 :].strip():
        raise ParseError("content after '# EOF'", scan.count("\n", 0, eof_at + 1) + 1)
    return builder.build(openmetrics)


def parse_page(text: str, families: Collection[str] | None = None, *, strict: bool = False) -> Page:
    """Parse an exposition page; ``families`` restricts the result to those base names.

    Fast mode (``families`` given, ``strict`` false) parses only the wanted families'
    lines; strict mode validates every line. Raises `ParseError` on invalid input.
    """
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", 1)
    if families is None:
        return _parse_strict(text, None)
    wanted = frozenset(families)
    if strict:
        return _parse_strict(text, wanted)
    if not wanted:
        return Page({})
    return _parse_fast(text, wanted)


def merge_histogram(family: Family | None, line_hint: int | None = None) -> HistogramData | None:
    """Sum every series of a histogram family by ``le`` (PromQL ``sum by (le)``).

    Returns None when the family is absent or has no buckets (missing data). A bucket
    without a float ``le`` or a series without ``+Inf`` is a `ParseError`.
    """
    if family is None:
        return None
    line = family.line if line_hint is None else line_hint
    by_le: dict[float, float] = {}
    inf_series = 0
    series = 0
    count: float | None = None
    total: float | None = None
    suffix_bucket = family.name + "_bucket"
    suffix_count = family.name + "_count"
    suffix_sum = family.name + "_sum"
    seen: set[tuple[tuple[str, str], ...]] = set()
    for s in family.samples:
        if s.name == suffix_bucket:
            le_text = s.labels.get("le")
            if le_text is None:
                raise ParseError(f"{family.name}: bucket without an 'le' label", line)
            le = _float(le_text, f"{family.name} bucket bound 'le'", line)
            if math.isnan(le):
                raise ParseError(f"{family.name}: bucket bound 'le' is NaN", line)
            by_le[le] = by_le.get(le, 0.0) + s.value
            if le == math.inf:
                inf_series += 1
            key = tuple(sorted((k, v) for k, v in s.labels.items() if k != "le"))
            if key not in seen:
                seen.add(key)
                series += 1
        elif s.name == suffix_count:
            count = (count or 0.0) + s.value
        elif s.name == suffix_sum:
            total = (total or 0.0) + s.value
    if not by_le:
        return None
    if inf_series < series:
        raise ParseError(f'{family.name}: a histogram series has no le="+Inf" bucket', line)
    bounds = tuple(sorted(by_le))
    return HistogramData(bounds, tuple(by_le[b] for b in bounds), count, total)
