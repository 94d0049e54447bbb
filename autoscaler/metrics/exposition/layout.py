"""Layouts: a live pod's next page read by the layout of an earlier page with the same
skeleton, by line index with C loops only; any difference, and any page not seen twice,
is read by the line parser (`parser`). Layouts are kept in a `LayoutCache` bounded in
bytes.
"""

from __future__ import annotations

import math
import operator
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from itertools import repeat
from typing import TypeVar

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.model import FIRST_CHARS, LEADING_BLANKS, Family, Page, Sample
from autoscaler.metrics.exposition.parser import parse_lines, wanted_prefixes
from autoscaler.metrics.exposition.tokens import parse_labels

# Pages up to this size are read through a remembered layout (see `read_page`); larger
# ones always take the line parser, so no single C call on them holds the GIL for long.
LAYOUT_MAX_PAGE_BYTES = 1024 * 1024
LAYOUTS_PER_SKELETON = 8

_T = TypeVar("_T")


# --- layouts: a live pod's next page, read by its previous page's layout ---------------
# A pod's pages differ from scrape to scrape in their values only. The skeleton of a page
# (its bytes without digits, '.', '+', '-' and 'e') is the same on both pages then, and
# so is every line's skeleton (newlines are kept): a line that could belong to a wanted
# family (its skeleton starts with a wanted name's skeleton, or for a comment contains
# one) was such a line on the page the layout was built from. Those lines are compared
# exactly (sample lines by their text before the value, comments whole, the page from a
# line holding "EOF" on whole); their values are parsed as the line parser parses them.
# Any difference, an odd value or a changed skeleton -> the line parser reads the page. On an ASCII
# page only the runs of compared lines are split (`_regions`: ~100 of the ~300 lines up to
# the last compared one on a vLLM page), each found by its first line's text.
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


# (name, type, help, first line, its samples' [start, end) among the values)
_LaidFamily = tuple[str, str, str | None, int, int, int]


@dataclass(frozen=True, slots=True)
class Layout:
    """Where a page's wanted lines are and what they must say, by line index."""

    skeleton_bytes: int
    split: int  # `str.split` maxsplit: 1 + the index of the last line compared
    pick: Callable[[list[str]], tuple[str, ...]]  # wanted samples (by family), then others
    heads: tuple[str, ...]  # the text up to the value of each picked line (with its blank)
    cuts: tuple[slice, ...]  # where the value starts, in each of the first n picked lines
    n_values: int  # the first n picked lines are wanted samples
    exact: Callable[[list[str]], tuple[str, ...]]  # lines compared whole
    exact_lines: tuple[str, ...]
    names: tuple[str, ...]  # of the first n picked lines (the wanted samples)
    labels: tuple[Mapping[str, str], ...]  # their label sets
    families: tuple[_LaidFamily, ...]
    openmetrics: bool
    size_bytes: int
    # An ASCII page's lines are split only where the layout compares them: one `_Region`
    # per run of compared lines (`pick` and `exact` index their concatenation); None: the
    # page is split from its first line up to ``split``.
    regions: tuple[_Region, ...] | None = None

    def lines_of(self, text: str) -> list[str] | None:
        """The lines `pick` and `exact` index, or None when ``text`` cannot have them."""
        if self.regions is None:
            lines = text.split("\n", self.split)
            return lines if len(lines) >= self.split else None
        lines = []
        extra = len(text) - self.skeleton_bytes  # the characters the skeleton lacks
        size = len(text)
        for needle, low, skeleton_bytes, n in self.regions:
            start = 0
            if needle:
                start = text.find(needle, low, low + extra + len(needle))
                if start < 0:
                    return None
                start += 1
            end = start + 2 * skeleton_bytes + 256
            parts = text[start:end].split("\n", n)
            if len(parts) <= n and end < size:  # values grew a lot: take the bound
                end = start + skeleton_bytes + extra
                parts = text[start:end].split("\n", n)
            if len(parts) < n or (len(parts) == n and end < size):
                return None
            del parts[n:]
            lines += parts
        return lines

    def read(self, text: str) -> Page | None:
        """The wanted families of ``text`` (whose skeleton is this layout's), or None when
        a line differs from the layout."""
        values = self.read_values(text)
        return None if values is None else self.page(values)

    def read_values(self, text: str) -> list[float] | None:
        """The wanted samples' values of ``text`` in layout order (see `read`)."""
        lines = self.lines_of(text)
        if lines is None or self.exact(lines) != self.exact_lines:
            return None
        picked = self.pick(lines)  # below, C loops only: no Python code per line
        if not all(map(str.startswith, picked, self.heads)):
            return None
        texts: list[str] = list(map(_cut, picked, self.cuts))
        joined = "".join(texts)
        if "_" in joined or " " in joined:  # a separator, a timestamp or an exemplar
            return None
        try:
            return list(map(float, texts))
        except ValueError:
            return None

    def page(self, values: list[float]) -> Page:
        """The families of a page whose values `read_values` read."""
        new = tuple.__new__
        # every sample in one C loop; each family takes its slice
        rows = list(map(new, repeat(Sample), zip(self.names, self.labels, values, repeat(None))))
        families: dict[str, Family] = {}
        for name, kind, help_text, line, start, end in self.families:
            families[name] = new(Family, (name, kind, tuple(rows[start:end]), line, help_text))
        return Page(families, self.openmetrics)

    @staticmethod
    def build(text: str, skeleton: bytes, wanted: frozenset[str], page: Page) -> Layout | None:
        """The layout of ``text`` (already read by the line parser as ``page``), if it has
        one (a page with a dropped family has none)."""
        if page.dropped:
            return None
        lines = text.split("\n")
        skeletons = skeleton.split(b"\n")
        if len(skeletons) != len(lines):  # pragma: no cover - newlines are never deleted
            return None
        prefixes = tuple(
            n.encode().translate(None, _SKELETON_DELETE) for n in wanted_prefixes(wanted)
        )
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
        names: list[str] = []
        labels: list[Mapping[str, str]] = []
        for name, family in page.families.items():
            if len(mine[name]) != len(family.samples):
                return None
            for i, sample in zip(mine[name], family.samples, strict=True):
                if not _reads_as(lines[i], sample):
                    return None
            start = len(names)
            names.extend(s.name for s in family.samples)
            labels.extend(s.labels for s in family.samples)
            families.append((name, family.type, family.help, family.line, start, len(names)))
        picked = [i for name in page.families for i in mine[name]] + others
        exact.sort()
        heads = tuple(lines[i].rpartition(" ")[0] + " " for i in picked)
        exact_lines = tuple(lines[i] for i in exact)
        frozen = tuple(families)
        regions: tuple[_Region, ...] | None = None
        at = {i: i for i in (*picked, *exact)}  # line -> its index in what `pick` reads
        if text.isascii():
            anchors = dict(zip(picked, heads, strict=True)) | {i: lines[i] for i in exact}
            regions, at = _regions(skeletons, anchors)
        return Layout(
            skeleton_bytes=len(skeleton),
            split=max([*picked, *exact, 0]) + 1,
            pick=_picker([at[i] for i in picked]),
            heads=heads,
            cuts=tuple(slice(len(head), None) for head in heads[: len(picked) - len(others)]),
            n_values=len(picked) - len(others),
            exact=_picker([at[i] for i in exact]),
            exact_lines=exact_lines,
            names=tuple(names),
            labels=tuple(labels),
            families=frozen,
            openmetrics=page.openmetrics,
            size_bytes=_size(heads, exact_lines, frozen, tuple(names), tuple(labels), regions)
            + 80 * len(picked)
            + 512,
            regions=regions,
        )


