"""Compact per-target histories, so 1,000 targets fit in a few hundred megabytes.

A target keeps its last `HISTORY_LEN` decisions and `OBSERVATIONS_LEN` observations. Kept
as objects, one observation is a dict of signals plus a forecast (~1-2 KB) and one
decision ~400 bytes plus ~40 planner numbers (~4 KB). Here both are column-wise in
preallocated arrays (4 bytes per number while float32 holds every value of its column
exactly, else 8; NaN for absent; replica counts 1 byte until one needs more) and an
object is rebuilt when one is read:

- `ObservationRing`: the signals, forecast and capacity numbers by name;
- `DecisionHistory`: the replica counts and the metrics' values; the message, limits
  and the metrics' names and targets once per distinct value (a steady target repeats
  them); the planner's numbers only on the newest decision and on change points
  (desired != current).

Both read like a bounded deque (``append``, ``len``, indexing and slices, iteration,
oldest first). Sizes per target: docs/scale.md, "Memory".
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any, TypeVar, overload

from autoscaler.domain import Decision, Forecast, MetricRecommendation, Observation, Reason

_NAN = math.nan
NO_NUMBERS: Mapping[str, float] = MappingProxyType({})
T = TypeVar("T")


_REASONS: tuple[Reason, ...] = tuple(Reason)
_REASON_INDEX = {reason: i for i, reason in enumerate(_REASONS)}
# (signal, metric_type, target, active, learned) of each metric: what repeats tick to tick
_Shape = tuple[tuple[str, str, float, bool, bool], ...]
_ACTIVE, _PANIC = 1, 2
_WIDER = {"b": "h", "h": "i", "i": "q", "f": "d"}


def _opt(value: float | None) -> float:
    return _NAN if value is None else value


def _opt_int(value: float) -> int | None:
    return None if value != value else int(value)


def _floats(size: int) -> array[float]:
    """A float column of ``size`` absent values, 4 bytes each until a value needs 8."""
    return array("f", [_NAN]) * size


def _put(col: array[Any], slot: int, value: float) -> array[Any]:
    """``col[slot] = value`` exactly: ``col`` itself, or a wider copy when ``value`` does
    not fit (a float32 column takes only values it reads back unchanged, NaN included; an
    integer column widens 1 -> 2 -> 4 -> 8 bytes)."""
    code = col.typecode
    if code == "f":
        col[slot] = value  # a float32 rounds (or overflows to inf) instead of raising
        got = col[slot]
        if got == value or (value != value and got != got):
            return col
    else:
        try:
            col[slot] = value
            return col
        except OverflowError:
            pass
    while True:
        col = array(_WIDER[code], col)
        code = col.typecode
        try:
            col[slot] = value
            return col
        except OverflowError:
            continue


class _Interned:
    """Per-history table of distinct values, each slot holding an index into it; the
    table is rebuilt from the live slots when it grows past ``4 x maxlen + 64``."""

    def __init__(self, maxlen: int, empty: object) -> None:
        self._limit = 4 * maxlen + 64
        self.values: list[Any] = [empty]
        self.index: dict[object, int] = {empty: 0}
        self.slots: array[int] = array("H" if self._limit < 2**16 else "I", [0]) * maxlen

    def put(self, slot: int, value: object) -> None:
        i = self.index.get(value)
        if i is None:
            if len(self.values) > self._limit:  # forget values no slot holds any more
                live = [self.values[j] for j in self.slots]
                self.values = list(dict.fromkeys(live))
                self.index = {v: j for j, v in enumerate(self.values)}
                self.slots = array(self.slots.typecode, (self.index[v] for v in live))
            i = self.index[value] = len(self.values)
            self.values.append(value)
        self.slots[slot] = i

    def get(self, slot: int) -> Any:
        return self.values[self.slots[slot]]

    def __len__(self) -> int:
        return len(self.values)


class DecisionHistory:
    """The last ``maxlen`` decisions, column-wise; planner numbers on the newest and on
    change points (desired != current).

    A decision object is ~400 bytes (its message, a `MetricRecommendation` per metric,
    their floats): 500 per target were ~200 KB. Here the numbers are columns (4 bytes per
    value a float32 holds exactly, else 8; NaN for None; replica counts 1 byte until one
    needs more), and the message, the metrics' names and targets and the limits are
    stored once per distinct value with a 2-byte index per decision; a `Decision` is
    rebuilt when one is read (equal to the one appended)."""

    def __init__(self, maxlen: int) -> None:
        self._maxlen = maxlen
        self._n = 0  # decisions ever appended
        self._t = array("d", [0.0]) * maxlen
        self._current = array("b", [0]) * maxlen
        self._desired = array("b", [0]) * maxlen
        self._flags = array("B", [0]) * (2 * maxlen)  # reason index, active | panic
        self._interned = _Interned(maxlen, "")  # messages
        self._limits = _Interned(maxlen, ())
        self._shape = _Interned(maxlen, ())
        # per metric position: value, replicas, forecast_value, forecast_replicas columns
        self._metric_values: list[list[array[float]]] = []
        self._numbers: dict[int, Mapping[str, float]] = {}  # by slot

    @property
    def maxlen(self) -> int:
        return self._maxlen

    def append(self, decision: Decision) -> None:
        size = self._maxlen
        slot = self._n % size
        if self._n:
            prev = (self._n - 1) % size
            if self._current[prev] == self._desired[prev]:
                self._numbers.pop(prev, None)  # not a change point: numbers only while newest
        self._numbers.pop(slot, None)
        self._t[slot] = decision.t
        self._current = _put(self._current, slot, decision.current_replicas)
        self._desired = _put(self._desired, slot, decision.desired_replicas)
        self._flags[2 * slot] = _REASON_INDEX[decision.reason]
        self._flags[2 * slot + 1] = (_ACTIVE if decision.active else 0) | (
            _PANIC if decision.panic else 0
        )
        self._interned.put(slot, decision.message)
        self._limits.put(slot, tuple(decision.limits))
        metrics = decision.metrics
        self._shape.put(
            slot, tuple((m.signal, m.metric_type, m.target, m.active, m.learned) for m in metrics)
        )
        while len(self._metric_values) < len(metrics):
            self._metric_values.append([_floats(size) for _ in range(4)])
        for cols, m in zip(self._metric_values, metrics, strict=False):
            for k, value in enumerate((m.value, m.replicas, m.forecast_value, m.forecast_replicas)):
                col = cols[k]
                put = _put(col, slot, _opt(value))
                if put is not col:
                    cols[k] = put
        if decision.numbers:
            self._numbers[slot] = decision.numbers
        self._n += 1

    def __len__(self) -> int:
        return min(self._n, self._maxlen)

    def __bool__(self) -> bool:
        return self._n > 0

    def _slot(self, index: int) -> int:
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError("decision index out of range")
        return (self._n - size + index) % self._maxlen

    def _build(self, slot: int) -> Decision:
        metrics: list[MetricRecommendation] = []
        for cols, (signal, metric_type, target, active, learned) in zip(
            self._metric_values, self._shape.get(slot), strict=False
        ):
            value, replicas, forecast_value, forecast_replicas = (c[slot] for c in cols)
            metrics.append(
                MetricRecommendation(
                    signal,
                    metric_type,
                    target,
                    None if value != value else value,
                    _opt_int(replicas),
                    None if forecast_value != forecast_value else forecast_value,
                    _opt_int(forecast_replicas),
                    active,
                    learned,
                )
            )
        flags = self._flags[2 * slot + 1]
        return Decision(
            t=self._t[slot],
            current_replicas=self._current[slot],
            desired_replicas=self._desired[slot],
            reason=_REASONS[self._flags[2 * slot]],
            message=self._interned.get(slot),
            active=bool(flags & _ACTIVE),
            metrics=tuple(metrics),
            numbers=self._numbers.get(slot, NO_NUMBERS),
            limits=self._limits.get(slot),
            panic=bool(flags & _PANIC),
        )

    @overload
    def __getitem__(self, index: int) -> Decision: ...

    @overload
    def __getitem__(self, index: slice) -> list[Decision]: ...

    def __getitem__(self, index: int | slice) -> Decision | list[Decision]:
        if isinstance(index, slice):
            return [self._build(self._slot(i)) for i in range(*index.indices(len(self)))]
        return self._build(self._slot(index))

    def __iter__(self) -> Iterator[Decision]:
        for i in range(len(self)):
            yield self._build(self._slot(i))


class _Columns:
    """Named float columns of one ring (NaN: absent); a column is made on first use, 4
    bytes per value until it holds a value a float32 does not hold exactly."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.cols: dict[str, array[float]] = {}

    def put(self, slot: int, values: Mapping[str, float]) -> None:
        cols = self.cols
        for name, col in cols.items():
            if name not in values:
                col[slot] = _NAN
        for name, value in values.items():
            column = cols.get(name)
            if column is None:
                column = cols[name] = _floats(self.size)
            put = _put(column, slot, value)
            if put is not column:
                cols[name] = put

    def get(self, slot: int) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, col in self.cols.items():
            value = col[slot]
            if value == value:  # not NaN
                out[name] = value
        return out


