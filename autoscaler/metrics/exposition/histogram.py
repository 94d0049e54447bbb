"""`merge_histogram`: a histogram family's series summed by ``le`` (PromQL ``sum by
(le)``), replayed as index arithmetic for families read through a layout.
"""

from __future__ import annotations

import math

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition.layout import _LaidOut, _Merge
from autoscaler.metrics.exposition.model import Family, HistogramData, _Labels
from autoscaler.metrics.exposition.tokens import _bucket_info


def merge_histogram(family: Family | None, line_hint: int | None = None) -> HistogramData | None:
    """Sum every series of a histogram family by ``le`` (PromQL ``sum by (le)``).

    Returns None when the family is absent or has no buckets (missing data). A bucket
    without a float ``le`` or a series without ``+Inf`` is a `ParseError`. The ``le``
    and series of a label set are memoized on it (label sets are shared by scrapes).
    """
    if family is None:
        return None
    samples = family.samples
    if type(samples) is _LaidOut:
        plan = samples.memo[0]
        if plan is not None:
            return plan.apply(samples.values)
        merged = _merge_samples(family, line_hint)
        if merged is not None:
            samples.memo[0] = _Merge.of(family, merged)
        return merged
    return _merge_samples(family, line_hint)


def _merge_samples(family: Family, line_hint: int | None) -> HistogramData | None:
    by_le: dict[float, float] = {}
    inf_series = 0
    count: float | None = None
    total: float | None = None
    suffix_bucket = family.name + "_bucket"
    suffix_count = family.name + "_count"
    suffix_sum = family.name + "_sum"
    seen: set[frozenset[tuple[str, str]]] = set()
    inf = math.inf
    for name, labels, value, _ts in family.samples:
        if name == suffix_bucket:
            info = labels.bucket if type(labels) is _Labels else None
            if info is None:
                try:
                    info = _bucket_info(labels, family.name)
                except ParseError as exc:
                    line = family.line if line_hint is None else line_hint
                    raise ParseError(str(exc).removeprefix("line 0: "), line) from None
                if type(labels) is _Labels:
                    labels.bucket = info
            le, key = info
            by_le[le] = by_le.get(le, 0.0) + value
            if le == inf:
                inf_series += 1
            seen.add(key)
        elif name == suffix_count:
            count = (count or 0.0) + value
        elif name == suffix_sum:
            total = (total or 0.0) + value
    if not by_le:
        return None
    if inf_series < len(seen):
        line = family.line if line_hint is None else line_hint
        raise ParseError(f'{family.name}: a histogram series has no le="+Inf" bucket', line)
    bounds = tuple(sorted(by_le))
    return HistogramData(bounds, tuple(by_le[b] for b in bounds), count, total)
