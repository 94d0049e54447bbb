"""Compact per-target histories, so 1,000 targets fit in a few hundred megabytes.

A target keeps its last `HISTORY_LEN` decisions and `OBSERVATIONS_LEN` observations. Kept
as objects, one observation is a dict of signals plus a forecast (~1-2 KB) and one
decision ~400 bytes plus ~40 planner numbers (~4 KB). Here both are column-wise (4 bytes
per number while float32 holds every value of its column exactly, else 8; NaN for
absent; replica counts 1 byte until one needs more) in blocks of consecutive entries
(`_Blocks`): the newest block open, the older ones sealed, i.e. their columns'
bytes transposed and zlib-compressed (exact; a steady target's times, counts, indexes and
slowly moving values take a fraction of their 8 bytes). An object is rebuilt when one is
read:

- `ObservationRing`: the signals, forecast and capacity numbers by name;
- `DecisionHistory`: the replica counts and the metrics' values; the message, limits
  and the metrics' names and targets once per distinct value in a block (a steady target
  repeats them); the planner's numbers only on the newest decision and on change points
  (desired != current).

Both read like a bounded deque (``append``, ``len``, indexing and slices, iteration,
oldest first); the newest entry is always in the open block. Why: docs/architecture.md,
"Fleet scale: informers and memory".
"""

from __future__ import annotations

import math
from array import array
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Generic, TypeVar, overload

from autoscaler.domain import Decision, Forecast, MetricRecommendation, Observation, Reason
from autoscaler.packing import pack, unpack

_NAN = math.nan
NO_NUMBERS: Mapping[str, float] = MappingProxyType({})
T = TypeVar("T")
_B = TypeVar("_B")  # a block
_L = TypeVar("_L")  # a sealed block's layout


_REASONS: tuple[Reason, ...] = tuple(Reason)
_REASON_INDEX = {reason: i for i, reason in enumerate(_REASONS)}
# (signal, metric_type, target, active, learned) of each metric: what repeats tick to tick
_Shape = tuple[tuple[str, str, float, bool, bool], ...]
_ACTIVE, _PANIC = 1, 2
_WIDER = {"b": "h", "h": "i", "i": "q", "f": "d"}
# Entries per block (<= 255: a block's table indexes are 1 byte); sealed blocks are
# `autoscaler.packing`'s transposed zlib
OBS_BLOCK = 60
HISTORY_BLOCK = 50


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


class _Table:
    """A block's distinct values (a steady target repeats its message, limits and metric
    shapes), each slot a 1-byte index into them (a block holds <= 255 slots)."""

    __slots__ = ("index", "slots", "values")

    def __init__(self, size: int, empty: object) -> None:
        self.values: list[Any] = [empty]
        self.index: dict[object, int] = {empty: 0}
        self.slots = array("B", [0]) * size

    def put(self, slot: int, value: object) -> None:
        i = self.index.get(value)
        if i is None:
            i = self.index[value] = len(self.values)
            self.values.append(value)
        self.slots[slot] = i

    def get(self, slot: int) -> Any:
        return self.values[self.slots[slot]]

    @classmethod
    def of(cls, values: tuple[Any, ...], slots: array[int]) -> _Table:
        table = cls.__new__(cls)
        table.values = list(values)
        table.index = {}  # a sealed block takes no more values
        table.slots = slots
        return table


