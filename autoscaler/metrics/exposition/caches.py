"""The parser's memory of earlier pages, bounded in bytes.

Everything here only makes parsing faster: results never depend on it (`clear_caches`).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from autoscaler.metrics.exposition.layout import _Layout


# --- caches: bounded in bytes --------------------------------------------------------
# Everything the fast mode learns from pages is text-keyed and could be as large as the
# text a pod sends, so every cache is accounted in bytes (`sys.getsizeof` of what an entry
# holds, shared objects counted in each holder, i.e. over- rather than under-counted):
# - one entry over CACHE_ENTRY_MAX_BYTES (a 4 MB label value, a huge HELP line) is never
#   stored: such a line is parsed every time, as a first page would be;
# - one page may add at most PAGE_CACHE_ALLOWANCE_BYTES of new entries (what one scrape of
#   one pod can push into the shared caches); the rest of that page is parsed uncached;
# - each cache has a share of CACHE_BUDGET_BYTES; a full cache evicts its oldest entries.
# So a hostile pod costs CPU on its own scrapes, never memory beyond the budget.
CACHE_BUDGET_BYTES = 24 * 1024 * 1024
CACHE_ENTRY_MAX_BYTES = 4096
PAGE_CACHE_ALLOWANCE_BYTES = 256 * 1024
_MIB = 1024 * 1024
# Shares of CACHE_BUDGET_BYTES: label sets 4, line heads 4, layouts 12 (about 40 kB per
# distinct page layout, e.g. 300 models), the rest 1 MiB each.
_LAYOUT_BUDGET_BYTES = CACHE_BUDGET_BYTES - 12 * _MIB

_K = TypeVar("_K")
_V = TypeVar("_V")

_LOCK = threading.Lock()  # insertions/evictions (pages may be parsed in worker threads)
_PAGE = threading.local()  # .allowance: bytes the current page may still add


class _ByteCache(dict[_K, _V], Generic[_K, _V]):
    """A dict whose entries are accounted in bytes, evicted oldest first past its budget.

    Lookups are plain `dict.get` (the hot path); only `put` accounts.
    """

    __slots__ = ("budget_bytes", "entry_max_bytes", "sizes", "used_bytes")

    def __init__(self, budget_bytes: int, entry_max_bytes: int = CACHE_ENTRY_MAX_BYTES) -> None:
        super().__init__()
        self.budget_bytes = budget_bytes
        self.entry_max_bytes = entry_max_bytes
        self.sizes: dict[_K, int] = {}
        self.used_bytes = 0

    def put(self, key: _K, value: _V, *parts: object) -> None:
        """Store ``value`` (accounted as ``_size(*parts)``) if it fits the per-entry cap
        and the page's allowance; nothing is measured once the allowance is spent."""
        if getattr(_PAGE, "allowance", PAGE_CACHE_ALLOWANCE_BYTES) > 0:
            self.put_sized(key, value, _size(*parts))

    def put_sized(self, key: _K, value: _V, size_bytes: int) -> None:
        """`put` with the size already known."""
        if size_bytes > self.entry_max_bytes:
            return
        allowance: int = getattr(_PAGE, "allowance", PAGE_CACHE_ALLOWANCE_BYTES)
        if size_bytes > allowance:
            return
        _PAGE.allowance = allowance - size_bytes
        with _LOCK:
            old = self.sizes.pop(key, None)
            if old is not None:
                self.used_bytes -= old
            self.used_bytes += size_bytes
            self.sizes[key] = size_bytes
            self[key] = value
            while self.used_bytes > self.budget_bytes and self.sizes:
                oldest = next(iter(self.sizes))
                self.used_bytes -= self.sizes.pop(oldest)
                self.pop(oldest, None)

    def discard(self, key: _K) -> None:
        with _LOCK:
            self.used_bytes -= self.sizes.pop(key, 0)
            self.pop(key, None)

    def clear(self) -> None:
        with _LOCK:
            super().clear()
            self.sizes.clear()
            self.used_bytes = 0


