"""The fast scan: each wanted family located with C string searches and only its lines
read (the walk); comment blocks, line heads and declarations remembered from earlier
pages (see `caches`). `MAX_WANTED_LINES` bounds the lines one parse reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.caches import (
    _ABOVE,
    _DECLS,
    _FIRST_HINT,
    _GROUP_BYTES,
    _HEADS,
    _PAGE,
    _PLANS,
)
from autoscaler.metrics.exposition.model import _ALL_SUFFIXES, _NAME_RE, TYPES, Family, Page, Sample
from autoscaler.metrics.exposition.strict import _Builder, _comment
from autoscaler.metrics.exposition.tokens import _parse_labels, _parse_tail

# Lines of the wanted families one fast parse reads at most (~10-30 ms of CPU cold): a
# page with more (200k series of a wanted family) is refused whole with `ParseError`, so
# the pod counts as unread rather than stalling the event loop for seconds.
MAX_WANTED_LINES = 10_000


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