# (needle, search start, skeleton bytes of its lines, lines): a run of compared lines is
# found by its first line's text: ``"\n" + text`` (a sample line's text up to its value,
# a comment line whole) searched from where that line's newline is in the skeleton (a page
# is never shorter than its skeleton before a line); "" for a run from the page's first line.
_Region = tuple[str, int, int, int]
# Runs of compared lines at most this many lines apart are split as one region.
REGION_GAP_LINES = 8


def _regions(
    skeletons: list[bytes], anchors: dict[int, str]
) -> tuple[tuple[_Region, ...], dict[int, int]]:
    """The regions holding the lines in ``anchors`` (line -> its compared text), and
    where each of those lines is in the regions' lines, concatenated.

    A region starts at a line whose compared text, deleted like the skeleton, starts
    exactly one skeleton line: on a page with this skeleton, a line starting with that
    text can only be that line, so the first match found is the region's first line.
    A run whose first line is not such a line joins the run before it (the first run
    then starts at the page's first line)."""
    runs: list[list[int]] = []  # [first, last] lines
    for i in sorted(anchors):
        if runs and i - runs[-1][1] <= REGION_GAP_LINES:
            runs[-1][1] = i
            continue
        prefix = anchors[i].encode().translate(None, _SKELETON_DELETE)
        if sum(1 for sk in skeletons if sk.startswith(prefix)) == 1:
            runs.append([i, i])
        elif runs:
            runs[-1][1] = i
        else:
            runs.append([0, i])
    offsets = [0]
    for sk in skeletons:
        offsets.append(offsets[-1] + len(sk) + 1)
    regions: list[_Region] = []
    at: dict[int, int] = {}
    n = 0  # lines of the regions before this one
    for first, last in runs:
        for i in range(first, last + 1):
            if i in anchors:
                at[i] = n + i - first
        n += last + 1 - first
        needle = "\n" + anchors[first] if first else ""
        low = offsets[first] - 1 if first else 0
        regions.append((needle, low, offsets[last + 1] - offsets[first], last + 1 - first))
    return tuple(regions), at


def _reads_as(line: str, sample: Sample) -> bool:
    """Whether ``line`` is exactly ``name{labels} value`` of ``sample`` (no timestamp)."""
    head, _, value_text = line.rpartition(" ")
    if sample.timestamp is not None or "_" in value_text or not head.startswith(sample.name):
        return False
    try:
        value = float(value_text)
        labels, tail = parse_labels(head[len(sample.name) :], 0)
    except (ValueError, ParseError):
        return False
    same = value == sample.value or (math.isnan(value) and math.isnan(sample.value))
    return same and not tail and dict(labels) == dict(sample.labels)


