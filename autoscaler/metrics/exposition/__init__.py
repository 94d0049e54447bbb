"""Prometheus text format 0.0.4 and OpenMetrics 1.0 parser that builds only wanted families.

Why not `prometheus_client.parser`: it parses every line of a ~500-line vLLM page
character by character (~6 ms) while an adapter needs about ten families. `parse_page`
with ``families=`` finds each wanted family with C string searches (`str.rfind` proves
where its lines start and end), reads the run of lines there (wanted families that
follow each other in one run) and parses only those lines; `strict=True` (or
``families=None``) parses and validates every line. What the fast mode learns from a
page is kept for the next one, keyed by text and never by values (line heads
``name{labels}`` with their parsed label sets, HELP/TYPE lines, comment blocks, where
families were): a page that changed is read exactly as the strict mode reads it, only
slower. A page whose skeleton (text without digits and value signs) was seen twice is read
through its *layout* by line index, with C loops only (see `_Layout`). All caches are
bounded in bytes (see CACHE_BUDGET_BYTES) and a page is bounded in wanted lines
(MAX_WANTED_LINES). `clear_caches` forgets it all. Everything here is a plain function
of its text (no event loop, no I/O): it runs in worker threads or processes alike.

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
The fast mode rejects pages whose first line cannot start an exposition page (HTML,
JSON), validates every line of the wanted families and the comment lines around them
(so ``# EOF`` followed by a wanted line is an error), but does not validate lines of
families it was not asked for. A wanted family split into several groups (invalid in
both formats, accepted by the strict mode) is still read whole: after each group the
rest of the page is searched for more.

Modules: `model` (types), `tokens` (one line's labels, value, exemplar), `strict` (every
line), `scan` (the fast walk), `layout` (a page read by its previous page's layout),
`caches` (byte-bounded memory of earlier pages), `histogram` (`merge_histogram`).
"""

from __future__ import annotations

from collections.abc import Collection

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.caches import (
    _PAGE,
    _WANTED,
    CACHE_BUDGET_BYTES,
    CACHE_ENTRY_MAX_BYTES,
    PAGE_CACHE_ALLOWANCE_BYTES,
    _new_page,
    cache_bytes,
    clear_caches,
)
from autoscaler.metrics.exposition.histogram import merge_histogram
from autoscaler.metrics.exposition.layout import LaidOut, _parse_fast, _parse_fast_values
from autoscaler.metrics.exposition.model import Family, HistogramData, Page, Sample
from autoscaler.metrics.exposition.scan import MAX_WANTED_LINES
from autoscaler.metrics.exposition.strict import _parse_strict

__all__ = [
    "CACHE_BUDGET_BYTES",
    "CACHE_ENTRY_MAX_BYTES",
    "MAX_WANTED_LINES",
    "PAGE_CACHE_ALLOWANCE_BYTES",
    "Family",
    "HistogramData",
    "LaidOut",
    "Page",
    "Sample",
    "cache_bytes",
    "clear_caches",
    "merge_histogram",
    "parse_page",
    "parse_page_values",
]


def parse_page(
    text: str,
    families: Collection[str] | None = None,
    *,
    strict: bool = False,
    max_lines: int | None = None,
) -> Page:
    """Parse an exposition page; ``families`` restricts the result to those base names.

    Fast mode (``families`` given, ``strict`` false) parses only the wanted families'
    lines, at most ``max_lines`` of them (default MAX_WANTED_LINES); strict mode
    validates every line (of a page of at most ``max_lines`` lines, if given). Raises
    `ParseError` on invalid input and on a page over the bound (never a partial page).
    """
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", 1)
    _new_page()
    _PAGE.max_lines = MAX_WANTED_LINES if max_lines is None else max_lines
    if families is None or strict:
        if max_lines is not None and text.count("\n") > max_lines:
            raise ParseError(f"page refused: more than max_lines={max_lines} lines", max_lines + 1)
        return _parse_strict(text, None if families is None else frozenset(families))
    wanted = _WANTED.get(families) if type(families) is tuple else None
    if wanted is None:
        wanted = frozenset(families)
        if type(families) is tuple and len(_WANTED) < 1024:
            _WANTED[families] = wanted  # one set object per caller tuple: its hash is kept
    if not wanted:
        return Page({})
    return _parse_fast(text, wanted, _PAGE.max_lines)


def parse_page_values(
    text: str, families: tuple[str, ...], *, max_lines: int | None = None
) -> Page | LaidOut:
    """`parse_page`'s fast mode, but a page read through a layout comes back unbuilt:
    ``(layout, values)``, where ``layout.page(values)`` is the `Page` `parse_page`
    returns and ``layout.plans`` a memo for what a reader derives from the layout."""
    if not isinstance(text, str):
        raise ParseError(f"expected text, got {type(text).__name__}", 1)
    _new_page()
    _PAGE.max_lines = MAX_WANTED_LINES if max_lines is None else max_lines
    wanted = _WANTED.get(families)
    if wanted is None:
        wanted = frozenset(families)
        if len(_WANTED) < 1024:
            _WANTED[families] = wanted
    if not wanted:
        return Page({})
    return _parse_fast_values(text, wanted, _PAGE.max_lines)
