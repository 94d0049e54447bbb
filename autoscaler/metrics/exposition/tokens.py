"""The tokenizer: label sets, values, timestamps and exemplars of one sample line (the
rules and `ParseError`s every parse applies).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.model import ESCAPE_RE, EXEMPLAR_RE, LABEL_RE, NO_LABELS


def _unescape(value: str) -> str:
    return ESCAPE_RE.sub(lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


def parse_float(text: str, what: str, line: int) -> float:
    """A value, timestamp or bound: a decimal float, ``NaN`` or ``±Inf``; no ``_``."""
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
        m = LABEL_RE.match(rest, pos)
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
    """Labels without backslashes: quotes are pure delimiters, so split on them."""
    end = rest.find("}")
    while end >= 0 and rest.count('"', 0, end) % 2:
        end = rest.find("}", end + 1)
    if end < 0:
        raise ParseError(f"unterminated label set {rest[:80]!r}", line)
    raw = rest[1:end]
    if not raw:
        return NO_LABELS, rest[end + 1 :]
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
    return labels, rest[end + 1 :]


def parse_labels(rest: str, line: int) -> tuple[Mapping[str, str], str]:
    """Split what follows a sample name into its label set and the text after it."""
    if rest[:1] == "{":
        return (_labels_slow if "\\" in rest else _labels_fast)(rest, line)
    return NO_LABELS, rest


def parse_tail(tail: str, line: int) -> tuple[float, float | None]:
    """Parse `` value [timestamp] [exemplar]`` (the text after the label set)."""
    if not tail or tail[0] not in " \t":
        raise ParseError(f"expected a blank then a value, got {tail[:40]!r}", line)
    hash_at = tail.find("#")
    if hash_at >= 0:
        m = EXEMPLAR_RE.match(tail, hash_at)
        if m is None:
            raise ParseError(f"invalid exemplar {tail[hash_at:][:80]!r}", line)
        parse_float(m.group(2), "exemplar value", line)
        if m.group(3) is not None:
            parse_float(m.group(3), "exemplar timestamp", line)
        tail = tail[:hash_at]
    parts = tail.split()
    if len(parts) == 1:
        return parse_float(parts[0], "value", line), None
    if len(parts) == 2:
        ts = parse_float(parts[1], "timestamp", line)
        if math.isnan(ts) or math.isinf(ts):
            raise ParseError(f"invalid timestamp {parts[1]!r}", line)
        return parse_float(parts[0], "value", line), ts
    if not parts:
        raise ParseError("missing value", line)
    raise ParseError(f"expected 'value [timestamp]', got {tail.strip()[:60]!r}", line)


def parse_rest(rest: str, line: int) -> tuple[Mapping[str, str], float, float | None]:
    """Parse what follows a sample name: ``{labels}`` value [timestamp] [exemplar]."""
    labels, tail = parse_labels(rest, line)
    value, ts = parse_tail(tail, line)
    return labels, value, ts


def bucket_bound(labels: Mapping[str, str], family: str, line: int) -> float:
    """A bucket line's ``le`` bound."""
    le_text = labels.get("le")
    if le_text is None:
        raise ParseError(f"{family}: bucket without an 'le' label", line)
    le = parse_float(le_text, f"{family} bucket bound 'le'", line)
    if math.isnan(le):
        raise ParseError(f"{family}: bucket bound 'le' is NaN", line)
    return le