class _Blocks(Generic[_B, _L]):
    """The storage both histories share: the last ``maxlen`` entries in blocks of
    ``size``, the newest open (columns), the older ones sealed ((layout, zlib)) and
    dropped once wholly older than the last ``maxlen``. A layout equal to the previous
    block's is shared (a steady target repeats its column types and tables)."""

    def __init__(self, maxlen: int, size: int, new: Callable[[int], _B]) -> None:
        if maxlen < 1:
            raise ValueError(f"maxlen: value {maxlen} must be >= 1")
        self.maxlen = maxlen
        self.n = 0  # entries ever appended
        self.size = min(size, maxlen)  # entries per block
        self.new = new
        self.open = new(self.size)  # the newest block (1..size entries once any)
        # the blocks before it, oldest first
        self.sealed: deque[tuple[_L, bytes]] = deque()
        self._layout: _L | None = None

    def block_for_append(self, seal: Callable[[_B], tuple[_L, bytes]]) -> tuple[_B, int]:
        """The open block and the slot of the next entry (sealing a full block first)."""
        slot = self.n % self.size
        if slot == 0 and self.n:
            layout, blob = seal(self.open)
            if layout == self._layout:
                layout = self._layout
            self._layout = layout
            self.sealed.append((layout, blob))
            self.open = self.new(self.size)
        return self.open, slot

    def appended(self) -> None:
        self.n += 1
        first = self.n - len(self)
        open_index = (self.n - 1) // self.size
        while self.sealed and (open_index - len(self.sealed) + 1) * self.size <= first:
            self.sealed.popleft()

    def __len__(self) -> int:
        return min(self.n, self.maxlen)

    def position(self, index: int, what: str) -> int:
        size = len(self)
        if index < 0:
            index += size
        if not 0 <= index < size:
            raise IndexError(f"{what} index out of range")
        return self.n - size + index

    def reader(self, unseal: Callable[[tuple[_L, bytes]], _B]) -> Callable[[int], tuple[_B, int]]:
        """(block, slot) by absolute position; each sealed block unsealed once per reader."""
        cache: list[Any] = [-1, None]
        size = self.size
        open_index = (self.n - 1) // size
        first_sealed = open_index - len(self.sealed)

        def read(position: int) -> tuple[_B, int]:
            b, slot = divmod(position, size)
            if b == open_index:
                return self.open, slot
            if b != cache[0]:
                cache[0], cache[1] = b, unseal(self.sealed[b - first_sealed])
            return cache[1], slot

        return read


# Per metric position: value, replicas, forecast_value, forecast_replicas
_METRIC_COLUMNS = 4
# typecodes, messages, limits, metric shapes, metric positions, entries
_DecisionLayout = tuple[
    tuple[str, ...], tuple[str, ...], tuple[tuple[Reason, ...], ...], tuple[_Shape, ...], int, int
]


class _DecisionBlock:
    __slots__ = (
        "current",
        "desired",
        "flags",
        "limits",
        "messages",
        "metrics",
        "reason",
        "shapes",
        "t",
    )

    def __init__(self, size: int) -> None:
        self.t = array("d", [0.0]) * size
        self.current = array("b", [0]) * size
        self.desired = array("b", [0]) * size
        self.reason = array("B", [0]) * size  # an index into _REASONS
        self.flags = array("B", [0]) * size  # active | panic
        self.messages = _Table(size, "")
        self.limits = _Table(size, ())
        self.shapes = _Table(size, ())
        self.metrics: list[array[float]] = []  # _METRIC_COLUMNS per metric position

    def put(self, slot: int, decision: Decision) -> None:
        size = len(self.t)
        self.t[slot] = decision.t
        self.current = _put(self.current, slot, decision.current_replicas)
        self.desired = _put(self.desired, slot, decision.desired_replicas)
        self.reason[slot] = _REASON_INDEX[decision.reason]
        self.flags[slot] = (_ACTIVE if decision.active else 0) | (_PANIC if decision.panic else 0)
        self.messages.put(slot, decision.message)
        self.limits.put(slot, tuple(decision.limits))
        metrics = decision.metrics
        self.shapes.put(
            slot, tuple((m.signal, m.metric_type, m.target, m.active, m.learned) for m in metrics)
        )
        cols = self.metrics
        while len(cols) < _METRIC_COLUMNS * len(metrics):
            cols.append(_floats(size))
        k = 0
        for m in metrics:
            for value in (m.value, m.replicas, m.forecast_value, m.forecast_replicas):
                col = cols[k]
                put = _put(col, slot, _opt(value))
                if put is not col:
                    cols[k] = put
                k += 1

    def build(self, slot: int, numbers: Mapping[str, float]) -> Decision:
        metrics: list[MetricRecommendation] = []
        cols = self.metrics
        for i, (signal, metric_type, target, active, learned) in enumerate(self.shapes.get(slot)):
            value, replicas, forecast_value, forecast_replicas = (
                cols[_METRIC_COLUMNS * i + k][slot] for k in range(_METRIC_COLUMNS)
            )
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
        flags = self.flags[slot]
        return Decision(
            t=self.t[slot],
            current_replicas=self.current[slot],
            desired_replicas=self.desired[slot],
            reason=_REASONS[self.reason[slot]],
            message=self.messages.get(slot),
            active=bool(flags & _ACTIVE),
            metrics=tuple(metrics),
            numbers=numbers,
            limits=self.limits.get(slot),
            panic=bool(flags & _PANIC),
        )

    def seal(self) -> tuple[_DecisionLayout, bytes]:
        tables = (self.messages, self.limits, self.shapes)
        arrays: list[array[Any]] = [self.t, self.current, self.desired, self.reason, self.flags]
        arrays += [table.slots for table in tables]
        arrays += self.metrics
        layout: _DecisionLayout = (
            tuple(a.typecode for a in arrays),
            tuple(self.messages.values),
            tuple(self.limits.values),
            tuple(self.shapes.values),
            len(self.metrics),
            len(self.t),
        )
        return layout, pack(arrays)

    @classmethod
    def unseal(cls, sealed: tuple[_DecisionLayout, bytes]) -> _DecisionBlock:
        (codes, messages, limits, shapes, _, n), blob = sealed
        arrays = unpack(blob, codes, n)
        block = cls.__new__(cls)
        block.t, block.current, block.desired, block.reason, block.flags = arrays[:5]
        block.messages = _Table.of(messages, arrays[5])
        block.limits = _Table.of(limits, arrays[6])
        block.shapes = _Table.of(shapes, arrays[7])
        block.metrics = arrays[8:]
        return block