class ObservationRing:
    """The last ``maxlen`` observations, column-wise (4 or 8 bytes per number, replica
    counts 1 byte until one needs more, the forecast model's name as a 2-byte index)."""

    def __init__(self, maxlen: int) -> None:
        self.maxlen = maxlen
        self._n = 0  # observations ever appended
        self._t = array("d", [0.0]) * maxlen
        # current, ready, pods_read, pending, capacity (-1: None for the optional ones);
        # 1 byte each, a column widens when a count does not fit
        self._ints = [array("b", [0]) * maxlen for _ in range(5)]
        self._signals = _Columns(maxlen)
        self._horizon = _floats(maxlen)  # NaN: no forecast
        self._model = _Interned(maxlen, None)
        self._forecast = _Columns(maxlen)
        self._capacity = _Columns(maxlen)

    def append(self, obs: Observation) -> None:
        slot = self._n % self.maxlen
        self._t[slot] = obs.t
        ints = self._ints
        for k, value in enumerate(
            (
                obs.current_replicas,
                obs.ready_replicas,
                -1 if obs.pods_read is None else obs.pods_read,
                obs.pending_replicas,
                -1 if obs.capacity_max_replicas is None else obs.capacity_max_replicas,
            )
        ):
            col = ints[k]
            put = _put(col, slot, value)
            if put is not col:
                ints[k] = put
        self._signals.put(slot, obs.signals)
        f = obs.forecast
        self._horizon = _put(self._horizon, slot, _NAN if f is None else f.horizon_s)
        self._model.put(slot, None if f is None else f.model)
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
                model=self._model.get(slot) or "unknown",
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
