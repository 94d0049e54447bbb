"""`merge_histogram`: a histogram family's series summed by ``le`` (PromQL ``sum by (le)``)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.model import Family, HistogramData
from autoscaler.metrics.exposition.tokens import bucket_bound


def merge_histogram(family: Family | None, line_hint: int | None = None) -> HistogramData | None:
    """Sum every series of a histogram family by ``le`` (PromQL ``sum by (le)``).

    Returns None when the family is absent or has no buckets (missing data). A series
    without its ``le="+Inf"`` bucket takes its ``_count`` there (the two are the same
    number by the format's definition); one without either, or a bucket without a float
    ``le``, is a `ParseError`.
    """
    if family is None:
        return None
    line = family.line if line_hint is None else line_hint
    merged = _merge(family, line, _series_fast)
    if merged is None:  # a series without +Inf, or label order differing within a series
        merged = _merge(family, line, _series_exact)
        if merged is None:
            raise ParseError(
                f'{family.name}: a histogram series has no le="+Inf" bucket and no _count', line
            )
    return merged if merged.bounds else None


_Key = tuple[tuple[str, str], ...] | frozenset[tuple[str, str]]


def _series_fast(labels: Mapping[str, str]) -> _Key:
    """A series' identity (its labels but ``le``) in the order written: one client
    library writes one series' labels in one order."""
    return tuple([kv for kv in labels.items() if kv[0] != "le"])


def _series_exact(labels: Mapping[str, str]) -> _Key:
    return frozenset([kv for kv in labels.items() if kv[0] != "le"])


def _merge(
    family: Family, line: int, series: Callable[[Mapping[str, str]], _Key]
) -> HistogramData | None:
    """The merged histogram; None when a series has neither ``+Inf`` nor ``_count``."""
    bucket_name = family.name + "_bucket"
    count_name = family.name + "_count"
    sum_name = family.name + "_sum"
    by_le: dict[float, float] = {}
    count: float | None = None
    total: float | None = None
    has_inf: dict[_Key, bool] = {}  # per series: whether it has its +Inf bucket
    counts: dict[_Key, float] = {}  # per series: its _count
    inf = math.inf
    fast = series is _series_fast
    for name, labels, value, _ts in family.samples:
        if name == bucket_name:
            le_text = labels.get("le")
            try:  # `bucket_bound` inline (a call per bucket is a third of the merge)
                le = float(le_text)  # type: ignore[arg-type]  # None: TypeError
                ok = le == le and "_" not in le_text  # type: ignore[operator]
            except (TypeError, ValueError):
                ok = False
            if not ok:
                le = bucket_bound(labels, family.name, line)  # raises the precise error
            by_le[le] = by_le.get(le, 0.0) + value
            if fast:
                key: _Key = tuple([kv for kv in labels.items() if kv[0] != "le"])
            else:
                key = series(labels)
            if le == inf or key not in has_inf:
                has_inf[key] = has_inf.get(key, False) or le == inf
        elif name == count_name:
            count = (count or 0.0) + value
            key = series(labels)
            counts[key] = counts.get(key, 0.0) + value
        elif name == sum_name:
            total = (total or 0.0) + value
    for key, seen_inf in has_inf.items():
        if not seen_inf:
            if key not in counts:
                return None
            by_le[inf] = by_le.get(inf, 0.0) + counts[key]
    bounds = tuple(sorted(by_le))
    return HistogramData(bounds, tuple(by_le[b] for b in bounds), count, total)