class DecisionHistory:
    """The last ``maxlen`` decisions, column-wise in blocks (see `_Blocks`); planner
    numbers on the newest and on change points (desired != current).

    A decision object is ~400 bytes (its message, a `MetricRecommendation` per metric,
    their floats): 500 per target were ~200 KB. Here the numbers are columns (4 bytes per
    value a float32 holds exactly, else 8; NaN for None; replica counts 1 byte until one
    needs more), and the message, the metrics' names and targets and the limits are
    stored once per distinct value in a block with a 1-byte index per decision; blocks
    before the newest are compressed; a `Decision` is rebuilt when one is read (equal to
    the one appended)."""

    def __init__(self, maxlen: int) -> None:
        self._blocks: _Blocks[_DecisionBlock, _DecisionLayout] = _Blocks(
            maxlen, HISTORY_BLOCK, _DecisionBlock
        )
        self._numbers: dict[int, Mapping[str, float]] = {}  # by position
        self._last_steady = False  # the newest decision is not a change point

    @property
    def maxlen(self) -> int:
        return self._blocks.maxlen

    def append(self, decision: Decision) -> None:
        blocks = self._blocks
        n = blocks.n
        if n and self._last_steady:
            self._numbers.pop(n - 1, None)  # not a change point: numbers only while newest
        self._numbers.pop(n - blocks.maxlen, None)  # falls out of the history
        block, slot = blocks.block_for_append(_DecisionBlock.seal)
        block.put(slot, decision)
        if decision.numbers:
            self._numbers[n] = decision.numbers
        self._last_steady = decision.current_replicas == decision.desired_replicas
        blocks.appended()

    def __len__(self) -> int:
        return len(self._blocks)

    def __bool__(self) -> bool:
        return self._blocks.n > 0

    def _reader(self) -> Callable[[int], Decision]:
        read = self._blocks.reader(_DecisionBlock.unseal)
        numbers = self._numbers

        def build(position: int) -> Decision:
            block, slot = read(position)
            return block.build(slot, numbers.get(position, NO_NUMBERS))

        return build

    @overload
    def __getitem__(self, index: int) -> Decision: ...

    @overload
    def __getitem__(self, index: slice) -> list[Decision]: ...

    def __getitem__(self, index: int | slice) -> Decision | list[Decision]:
        build, blocks = self._reader(), self._blocks
        if isinstance(index, slice):
            return [build(blocks.position(i, "decision")) for i in range(*index.indices(len(self)))]
        return build(blocks.position(index, "decision"))

    def __iter__(self) -> Iterator[Decision]:
        build, blocks = self._reader(), self._blocks
        for i in range(len(self)):
            yield build(blocks.position(i, "decision"))


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


