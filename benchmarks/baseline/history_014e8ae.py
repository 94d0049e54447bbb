"""`autoscaler/control/history.py` as landed in 014e8ae (decisions as objects), kept only so
benchmarks/bench_memory.py can measure it side by side. Not used by the product or tests."""

# ruff: noqa
from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import overload

from autoscaler.domain import Decision, Forecast, Observation

_NAN = math.nan
NO_NUMBERS: Mapping[str, float] = MappingProxyType({})


class DecisionHistory:
    """The last ``maxlen`` decisions; planner numbers on the newest and on change points."""

    def __init__(self, maxlen: int) -> None:
        self._items: deque[Decision] = deque(maxlen=maxlen)

    @property
    def maxlen(self) -> int | None:
        return self._items.maxlen

    def append(self, decision: Decision) -> None:
        items = self._items
        if items:
            prev = items[-1]
            if prev.numbers and not prev.changed:
                items[-1] = prev = replace(prev, numbers=NO_NUMBERS)
            decision = _share(decision, prev)
        items.append(decision)

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[Decision]:
        return iter(self._items)

    def __getitem__(self, index: int) -> Decision:
        return self._items[index]


def _share(decision: Decision, prev: Decision) -> Decision:
    """``decision`` with the message/metrics/limits objects of ``prev`` where equal."""
    same_message = decision.message == prev.message and decision.message is not prev.message
    same_metrics = decision.metrics == prev.metrics and decision.metrics is not prev.metrics
    same_limits = decision.limits == prev.limits and decision.limits is not prev.limits
    if not (same_message or same_metrics or same_limits):
        return decision
    return replace(
        decision,
        message=prev.message if same_message else decision.message,
        metrics=prev.metrics if same_metrics else decision.metrics,
        limits=prev.limits if same_limits else decision.limits,
    )


class _Columns:
    """Named float columns of one ring (NaN: absent); a column is made on first use."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cols: dict[str, array[float]] = {}

    def put(self, slot: int, values: Mapping[str, float]) -> None:
        for name, col in self.cols.items():
            if name not in values:
                col[slot] = _NAN
        for name, value in values.items():
            if name not in self.cols:
                self.cols[name] = array("d", [_NAN]) * self.size
            self.cols[name][slot] = value

    def get(self, slot: int) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, col in self.cols.items():
            value = col[slot]
            if value == value:  # not NaN
                out[name] = value
        return out


class ObservationRing:
    """The last ``maxlen`` observations, column-wise (about 8 bytes per number)."""

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._n = 0  # observations ever appended
        self._t = array("d", [0.0]) * maxlen
        # current, ready, pods_read, pending, capacity (-1: None for the optional ones)
        self._ints = [array("q", [0]) * maxlen for _ in range(5)]
        self._signals = _Columns(maxlen)
        self._horizon = array("d", [_NAN]) * maxlen  # NaN: no forecast
        self._model: list[str | None] = [None] * maxlen
        self._forecast = _Columns(maxlen)
        self._capacity = _Columns(maxlen)

    def append(self, obs: Observation) -> None:
        slot = self._n % self.maxlen
        self._t[slot] = obs.t
        for col, value in zip(
            self._ints,
            (
                obs.current_replicas,
                obs.ready_replicas,
                -1 if obs.pods_read is None else obs.pods_read,
                obs.pending_replicas,
                -1 if obs.capacity_max_replicas is None else obs.capacity_max_replicas,
            ),
            strict=True,
        ):
            col[slot] = value
        self._signals.put(slot, obs.signals)
        f = obs.forecast
        self._horizon[slot] = _NAN if f is None else f.horizon_s
        self._model[slot] = None if f is None else f.model
        self._forecast.put(slot, {} if f is None else f.signals)
        self._capacity.put(slot, {} if f is None else f.capacity_per_replica)
        self._n += 1

    def __len__(self) -> int:
        return min(self._n, self.maxlen)

    def _slot(self, index: int) -> int:
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("observation index out of range")
        return (self._n - size + index) % self.maxlen

    def _build(self, slot: int) -> Observation:
        current, ready, pods_read, pending, capacity = (col[slot] for col in self._ints)
        horizon = self._horizon[slot]
        forecast = None
        if horizon == horizon:
            forecast = Forecast(
                horizon_s=horizon,
                signals=self._forecast.get(slot),
                model=self._model[slot] or "unknown",
                capacity_per_replica=self._capacity.get(slot),
            )
        return Observation(
            t=self._t[slot],
            current_replicas=current,
            ready_replicas=ready,
            signals=self._signals.get(slot),
            pods_read=None if pods_read < 0 else pods_read,
            pending_replicas=pending,
            capacity_max_replicas=None if capacity < 0 else capacity,
            forecast=forecast,
        )

    @overload
    def __getitem__(self, index: int) -> Observation: ...

    @overload
    def __getitem__(self, index: slice) -> list[Observation]: ...

    def __getitem__(self, index: int | slice) -> Observation | list[Observation]:
        if isinstance(index, slice):
            return [self._build(self._slot(i)) for i in range(*index.indices(len(self)))]
        return self._build(self._slot(index))

    def __iter__(self) -> Iterator[Observation]:
        for i in range(len(self)):
            yield self._build(self._slot(i))

    def __bool__(self) -> bool:
        return self._n > 0