def _size(*parts: object) -> int:
    """Accounted bytes of ``parts`` (a mapping counts its keys and values; shared objects
    are counted in each holder, i.e. over- rather than under-counted)."""
    total = 0
    for part in parts:
        total += sys.getsizeof(part)
        if isinstance(part, dict):
            for k, v in part.items():
                total += sys.getsizeof(k) + sys.getsizeof(v)
        elif isinstance(part, tuple):
            total += _size(*part) - sys.getsizeof(())
    return total


_Key = tuple[frozenset[str], int, int]  # (wanted families, hash of the skeleton, n)


class LayoutCache:
    """Layouts by (wanted families, skeleton hash, n), bounded in bytes.

    A layout is built on a skeleton's second sighting (``seen``: skeletons seen once), so
    a pod whose page changes shape on every scrape never pays for one. When full, the
    layouts not used since the last time it was full are evicted; if every layout was
    used, the new one is not stored: a fleet with more skeletons than fit keeps reading
    the ones that fit, rather than evicting each layout just before its next use.
    """

    def __init__(self, budget_bytes: int, seen_max: int = 65536) -> None:
        self.budget_bytes = budget_bytes
        self.seen_max = seen_max
        self.layouts: dict[_Key, Layout] = {}
        self.used: set[_Key] = set()
        self.seen: set[tuple[frozenset[str], int]] = set()
        self.used_bytes = 0
        self.lock = threading.Lock()  # pages may be parsed in worker threads

    def get(self, key: _Key) -> Layout | None:
        layout = self.layouts.get(key)
        if layout is not None:
            self.used.add(key)
        return layout

    def put(self, key: _Key, layout: Layout) -> None:
        size = layout.size_bytes
        if size > min(self.budget_bytes, LAYOUT_MAX_BYTES):
            return
        with self.lock:
            if self.used_bytes + size > self.budget_bytes:
                for old in [k for k in self.layouts if k not in self.used]:
                    self.used_bytes -= self.layouts.pop(old).size_bytes
                self.used.clear()
                if self.used_bytes + size > self.budget_bytes:
                    return
            self.layouts[key] = layout
            self.used.add(key)
            self.used_bytes += size

    def first_sighting(self, key: tuple[frozenset[str], int]) -> bool:
        """True the first time ``key`` is seen (then remembered, up to ``seen_max``)."""
        if key in self.seen:
            return False
        with self.lock:
            if len(self.seen) >= self.seen_max:
                self.seen.clear()
            self.seen.add(key)
        return True

    def clear(self) -> None:
        with self.lock:
            self.layouts.clear()
            self.used.clear()
            self.seen.clear()
            self.used_bytes = 0


# What a layout costs is about 8x the text of the lines it reads (a vLLM V1 page filtered
# to the adapter's families: ~54 kB), so the default budget holds ~1,200 distinct
# skeletons (e.g. models); a fleet shares one per model and engine version.
CACHE_BUDGET_BYTES = 64 * 1024 * 1024
LAYOUT_MAX_BYTES = 1024 * 1024  # one page's layout at most (else it is read by the parser)
LAYOUTS = LayoutCache(CACHE_BUDGET_BYTES)


def check_page_start(text: str) -> None:
    """Refuse a page whose first line cannot start an exposition page (HTML, JSON)."""
    lead = LEADING_BLANKS.match(text).end()  # type: ignore[union-attr]  # always matches
    if lead < len(text) and text[lead] not in FIRST_CHARS:
        line = text.count("\n", 0, lead) + 1
        raise ParseError(f"not an exposition page: starts with {text[lead : lead + 20]!r}", line)


def read_page(
    text: str, wanted: frozenset[str], max_lines: int, cache: LayoutCache = LAYOUTS
) -> Page:
    """The wanted families of ``text``: through a layout of the same skeleton when one
    reads it, else by the lenient line parser (and a layout built on the second page of a
    skeleton)."""
    check_page_start(text)
    if "\r" in text or len(text) > LAYOUT_MAX_PAGE_BYTES:
        return parse_lines(text, wanted, strict=False, max_lines=max_lines)
    skeleton = text.encode().translate(None, _SKELETON_DELETE)
    key = (wanted, hash(skeleton))
    n = 0  # layouts of this skeleton: pods whose label values differ only in digits
    while (layout := cache.get((*key, n))) is not None:
        if layout.skeleton_bytes == len(skeleton):
            values = layout.read_values(text)
            if values is not None:
                return layout.page(values)
        n += 1
    page = parse_lines(text, wanted, strict=False, max_lines=max_lines)
    if (n or not cache.first_sighting(key)) and n < LAYOUTS_PER_SKELETON:
        built = Layout.build(text, skeleton, wanted, page)
        if built is not None:
            cache.put((*key, n), built)
    return page
