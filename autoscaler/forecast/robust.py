"""Burst filter shared by every forecaster: Huber-clipped innovations with confirmation.

A forecaster compares each sample with what it predicted for that instant (the
innovation). One wild sample must not drag the level for minutes, yet a real step change
must be adopted quickly. So innovations are clipped to ``huber_k`` times a robust scale
(an exponentially weighted mean absolute innovation), unless outliers of the same sign
have persisted for ``confirm_s`` seconds: then the shift is real and passes unclipped.
The influence of an isolated spike is therefore bounded by ``huber_k * scale * alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, TypeVar

T = TypeVar("T")
_MISSING = object()
_EVOLVERS: dict[type, Callable[..., Any]] = {}


def evolve(obj: T, /, **changes: Any) -> T:
    """``dataclasses.replace`` for a state transition of an already validated object:
    the same fields, without ``__init__``/``__post_init__`` (the parameters they check do
    not change). replace was a fifth of a planner tick (issue 16, bench_tick.py)."""
    cls = type(obj)
    fn = _EVOLVERS.get(cls)
    if fn is None:
        fn = _EVOLVERS[cls] = _make_evolver(cls)
    return fn(obj, **changes)  # type: ignore[no-any-return]


def _make_evolver(cls: type) -> Callable[..., Any]:
    """A keyword-only copier for ``cls`` (generated once, as dataclasses does)."""
    names = [f.name for f in fields(cls)]
    body = "".join(f"    _set(new, {n!r}, self.{n} if {n} is _M else {n})\n" for n in names)
    params = ", ".join(f"{n}=_M" for n in names)
    src = f"def evolve(self, *, {params}):\n    new = _new(_cls)\n{body}    return new\n"
    namespace: dict[str, Any] = {"_M": _MISSING, "_new": object.__new__, "_cls": cls}
    namespace["_set"] = object.__setattr__
    exec(src, namespace)  # field names of our own dataclasses only
    return namespace["evolve"]  # type: ignore[no-any-return]


def quantile_sorted(values: Sequence[float], q: float) -> float:
    """``numpy.quantile(values, q)`` (method "linear") of ascending ``values``, bit for
    bit: numpy's virtual index, bounds and two-sided lerp, without numpy's ~30 us of
    overhead per call on a 600-sample window (per target per tick)."""
    n = len(values)
    if n == 0:
        raise ValueError("values: value () must hold at least one sample")
    virtual = (n - 1) * q
    if virtual >= n - 1:
        below = above = -1
    elif virtual < 0:
        below = above = 0
    else:
        below = math.floor(virtual)
        above = below + 1
    gamma = virtual - below
    a, b = values[below], values[above]
    diff = b - a
    if gamma >= 0.5:
        return b - diff * (1 - gamma)
    return a + diff * gamma


def check_finite(name: str, value: float, *, minimum: float | None = None) -> float:
    """Return ``value`` or raise a ValueError naming the field, the value and the rule."""
    if not math.isfinite(value):
        raise ValueError(f"{name}: value {value!r} must be a finite number")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name}: value {value!r} must be >= {minimum}")
    return value


def check_positive(name: str, value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name}: value {value!r} must be a finite number > 0")
    return value


def decay(dt_s: float, tau_s: float) -> float:
    """Smoothing weight of a sample that arrives ``dt_s`` after the previous one.

    Time-aware (``1 - exp(-dt/tau)``) rather than a per-sample alpha, so irregular ticks
    and gaps weigh samples by the time they stand for.
    """
    if dt_s <= 0:
        return 0.0
    return -math.expm1(-dt_s / tau_s)


@dataclass(frozen=True, slots=True)
class Robustness:
    """Parameters of the burst filter (see the module docstring)."""

    huber_k: float = 3.0
    scale_tau_s: float = 600.0
    confirm_s: float = 15.0
    min_scale_rel: float = 0.02  # scale floor relative to |level|: no zero-width band
    min_scale_abs: float = 1e-9

    def __post_init__(self) -> None:
        check_positive("huber_k", self.huber_k)
        check_positive("scale_tau_s", self.scale_tau_s)
        check_finite("confirm_s", self.confirm_s, minimum=0.0)
        check_finite("min_scale_rel", self.min_scale_rel, minimum=0.0)
        check_finite("min_scale_abs", self.min_scale_abs, minimum=0.0)


DEFAULT_ROBUSTNESS = Robustness()


@dataclass(frozen=True, slots=True)
class InnovationFilter:
    """State of the burst filter: robust scale and the current run of outliers."""

    params: Robustness = DEFAULT_ROBUSTNESS
    scale: float | None = None
    run_sign: int = 0
    run_start_t: float | None = None

    def step(
        self, t: float, dt_s: float, innovation: float, level: float
    ) -> tuple[float, InnovationFilter]:
        """The innovation to apply after a sample at ``t`` and the filter's next state.

        The innovation is clipped to ``huber_k`` times the band (the robust scale, floored
        at ``min_scale_rel * |level|`` and ``min_scale_abs``) unless outliers of its sign
        have run for ``confirm_s``. Outliers feed the scale only up to the band unless
        confirmed, so spikes cannot widen the band, while a real regime change widens it
        at once."""
        scale = self.scale
        if scale is None:
            return innovation, _evolve_filter(self, scale=abs(innovation))
        params = self.params
        # max(scale, rel * |level|, abs)
        band = scale
        floor = params.min_scale_rel * abs(level)
        if floor > band:
            band = floor
        if params.min_scale_abs > band:
            band = params.min_scale_abs
        bound = params.huber_k * band
        magnitude = abs(innovation)
        run_start: float | None = None
        if magnitude <= bound:
            clipped = innovation
            sign = 0
        else:
            sign = 1 if innovation > 0 else -1
            old_start = self.run_start_t
            if sign == self.run_sign and old_start is not None:
                run_start = old_start
                if t - old_start >= params.confirm_s:
                    clipped = innovation  # confirmed level shift: adopt it
                else:
                    clipped = math.copysign(bound, innovation)
                    magnitude = bound
            else:
                run_start = t
                clipped = math.copysign(bound, innovation)
                if params.confirm_s > 0.0:  # a new run is confirmed at once only at 0
                    magnitude = bound
        new = _new(InnovationFilter)
        _set(new, "params", params)
        w = -math.expm1(-dt_s / params.scale_tau_s) if dt_s > 0 else 0.0  # decay()
        _set(new, "scale", scale + w * (magnitude - scale))
        _set(new, "run_sign", sign)
        _set(new, "run_start_t", run_start)
        return clipped, new


_new = object.__new__
_set = object.__setattr__


def evolver(cls: type[T]) -> Callable[..., T]:
    """The generated copier `evolve` uses for ``cls`` (to skip its lookup in hot paths)."""
    fn = _EVOLVERS.get(cls)
    if fn is None:
        fn = _EVOLVERS[cls] = _make_evolver(cls)
    return fn


_evolve_filter = evolver(InnovationFilter)
