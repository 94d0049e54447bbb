"""The exposition format's vocabulary and the parsed result: metric types and their
sample suffixes, the name/label/exemplar patterns, `Sample`, `Family`, `Page` and
`HistogramData`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

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
