"""The tokenizer: label sets, values, timestamps and exemplars of one sample line, as both
parsers read them (the same rules, the same `ParseError`s).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.caches import _LABEL_CACHE
from autoscaler.metrics.exposition.model import (
    _ESCAPE_RE,
    _EXEMPLAR_RE,
    _LABEL_RE,
    _NO_LABELS,
    _Labels,
)


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
