"""The strict parser: every line read and validated, top to bottom (``strict=True`` or
``families=None``). `_Builder` (declarations -> families) is shared with the fast scan.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.caches import _RESOLVE
from autoscaler.metrics.exposition.model import (
    _ALL_SUFFIXES,
    _NAME_RE,
    _SUFFIXES,
    TYPES,
    Family,
    Page,
    Sample,
)
from autoscaler.metrics.exposition.tokens import _parse_rest


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
