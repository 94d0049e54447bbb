"""The exposition format's vocabulary and the parsed result: metric types and their
sample suffixes, the name/label/exemplar patterns, `Sample`, `Family`, `Page` and
`HistogramData`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

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
SUFFIXES: dict[str, tuple[str, ...]] = {
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
ALL_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_gcount", "_gsum", "_info")
NAME_RE = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*')
EXEMPLAR_RE = re.compile(
    r'#[ \t]*\{((?:[ \t]*[a-zA-Z_][a-zA-Z0-9_]*[ \t]*=[ \t]*"(?:[^"\\\n]|\\.)*"[ \t]*,?)*)[ \t]*\}'
    r"[ \t]+(\S+)(?:[ \t]+(\S+))?[ \t]*$"
)
ESCAPE_RE = re.compile(r'\\([\\"n])')
FIRST_CHARS = frozenset("#abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_:")
LEADING_BLANKS = re.compile(r"\s*")


class Sample(NamedTuple):
    """One exposition line: full sample name (with suffix), labels, value, timestamp.

    A NamedTuple rather than a frozen dataclass: equally immutable, but built in half
    the time (a fast parse creates one per wanted line).
    """

    name: str
    labels: Mapping[str, str]
    value: float
    timestamp: float | None = None


NO_LABELS: Mapping[str, str] = MappingProxyType({})


class Family(NamedTuple):
    """A metric family keyed by its base name (counters without ``_total``).

    ``origin`` is the 1-based line of the family's first sample. A NamedTuple for the
    same reason as `Sample`.
    """

    name: str
    type: str
    samples: tuple[Sample, ...]
    origin: int
    help: str | None = None

    @property
    def line(self) -> int:
        """The 1-based line of the family's first sample (for error messages)."""
        return self.origin


@dataclass(frozen=True, slots=True)
class Page:
    """The parsed families (only the wanted ones when families were named).

    ``dropped`` names each family left out because one of its lines broke a rule (the
    lenient mode's answer to a line the strict mode rejects), with that rule.
    """

    families: Mapping[str, Family]
    openmetrics: bool = False
    dropped: Mapping[str, str] = field(default_factory=dict)

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
