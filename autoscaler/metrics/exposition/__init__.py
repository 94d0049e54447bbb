"""Prometheus text format 0.0.4 and OpenMetrics 1.0 parser that builds only wanted families.

`parse_page(text, families)` is what a scrape runs: lenient, and through a *layout* when
the page's skeleton (its text without digits and value signs) was seen before. A pod's
pages differ from scrape to scrape in their values only, so the second page of a skeleton
records where the wanted lines are and what they must say; later pages with that skeleton
are read by line index with C loops only (`layout`). Any other page is read line by line
(`parser`): only lines whose name starts with a wanted family's are read, and a line that
breaks a rule drops its family (`Page.dropped`), never the page. ``strict=True`` (or
``families=None``) reads and checks every line and raises on the first broken rule: the
offline command's mode. prometheus_client's parser reads the same pages
(tests hold both to it) but costs ~50x more per page (docs/metrics.md, "Parser").

Rules (for every line a parse reads):
- label values: escapes ``\\\\``, ``\\"``, ``\\n``; other escapes are kept verbatim like
  `prometheus_client` does; label names ``[a-zA-Z_][a-zA-Z0-9_]*``, no duplicates;
- values and timestamps: decimal floats with exponents, ``NaN``, ``+Inf``/``-Inf``
  (case-insensitive), no ``_`` separators; an optional OpenMetrics exemplar
  (``# {labels} value [timestamp]``) is checked and ignored;
- ``# HELP`` / ``# TYPE`` / ``# UNIT`` / ``# EOF``; a second ``TYPE`` for one name and an
  unknown type break a rule; in strict mode so does anything after ``# EOF``;
- a sample belongs to a family by its name and the family's type (``x_bucket`` belongs to
  histogram ``x``, ``x_total``/``x_created`` to counter ``x``, in either format); samples
  with no ``TYPE`` are ``untyped`` families of their own name, except that
  ``x_bucket``/``x_count``/``x_sum``/``x_total`` join a wanted family ``x`` that has no
  ``TYPE`` line (typed histogram or counter from those suffixes).
A page is refused whole (`ParseError` with the 1-based line) only when it cannot be an
exposition page (its first character: HTML, JSON), or is over a bound (``max_lines``).
Everything here is a plain function of its text (no event loop, no I/O).

Modules: `model` (types), `tokens` (one line's labels, value, exemplar), `parser` (the
line parser), `layout` (pages read by a layout; `LayoutCache`), `histogram`.
"""

from __future__ import annotations

from collections.abc import Collection

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.histogram import merge_histogram
from autoscaler.metrics.exposition.layout import (
    CACHE_BUDGET_BYTES,
    LAYOUTS,
    read_page,
)
from autoscaler.metrics.exposition.model import Family, HistogramData, Page, Sample
from autoscaler.metrics.exposition.parser import parse_lines

__all__ = [
    "CACHE_BUDGET_BYTES",
    "LAYOUTS",
    "MAX_WANTED_LINES",
    "Family",
    "HistogramData",
    "Page",
    "Sample",
    "cache_bytes",
    "clear_caches",
    "merge_histogram",
    "parse_page",
]

# Lines of the wanted families one parse reads at most (~10-30 ms of CPU): a page with
# more (200k series of a wanted family) is refused whole with `ParseError`, so the pod
# counts as unread rather than stalling the process for seconds.
MAX_WANTED_LINES = 10_000


def parse_page(
    text: str,
    families: Collection[str] | None = None,
    *,
    strict: bool = False,
    max_lines: int | None = None,
) -> Page:
    """Parse an exposition page; ``families`` restricts the result to those base names.

    Lenient (``strict`` false, ``families`` given): at most ``max_lines`` (default
    MAX_WANTED_LINES) lines that may belong to a wanted family are read. Strict: every
    line is checked (of a page of at most ``max_lines`` lines, if given). Raises
    `ParseError` on a page over the bound, one that is not an exposition page, and in
    strict mode on any broken rule.
    """
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", 1)
    if strict or families is None:
        if max_lines is not None and text.count("\n") > max_lines:
            raise ParseError(f"page refused: more than max_lines={max_lines} lines", max_lines + 1)
        return parse_lines(text, None if families is None else frozenset(families), strict=True)
    limit = MAX_WANTED_LINES if max_lines is None else max_lines
    wanted = families if isinstance(families, frozenset) else frozenset(families)
    if not wanted:
        return Page({})
    return read_page(text, wanted, limit)


def clear_caches() -> None:
    """Forget every layout (a pod's first scrape, benchmarks); results never depend on it."""
    LAYOUTS.clear()


def cache_bytes() -> int:
    """Bytes accounted by the layouts (never over CACHE_BUDGET_BYTES)."""
    return LAYOUTS.used_bytes
