"""The line parser: a page read top to bottom, line by line.

``strict``: every line is read and checked; the first broken rule raises `ParseError`.
Lenient (the scrape's mode): sample lines are read only when their name starts with a
wanted family's name (others are skipped unread), and a line that breaks a rule drops
its family (named in `Page.dropped` with the rule), never the page.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.model import (
    ALL_SUFFIXES,
    NAME_RE,
    SUFFIXES,
    TYPES,
    Family,
    Page,
    Sample,
)
from autoscaler.metrics.exposition.tokens import parse_rest


@dataclass(slots=True)
class FamilyBuilder:
    """Collects TYPE/HELP declarations and samples, then resolves families.

    ``wanted``: the families asked for; a sample named ``x_bucket``/``x_count``/``x_sum``/
    ``x_total`` with no TYPE line for it or ``x`` joins wanted family ``x`` (pages without
    TYPE lines), typed from its suffixes.
    """

    wanted: Collection[str] | None = None
    decl: dict[str, tuple[str, str]] = field(default_factory=dict)  # TYPE name -> (key, type)
    keys: dict[str, str] = field(default_factory=dict)  # family key -> type
    helps: dict[str, str] = field(default_factory=dict)
    resolved: dict[str, tuple[str, str]] = field(default_factory=dict)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    first_line: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, str] = field(default_factory=dict)

    def declare(self, name: str, kind: str, line: int) -> None:
        if kind not in TYPES:
            raise ParseError(f"unknown metric type {kind!r} for {name!r}", line)
        if name in self.decl:
            raise ParseError(f"second TYPE line for {name!r}", line)
        key = name[:-6] if kind == "counter" and name.endswith("_total") else name
        self.decl[name] = (key, kind)
        self.keys.setdefault(key, kind)
        self.resolved.clear()  # a later declaration may change where a name belongs

    def resolve(self, name: str) -> tuple[str, str]:
        """The family (key, type) a sample name belongs to."""
        hit = self.resolved.get(name)
        if hit is not None:
            return hit
        d = self.decl.get(name)
        found: tuple[str, str] | None = None
        if d is not None and name[len(d[0]) :] in SUFFIXES[d[1]]:
            found = d
        else:
            for suffix in ALL_SUFFIXES:
                if name.endswith(suffix):  # at most one suffix ends a name
                    base = name[: -len(suffix)]
                    kind = self.keys.get(base)
                    if kind is not None:
                        if suffix in SUFFIXES[kind]:
                            found = (base, kind)
                    elif (
                        d is None
                        and self.wanted is not None
                        and base in self.wanted
                        and name not in self.wanted
                    ):
                        found = (base, "untyped")  # typed from its suffixes at `build`
                    break
        if found is None:
            found = (name, "untyped")
        self.resolved[name] = found
        return found

    def add(self, key: str, sample: Sample, line: int) -> None:
        rows = self.samples.get(key)
        if rows is None:
            rows = self.samples[key] = []
            self.first_line[key] = line
        rows.append(sample)

    def drop(self, key: str, reason: ParseError) -> None:
        self.dropped.setdefault(key, str(reason))

    def build(self, openmetrics: bool) -> Page:
        families = {
            key: Family(
                key, self.type_of(key, rows), tuple(rows), self.first_line[key], self.helps.get(key)
            )
            for key, rows in self.samples.items()
            if key not in self.dropped
        }
        return Page(families, openmetrics, self.dropped)

    def type_of(self, key: str, rows: list[Sample]) -> str:
        kind = self.keys.get(key)
        if kind is not None:
            return kind
        names = {s.name for s in rows}
        if key + "_bucket" in names:
            return "histogram"
        if key + "_total" in names:
            return "counter"
        return "untyped"


def read_comment(builder: FamilyBuilder, text: str, line: int) -> bool:
    """Handle a ``#`` line; returns True on ``# EOF``."""
    parts = text[1:].split(None, 2)
    if not parts:
        return False
    word = parts[0]
    if word == "EOF" and len(parts) == 1:
        return True
    if word in ("TYPE", "HELP", "UNIT") and text[1:2] in (" ", "\t"):
        if len(parts) < 2 or NAME_RE.fullmatch(parts[1]) is None:
            raise ParseError(f"{word} line without a valid metric name: {text[:80]!r}", line)
        if word == "TYPE":
            if len(parts) < 3:
                raise ParseError(f"TYPE line without a type: {text[:80]!r}", line)
            builder.declare(parts[1], parts[2].strip(), line)
        elif word == "HELP":
            builder.helps[parts[1]] = parts[2] if len(parts) > 2 else ""
    return False  # other comments are allowed in text format 0.0.4


def wanted_prefixes(wanted: Collection[str]) -> tuple[str, ...]:
    """What a line that may belong to a wanted family starts with: the wanted names, and
    the bases whose TYPE lines decide where a wanted ``x_count``-like name belongs."""
    bases = [f[: f.rfind("_")] for f in wanted if f.endswith(ALL_SUFFIXES)]
    return tuple(sorted({*wanted, *bases}))


def too_many_lines(max_lines: int, line: int) -> ParseError:
    return ParseError(
        f"page refused: more than max_lines={max_lines} lines of the wanted families"
        " (a bound on the parse time per page)",
        line,
    )


def parse_lines(
    text: str, wanted: Collection[str] | None, *, strict: bool, max_lines: int | None = None
) -> Page:
    """Parse ``text`` (see the module docstring); ``wanted`` None: every family.

    ``max_lines`` bounds the sample lines read (lenient mode: those that may belong to a
    wanted family); a page over it raises `ParseError`, never a partial page.
    """
    builder = FamilyBuilder(wanted)
    prefixes = None if wanted is None or strict else wanted_prefixes(wanted)
    lines_left = -1 if max_lines is None else max_lines
    eof = False
    for lineno, raw in enumerate(text.split("\n"), 1):
        line = raw[:-1] if raw.endswith("\r") else raw
        if not line or line.isspace():
            continue
        if eof and strict:
            raise ParseError("content after '# EOF'", lineno)
        if line[0] == "#":
            if prefixes is not None and line[1:2] == " " and line[2:6] in ("TYPE", "HELP"):
                name = line[7:].lstrip(" \t")
                if not name.startswith(prefixes):
                    continue
            try:
                eof = read_comment(builder, line, lineno) or eof
            except ParseError as exc:
                if strict:
                    raise
                words = line[1:].split(None, 2)
                if len(words) > 1:
                    builder.drop(builder.resolve(words[1])[0], exc)
            continue
        if prefixes is not None and not line.startswith(prefixes):
            continue
        if lines_left == 0:
            raise too_many_lines(max_lines or 0, lineno)
        lines_left -= 1
        m = NAME_RE.match(line)
        rest = "" if m is None else line[m.end() :]
        if m is None or not rest or rest[0] not in "{ \t":
            error = ParseError(f"expected a metric name, got {line[:60]!r}", lineno)
            if strict:
                raise error
            if m is not None:
                builder.drop(builder.resolve(m.group(0))[0], error)
            continue
        name = m.group(0)
        key = builder.resolve(name)[0]
        if wanted is not None and key not in wanted and not strict:
            continue
        try:
            labels, value, ts = parse_rest(rest, lineno)
        except ParseError as exc:
            if strict:
                raise
            builder.drop(key, exc)
            continue
        if wanted is None or key in wanted:
            builder.add(key, Sample(name, labels, value, ts), lineno)
    return builder.build(eof)