def _size(*parts: object) -> int:
    """Accounted bytes of an entry made of ``parts`` (a mapping counts its keys and values)."""
    total = 0
    for part in parts:
        total += sys.getsizeof(part)
        if isinstance(part, dict):
            for k, v in part.items():
                total += sys.getsizeof(k) + sys.getsizeof(v)
        elif isinstance(part, tuple):
            total += _size(*part) - sys.getsizeof(())
    return total


def _new_page() -> None:
    """Reset the per-page cache allowance (called once per parse)."""
    _PAGE.allowance = PAGE_CACHE_ALLOWANCE_BYTES


_LABEL_CACHE: _ByteCache[str, Mapping[str, str]] = _ByteCache(4 * _MIB)


# Sample-line heads (``name{labels}``) already parsed, with their name and label set.
# A line ``head value`` whose head is here skips the label parse; only heads of lines
# the general path accepted as exactly ``head`` + one blank + a value are stored, so a
# hit always parses as the general path would. Shared across pages (bounded).
_HEADS: _ByteCache[str, tuple[str, Mapping[str, str]]] = _ByteCache(4 * _MIB)
_HEADS_MAX = 16384  # entries of the caches keyed by wanted names (bounded by the caller)
# Plain HELP/TYPE lines already read: (is TYPE, name, type or help text).
_DECLS: _ByteCache[str, tuple[bool, str, str]] = _ByteCache(_MIB)
# Sample name -> (its declaration, base name, base type, family) from the last page; the
# family is reused while the two declarations it was derived from are the same.
_RESOLVE: _ByteCache[
    str, tuple[tuple[str, str] | None, str | None, str | None, tuple[str, str]]
] = _ByteCache(_MIB)
# The comment block above each family's first line, with its declarations (see `back`).
_ABOVE: _ByteCache[str, tuple[str, tuple[tuple[int, bool, str, str], ...]]] = _ByteCache(_MIB)
# Where each family's first line was on the last page parsed (a search start, see `_first`).
_FIRST_HINT: dict[str, int] = {}
# Per wanted family set: its order on the page and bases to declare (see `_plan`).
_PLANS: dict[frozenset[str], tuple[tuple[tuple[str, str], ...], tuple[str, ...]]] = {}
# Bytes of each family's last group (plus slack): the chunk size of its next walk.
_GROUP_BYTES: dict[str, int] = {}
# Layouts of pages seen at least twice, by (wanted families, hash of the page skeleton,
# n < LAYOUTS_PER_SKELETON: pods whose own label values differ only in digits share a
# skeleton, not a layout);
# skeletons seen once (a layout is built on the second sighting: a pod whose layout
# changes on every scrape never pays for building one).
_LAYOUTS: _ByteCache[tuple[frozenset[str], int, int], _Layout] = _ByteCache(
    _LAYOUT_BUDGET_BYTES, 256 * 1024
)
_SKELETONS: _ByteCache[tuple[frozenset[str], int], bool] = _ByteCache(_MIB)
_WANTED: dict[tuple[str, ...], frozenset[str]] = {}  # keyed by adapters' family tuples
_BYTE_CACHES: tuple[_ByteCache[Any, Any], ...] = (
    _LABEL_CACHE,
    _HEADS,
    _DECLS,
    _RESOLVE,
    _ABOVE,
    _LAYOUTS,
    _SKELETONS,
)


def clear_caches() -> None:
    """Forget everything learned from earlier pages (a pod's first scrape, benchmarks).

    The caches only make parsing faster: results never depend on them.
    """
    for cache in _BYTE_CACHES:
        cache.clear()
    for counted in (_FIRST_HINT, _PLANS, _GROUP_BYTES):
        counted.clear()


def cache_bytes() -> int:
    """Bytes accounted by the parser's text-keyed caches (never over CACHE_BUDGET_BYTES)."""
    return sum(cache.used_bytes for cache in _BYTE_CACHES)