class _ObsBlock:
    """Consecutive observations, column-wise."""

    __slots__ = ("capacity", "forecast", "horizon", "ints", "model", "models", "signals", "t")

    def __init__(self, size: int) -> None:
        self.t = array("d", [0.0]) * size
        # current, ready, pods_read, pending, capacity (-1: None for the optional ones);
        # 1 byte each, a column widens when a count does not fit
        self.ints = [array("b", [0]) * size for _ in range(5)]
        self.signals = _Columns(size)
        self.horizon = _floats(size)  # NaN: no forecast
        self.models = _Table(size, None)  # the forecast model's name
        self.forecast = _Columns(size)
        self.capacity = _Columns(size)

    def put(self, slot: int, obs: Observation) -> None:
        self.t[slot] = obs.t
        ints = self.ints
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
        self.signals.put(slot, obs.signals)
        f = obs.forecast
        self.horizon = _put(self.horizon, slot, _NAN if f is None else f.horizon_s)
        self.models.put(slot, None if f is None else f.model)
        self.forecast.put(slot, {} if f is None else f.signals)
        self.capacity.put(slot, {} if f is None else f.capacity_per_replica)

    def build(self, slot: int) -> Observation:
        current, ready, pods_read, pending, capacity = (col[slot] for col in self.ints)
        horizon = self.horizon[slot]
        forecast = None
        if horizon == horizon:
            forecast = Forecast(
                horizon_s=horizon,
                signals=self.forecast.get(slot),
                model=self.models.get(slot) or "unknown",
                capacity_per_replica=self.capacity.get(slot),
            )
        return Observation(
            t=self.t[slot],
            current_replicas=current,
            ready_replicas=ready,
            signals=self.signals.get(slot),
            pods_read=None if pods_read < 0 else pods_read,
            pending_replicas=pending,
            capacity_max_replicas=None if capacity < 0 else capacity,
            forecast=forecast,
        )

    def seal(self) -> tuple[_ObsLayout, bytes]:
        groups = (self.signals.cols, self.forecast.cols, self.capacity.cols)
        arrays: list[array[Any]] = [self.t, *self.ints, self.horizon, self.models.slots]
        for cols in groups:
            arrays.extend(cols.values())
        layout: _ObsLayout = (
            tuple(a.typecode for a in arrays),
            tuple(tuple(cols) for cols in groups),
            tuple(self.models.values),
            len(self.t),
        )
        return layout, pack(arrays)

    @classmethod
    def unseal(cls, sealed: tuple[_ObsLayout, bytes]) -> _ObsBlock:
        (codes, names, models, n), blob = sealed
        arrays = unpack(blob, codes, n)
        block = cls.__new__(cls)
        block.t = arrays[0]
        block.ints = arrays[1:6]
        block.horizon = arrays[6]
        block.models = _Table.of(models, arrays[7])
        k = 8
        groups = []
        for group in names:
            cols = _Columns(n)
            cols.cols = dict(zip(group, arrays[k : k + len(group)], strict=True))
            k += len(group)
            groups.append(cols)
        block.signals, block.forecast, block.capacity = groups
        return block


# typecodes, names of the signal/forecast/capacity columns, models, entries
_ObsLayout = tuple[tuple[str, ...], tuple[tuple[str, ...], ...], tuple[str | None, ...], int]


class ObservationRing:
    """The last ``maxlen`` observations, column-wise in blocks (see `_Blocks`: 4 or 8
    bytes per number, replica counts 1 byte until one needs more, the forecast model's
    name as a 1-byte index; blocks before the newest compressed). Reading the newest
    observation touches only the open block; a slice or an iteration unseals each block
    it reads once."""

    def __init__(self, maxlen: int) -> None:
        self._blocks: _Blocks[_ObsBlock, _ObsLayout] = _Blocks(maxlen, OBS_BLOCK, _ObsBlock)

    @property
    def maxlen(self) -> int:
        return self._blocks.maxlen

    def append(self, obs: Observation) -> None:
        block, slot = self._blocks.block_for_append(_ObsBlock.seal)
        block.put(slot, obs)
        self._blocks.appended()

    def __len__(self) -> int:
        return len(self._blocks)

    def __bool__(self) -> bool:
        return self._blocks.n > 0

    def _reader(self) -> Callable[[int], Observation]:
        read = self._blocks.reader(_ObsBlock.unseal)

        def build(position: int) -> Observation:
            block, slot = read(position)
            return block.build(slot)

        return build

    @overload
    def __getitem__(self, index: int) -> Observation: ...

    @overload
    def __getitem__(self, index: slice) -> list[Observation]: ...

    def __getitem__(self, index: int | slice) -> Observation | list[Observation]:
        build, blocks = self._reader(), self._blocks
        if isinstance(index, slice):
            return [
                build(blocks.position(i, "observation")) for i in range(*index.indices(len(self)))
            ]
        return build(blocks.position(index, "observation"))

    def __iter__(self) -> Iterator[Observation]:
        build, blocks = self._reader(), self._blocks
        for i in range(len(self)):
            yield build(blocks.position(i, "observation"))
