"""HPA ``behavior`` semantics: defaults, stabilisation windows and rate policies.

Mirrors the Kubernetes HPA controller (pkg/controller/podautoscaler/horizontal.go):
``stabilizeRecommendationWithBehaviors`` and ``convertDesiredReplicasWithBehaviorRate``.
Pure functions over the recorded history; time is passed in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace

from autoscaler.domain import DecisionState, ScaleEvent, TimedValue
from autoscaler.policy.schema import Behavior, ScalingPolicy, ScalingRules

DEFAULT_TOLERANCE = 0.1


@dataclass(frozen=True, slots=True)
class Rules:
    """ScalingRules with HPA's defaults filled in."""

    stabilization_window_s: int
    select_policy: str
    tolerance: float
    policies: tuple[ScalingPolicy, ...]

    @property
    def longest_period_s(self) -> int:
        return max((p.period_seconds for p in self.policies), default=0)


_UP_DEFAULT = Rules(
    stabilization_window_s=0,
    select_policy="Max",
    tolerance=DEFAULT_TOLERANCE,
    policies=(
        ScalingPolicy(type="Pods", value=4, period_seconds=15),
        ScalingPolicy(type="Percent", value=100, period_seconds=15),
    ),
)
_DOWN_DEFAULT = Rules(
    stabilization_window_s=300,
    select_policy="Max",
    tolerance=DEFAULT_TOLERANCE,
    policies=(ScalingPolicy(type="Percent", value=100, period_seconds=15),),
)


def _fill(rules: ScalingRules | None, default: Rules) -> Rules:
    if rules is None:
        return default
    return Rules(
        stabilization_window_s=(
            default.stabilization_window_s
            if rules.stabilization_window_seconds is None
            else rules.stabilization_window_seconds
        ),
        select_policy=rules.select_policy or default.select_policy,
        tolerance=default.tolerance if rules.tolerance is None else rules.tolerance,
        policies=default.policies if rules.policies is None else rules.policies,
    )


def resolve(behavior: Behavior) -> tuple[Rules, Rules]:
    """(scaleUp, scaleDown) with HPA defaults for every omitted field."""
    return _fill(behavior.scale_up, _UP_DEFAULT), _fill(behavior.scale_down, _DOWN_DEFAULT)


def stabilize(
    recommendation: int,
    current: int,
    history: Iterable[TimedValue],
    up: Rules,
    down: Rules,
    now: float,
) -> int:
    """HPA: scale-up uses the min recommendation within its window, scale-down the max."""
    up_cutoff = now - up.stabilization_window_s
    down_cutoff = now - down.stabilization_window_s
    up_rec = recommendation
    down_rec = recommendation
    for rec in history:  # per target per tick over ~300 entries: no builtin calls
        t = rec.t
        if t > up_cutoff:
            value = int(rec.value)
            if value < up_rec:
                up_rec = value
        if t > down_cutoff:
            value = int(rec.value)
            if value > down_rec:
                down_rec = value
    result = current
    if result < up_rec:
        result = up_rec
    if result > down_rec:
        result = down_rec
    return result


def _changes_in_period(events: Iterable[ScaleEvent], period_s: int, now: float, up: bool) -> int:
    cutoff = now - period_s
    return sum(
        abs(e.change) for e in events if e.t > cutoff and ((e.change > 0) if up else (e.change < 0))
    )


def _period_start(current: int, events: Iterable[ScaleEvent], period_s: int, now: float) -> int:
    """Replicas at the start of the policy period: current - added + removed within it."""
    events = tuple(events)
    added = _changes_in_period(events, period_s, now, up=True)
    removed = _changes_in_period(events, period_s, now, up=False)
    return current - added + removed


def scale_up_limit(current: int, events: tuple[ScaleEvent, ...], rules: Rules, now: float) -> int:
    """Highest replica count the scale-up policies allow now (HPA semantics)."""
    if rules.select_policy == "Disabled" or not rules.policies:
        return current
    pick = min if rules.select_policy == "Min" else max
    result: int | None = None
    for p in rules.policies:
        start = _period_start(current, events, p.period_seconds, now)
        if p.type == "Pods":
            proposed = start + p.value
        else:
            proposed = math.ceil(start * (1 + p.value / 100) - 1e-9)
        result = proposed if result is None else pick(result, proposed)
    assert result is not None
    return result


def scale_down_limit(current: int, events: tuple[ScaleEvent, ...], rules: Rules, now: float) -> int:
    """Lowest replica count the scale-down policies allow now (HPA semantics)."""
    if rules.select_policy == "Disabled" or not rules.policies:
        return current
    # Max selects the policy allowing the biggest change, i.e. the lowest floor.
    pick = max if rules.select_policy == "Min" else min
    result: int | None = None
    for p in rules.policies:
        start = _period_start(current, events, p.period_seconds, now)
        if p.type == "Pods":
            proposed = start - p.value
        else:
            proposed = int(start * (1 - p.value / 100) + 1e-9)
        result = proposed if result is None else pick(result, proposed)
    assert result is not None
    return result


def ready_step_limit(ready: int, rules: Rules) -> int:
    """Highest count the cold-start guard allows: one policy step beyond ready replicas."""
    if rules.select_policy == "Disabled" or not rules.policies:
        return ready
    steps = [
        p.value if p.type == "Pods" else math.ceil(ready * p.value / 100 - 1e-9)
        for p in rules.policies
    ]
    return ready + (min(steps) if rules.select_policy == "Min" else max(steps))


def observe_change(state: DecisionState, current: int, now: float) -> DecisionState:
    """Record the target's replica changes as observed (the real history of changes the
    rate policies count). A change that matches the previous advice keeps the time it was
    decided (as HPA stamps its own rescales); any other change is stamped when first seen.
    """
    last, pending = state.last_replicas, state.pending
    state = replace(state, last_replicas=current, pending=None)
    if last is None or last == current:
        return state
    if pending is not None and last + pending.change == current:
        event = pending
    else:
        event = ScaleEvent(t=now, change=current - last)
    return replace(state, events=(*state.events, event))
