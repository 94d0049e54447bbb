"""The decision core: ``decide(policy, observation, state, now) -> (decision, state)``.

Pure: no I/O, no clock, no asyncio. Semantics, in order of application:

1. Per metric (HPA external metrics): ``AverageValue`` asks ``ceil(total / target)``,
   ``Value`` asks ``ceil(ready * value / target)``; within the tolerance band the metric
   asks for the current count. A forecast at ``now + horizon`` is evaluated the same way
   and the larger of now and forecast wins. Several metrics: the largest wins.
2. Missing data is never zero. All metrics missing: hold (or KEDA ``fallback`` once the
   consecutive failed reads exceed ``failureThreshold``; an active fallback also activates
   a target at zero). Some missing, or pods unread: the rest may scale up, never down.
3. KEDA activation: a metric above ``activationTarget`` (strictly) makes the target active;
   from zero/idle an active target goes to ``max(minReplicaCount, 1)``; an inactive one
   goes to ``idleReplicaCount`` (or 0 when ``minReplicaCount`` is 0) only strictly after
   ``cooldownPeriod`` since it was last active.
4. Knative KPA panic (optional): demand averaged over the panic window asking for
   ``threshold`` x ready replicas skips the scale-up stabilisation window and forbids
   scale-down until the stable window passes without panic.
5. HPA ``behavior``: stabilisation windows, then rate policies over the observed history
   of replica changes, then min/max; with the cold-start guard (ours, on by default), at
   most one scale-up policy step beyond the READY replicas while pods are starting.
6. Capacity: never more than the GPU resource can place; reported as capacity-limited.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from sys import intern

from autoscaler.domain import (
    Decision,
    DecisionState,
    MetricRecommendation,
    Observation,
    Reason,
    ScaleEvent,
    TimedValue,
)
from autoscaler.policy.behavior import (
    Rules,
    observe_change,
    ready_step_limit,
    resolve,
    scale_down_limit,
    scale_up_limit,
    stabilize,
)
from autoscaler.policy.schema import TARGET_MIN, VALUE_MAX, MetricSpec, Policy

_EPS = 1e-6  # replicas: absorbs float noise such as 0.7 * 3 / 0.7


_ASK_MAX = 1_000_000_000  # replicas: any larger (or infinite) demand asks for this


def _ceil(x: float) -> int:
    """Replicas for a demand; never raises: an infinite or NaN demand (overflowed
    arithmetic) asks for `_ASK_MAX`, which max/capacity limits then cap."""
    if not x < _ASK_MAX:  # also NaN
        return _ASK_MAX
    return max(0, math.ceil(max(x, 0.0) - _EPS))


@dataclass(frozen=True, slots=True)
class _Ask:
    replicas: int
    demand: float  # unrounded replica demand (for panic averaging)
    tolerated: bool = False  # the tolerance band kept the current count


def _within_tolerance(ratio: float, up: Rules, down: Rules) -> bool:
    """HPA's tolerance band around a usage ratio of 1 (per direction, as HPA 1.33)."""
    tolerance = up.tolerance if ratio > 1 else down.tolerance
    return abs(1.0 - ratio) <= tolerance + _EPS


def _ask(spec: MetricSpec, value: float, obs: Observation, up: Rules, down: Rules) -> _Ask:
    """Replicas one metric value asks for, with HPA's tolerance band."""
    current = obs.current_replicas
    if spec.type == "AverageValue":
        demand = value / spec.target
        ratio = value / (spec.target * current) if current > 0 else math.inf
    else:
        ready = obs.ready_replicas if obs.ready_replicas > 0 else current
        ratio = value / spec.target
        demand = ratio * ready if current > 0 else ratio
    demand = min(max(demand, 0.0), float(_ASK_MAX))  # finite whatever the value (JSON numbers)
    if current > 0 and _within_tolerance(ratio, up, down):
        return _Ask(current, demand, tolerated=_ceil(demand) != current)
    return _Ask(_ceil(demand), demand)


def _fallback_ask(replicas: int, current: int, up: Rules, down: Rules) -> int:
    """What KEDA's fallback asks of the HPA: KEDA feeds ``target * fallback.replicas`` as an
    ``AverageValue`` metric, so the HPA's tolerance band applies to it like any metric."""
    if current > 0 and _within_tolerance(replicas / current, up, down):
        return current
    return replicas


def initial_state(current_replicas: int, now: float) -> DecisionState:
    """The state of a target on its first reconcile (new, after a restart or a leader change).

    HPA ``recordInitialRecommendation`` (kubernetes#68826): the current count is recorded as
    a recommendation, so nothing scales down inside the first scale-down stabilisation window
    (nor up inside a scale-up window) just because the history of recommendations is empty.
    """
    return DecisionState(
        recommendations=(TimedValue(now, float(current_replicas)),),
        last_replicas=current_replicas,
        last_active_t=now,
    )


def _prediction_on(policy: Policy, obs: Observation) -> bool:
    return obs.forecast is not None and policy.prediction is not None and policy.prediction.enabled


def _learned_spec(policy: Policy, obs: Observation) -> MetricSpec | None:
    """The opt-in learned-capacity metric, when the planner has learned its capacity
    and this tick has a reading of its signal (otherwise there is no such metric)."""
    if not _prediction_on(policy, obs):
        return None
    assert policy.prediction is not None and obs.forecast is not None
    name = policy.prediction.learned_capacity_signal
    value = obs.signals.get(name) if name is not None else None
    if name is None or value is None or math.isnan(value):
        return None
    cap = obs.forecast.capacity_per_replica.get(name)
    if cap is None or not cap > 0 or not math.isfinite(cap):
        return None
    target = cap * policy.prediction.learned_capacity_headroom
    if not TARGET_MIN <= target <= VALUE_MAX:  # outside what a policy may say: not learned
        return None
    return MetricSpec(signal=name, type="AverageValue", target=target)


def _with_regime(policy: Policy, obs: Observation, up: Rules, down: Rules) -> tuple[Rules, Rules]:
    """The scale-down window the learned regime asks for (`forecast.regime`), when
    prediction is on: a steady load holds longer (the count a fixed fleet would keep);
    the opt-in ``regime.release_window_s`` (bursts that outlast the cold start) shortens
    it. Without either the policy's own window stands."""
    if not _prediction_on(policy, obs):
        return up, down
    assert obs.forecast is not None
    regime = obs.forecast.regime
    hold = regime.get("regime.scale_down_window_s")
    if hold is not None and hold > down.stabilization_window_s:
        return up, replace(down, stabilization_window_s=int(hold))
    release = regime.get("regime.release_window_s")
    if release is not None and 0 < release < down.stabilization_window_s:
        return up, replace(down, stabilization_window_s=math.ceil(release))
    return up, down


def _regime_fleet(policy: Policy, obs: Observation) -> int | None:
    """The learned fleet (`forecast.regime`, prediction on): while the level is flat and
    its bursts are shorter than the cold start, the count a right-sized fixed fleet would
    hold, within the policy's replica bounds; None outside that regime."""
    if not _prediction_on(policy, obs):
        return None
    assert obs.forecast is not None
    fleet = obs.forecast.regime.get("regime.fleet_replicas")
    if fleet is None or not math.isfinite(fleet) or fleet < 1:
        return None
    return max(min(int(fleet), policy.max_replica_count), policy.min_replica_count)


def _recommend(
    policy: Policy, obs: Observation, up: Rules, down: Rules
) -> tuple[list[MetricRecommendation], float, bool]:
    """Per-metric recommendations, the largest unrounded demand now, and whether the
    tolerance band held any metric at the current count. The learned-capacity metric
    joins only when both its capacity and its reading exist: it may add replicas, and
    its absence is never a missing metric (the configured metrics keep that role)."""
    forecast = obs.forecast.signals if _prediction_on(policy, obs) and obs.forecast else None
    out: list[MetricRecommendation] = []
    demand_now = 0.0
    tolerated = False
    learned = _learned_spec(policy, obs)
    specs = [(spec, False) for spec in policy.metrics]
    if learned is not None:
        specs.append((learned, True))
    for spec, is_learned in specs:
        value = obs.signals.get(spec.signal)
        if value is None or math.isnan(value):
            out.append(MetricRecommendation(spec.signal, spec.type, spec.target, None, None))
            continue
        now_ask = _ask(spec, value, obs, up, down)
        demand_now = max(demand_now, now_ask.demand)
        tolerated = tolerated or now_ask.tolerated
        f_value = forecast.get(spec.signal) if forecast is not None else None
        f_replicas: int | None = None
        if f_value is not None and not math.isnan(f_value):
            f_replicas = _ask(spec, f_value, obs, up, down).replicas
        else:
            f_value = None
        active = value > spec.activation_target or (
            f_value is not None and f_value > spec.activation_target
        )
        out.append(
            MetricRecommendation(
                signal=spec.signal,
                metric_type=spec.type,
                target=spec.target,
                value=value,
                replicas=now_ask.replicas,
                forecast_value=f_value,
                forecast_replicas=f_replicas,
                active=active,
                learned=is_learned,
            )
        )
    return out, demand_now, tolerated


def _combined(rec: MetricRecommendation) -> int:
    assert rec.replicas is not None
    return max(rec.replicas, rec.forecast_replicas or 0)


def _describe_driver(recs: Sequence[MetricRecommendation]) -> str:
    valid = [r for r in recs if r.replicas is not None]
    if not valid:
        return "no metric could be read"
    top = max(valid, key=_combined)
    unit = "per replica" if top.metric_type == "AverageValue" else "mean per replica"
    text = f"{top.signal}={top.value:.4g} (target {top.target:g} {unit}) asks for {top.replicas}"
    if top.forecast_replicas is not None and top.forecast_replicas > (top.replicas or 0):
        text += f", forecast {top.forecast_value:.4g} asks for {top.forecast_replicas}"
    return text


def _prune(
    state: DecisionState, policy: Policy, up: Rules, down: Rules, now: float
) -> DecisionState:
    keep_recs = max(up.stabilization_window_s, down.stabilization_window_s)
    keep_events = max(up.longest_period_s, down.longest_period_s)
    keep_demand = policy.panic.window_seconds if policy.panic else 0.0
    return replace(
        state,
        recommendations=tuple(r for r in state.recommendations if r.t > now - keep_recs),
        events=tuple(e for e in state.events if e.t > now - keep_events),
        demand=tuple(d for d in state.demand if d.t > now - keep_demand),
    )


def _with_recommendation(
    history: tuple[TimedValue, ...], now: float, value: float
) -> tuple[TimedValue, ...]:
    """``history`` plus the recommendation ``value`` made at ``now``, a run of equal
    values kept as its newest entry only.

    Exact for HPA stabilisation: a window's min/max is taken over the entries younger
    than its cutoff, and whenever an older entry of a run is inside a window so is the
    run's newest (same value, later time). A steady target keeps one entry instead of
    one per tick of its longest window (450 at 1 s with the recommended profile: ~45 KB
    per target and a 450-entry copy, prune and scan every tick, issue 16).
    """
    if history and history[-1].value == value:
        return (*history[:-1], TimedValue(now, value))
    return (*history, TimedValue(now, value))


def _hold(
    obs: Observation,
    state: DecisionState,
    active: bool,
    recs: Sequence[MetricRecommendation],
    reason: Reason,
    message: str,
    numbers: dict[str, float],
) -> tuple[Decision, DecisionState]:
    decision = Decision(
        t=obs.t,
        current_replicas=obs.current_replicas,
        desired_replicas=obs.current_replicas,
        reason=reason,
        message=message,
        active=active,
        metrics=tuple(recs),
        numbers=numbers,
    )
    return decision, state


def _panic(
    policy: Policy,
    obs: Observation,
    state: DecisionState,
    now: float,
    demand_now: float,
    numbers: dict[str, float],
) -> tuple[DecisionState, bool, int]:
    """Knative KPA panic: (new state, in panic, replicas to hold at least)."""
    if policy.panic is None:
        return state, False, 0
    state = replace(state, demand=(*state.demand, TimedValue(now, demand_now)))
    window = [d.value for d in state.demand]
    panic_avg = sum(window) / len(window)
    panic_desired = _ceil(panic_avg)
    numbers["panic_demand_replicas"] = panic_avg
    if panic_desired / max(obs.ready_replicas, 1) >= policy.panic.threshold:
        state = replace(state, panic_until_t=now + policy.panic.stable_window_seconds)
    if state.panic_until_t is not None and now < state.panic_until_t:
        floor = max(state.panic_max_replicas, panic_desired, obs.current_replicas)
        return replace(state, panic_max_replicas=floor), True, floor
    return replace(state, panic_until_t=None, panic_max_replicas=0), False, 0


def _rate_limited(
    policy: Policy,
    cur: int,
    ready: int,
    desired: int,
    hpa_min: int,
    state: DecisionState,
    up: Rules,
    down: Rules,
    now: float,
    numbers: dict[str, float],
    limits: list[Reason],
) -> int:
    """HPA ``convertDesiredReplicasWithBehaviorRate``: rate policies, then min/max; plus
    the cold-start guard (at most one policy step beyond the ready replicas)."""
    if desired > cur:
        up_limit = max(scale_up_limit(cur, state.events, up, now), cur)
        numbers["scale_up_limit"] = float(up_limit)
        guard = up_limit
        if policy.cold_start_guard.enabled:
            guard = max(ready_step_limit(ready, up), cur)
            numbers["ready_step_limit"] = float(guard)
        allowed = min(policy.max_replica_count, up_limit, guard)
        if desired > allowed:
            if allowed == policy.max_replica_count:
                limits.append(Reason.MAX_REPLICAS)
            elif allowed == guard and guard < up_limit:
                limits.append(Reason.WAITING_FOR_READY)
            else:
                limits.append(Reason.RATE_LIMITED)
            return allowed
    elif desired < cur:
        down_limit = min(scale_down_limit(cur, state.events, down, now), cur)
        numbers["scale_down_limit"] = float(down_limit)
        allowed = max(hpa_min, down_limit)
        if desired < allowed:
            limits.append(Reason.RATE_LIMITED if down_limit > hpa_min else Reason.MIN_REPLICAS)
            return allowed
    return desired


def _held_ask(policy: Policy, held: int) -> int:
    """Replicas the held queue asks for: ``ceil(held / target)`` with the per-replica
    target of the policy's ``waiting`` metric (the held requests are waiting ones);
    1 without such a metric."""
    for spec in policy.metrics:
        if spec.signal == "waiting":
            return max(1, _ceil(held / spec.target))
    return 1


def _zero_blocked(obs: Observation) -> str | None:
    """Why a target may not go to zero now, or None: a replica still starting, a
    request held at an activator, a response still in flight (streaming)."""
    if obs.held > 0:
        return f"{obs.held} requests held at the activators"
    if obs.in_flight > 0:
        return f"{obs.in_flight} responses still in flight through the activators"
    if obs.ready_replicas < obs.current_replicas or obs.pending_replicas > 0:
        return "a replica is still starting"
    return None


def _keda_scale_executor(
    policy: Policy,
    obs: Observation,
    active: bool,
    data_complete: bool,
    state: DecisionState,
    now: float,
    up: Rules,
    numbers: dict[str, float],
    limits: list[Reason],
) -> tuple[int, Reason | None, bool] | None:
    """KEDA's own scaling around the HPA: activation from zero/idle and going idle after
    ``cooldownPeriod`` (never on missing data). Returns (desired, reason, cooling down);
    a ``None`` reason means the HPA part decides; ``None`` means KEDA idling is off.

    Scale to zero (``scaleToZero``, or ``minReplicaCount``/``idleReplicaCount`` 0): the
    idle period is ``scaleToZero.idlePeriodSeconds`` (unset: ``cooldownPeriod``); going
    to zero waits while `_zero_blocked`; activation with requests held at the activators
    is sized for the held queue (`_held_ask`), within ``maxReplicaCount`` and the
    cold-start guard's one step beyond the ready replicas."""
    stz = policy.scale_to_zero.enabled
    idle_allowed = stz or policy.min_replica_count == 0 or policy.idle_replica_count is not None
    if not idle_allowed:
        return None
    idle_target = 0 if stz or policy.idle_replica_count is None else policy.idle_replica_count
    idle_period = policy.zero_idle_period_s if idle_target == 0 else policy.cooldown_period
    cur = obs.current_replicas
    cooling = False
    if not active and data_complete:
        assert state.last_active_t is not None
        if cur <= idle_target:
            return cur, Reason.IDLE, False
        # KEDA scaleToZero: lastActiveTime + cooldownPeriod strictly before now.
        if now - state.last_active_t > idle_period:
            blocked = _zero_blocked(obs) if idle_target == 0 else None
            if blocked is None:
                return idle_target, Reason.IDLE, False
            numbers["zero_blocked"] = 1.0
        cooling = True
    if cur <= idle_target:
        if active:
            base = max(policy.min_replica_count, 1)
            if obs.held > 0:
                held_ask = _held_ask(policy, obs.held)
                numbers["held_ask_replicas"] = float(held_ask)
                if held_ask > base and policy.cold_start_guard.enabled:
                    guard = max(ready_step_limit(obs.ready_replicas, up), base)
                    if held_ask > guard:
                        limits.append(Reason.WAITING_FOR_READY)
                        held_ask = guard
                base = max(base, held_ask)
            return min(base, policy.max_replica_count), Reason.ACTIVATE, False
        return cur, Reason.IDLE, cooling
    return cur, None, cooling


def decide(
    policy: Policy, obs: Observation, state: DecisionState, now: float
) -> tuple[Decision, DecisionState]:
    """One reconcile of one target. See the module docstring for the rules."""
    up, down = _with_regime(policy, obs, *resolve(policy.behavior))
    cur = obs.current_replicas
    state = observe_change(state, cur, now)
    state = _prune(state, policy, up, down, now)
    numbers: dict[str, float] = {}
    if state.last_active_t is None:
        # Cooldown counts from when we first saw the target, never from "long ago".
        state = replace(state, last_active_t=now)

    recs, demand_now, tolerated = _recommend(policy, obs, up, down)
    numbers["tolerated"] = float(tolerated)
    missing = [r.signal for r in recs if r.missing]
    failures = state.consecutive_failures + 1 if missing else 0
    state = replace(state, consecutive_failures=failures)
    numbers["consecutive_failures"] = float(failures)
    if _prediction_on(policy, obs):
        assert obs.forecast is not None
        numbers["forecast_horizon_s"] = obs.forecast.horizon_s
        for name, value in obs.forecast.signals.items():
            numbers[intern(f"forecast.{name}")] = value
        for name, value in obs.forecast.capacity_per_replica.items():
            numbers[intern(f"capacity.{name}.per_replica")] = value
        numbers.update(obs.forecast.regime)
    # A request held at, or streaming through, an activator is activity whatever the
    # metrics say (a policy without a ``waiting`` metric still wakes up for it).
    active = any(r.active for r in recs) or obs.held > 0 or obs.in_flight > 0
    if obs.held or obs.in_flight:
        numbers["held"] = float(obs.held)
        numbers["in_flight"] = float(obs.in_flight)
    if active:
        state = replace(state, last_active_t=now)
    # KEDA pkg/fallback: NumberOfFailures strictly greater than failureThreshold.
    fallback_on = policy.fallback is not None and failures > policy.fallback.failure_threshold

    limits: list[Reason] = []
    valid = [_combined(r) for r in recs if not r.missing]
    # At zero with requests held, the held count is a reading: activate, do not hold.
    held_at_zero = obs.held > 0 and cur == 0
    if not valid and not fallback_on and not held_at_zero:
        return _hold(
            obs,
            state,
            active,
            recs,
            Reason.HOLD_MISSING_DATA,
            f"holding {cur} replicas: no fresh data for {', '.join(missing)} "
            f"({failures} consecutive failed reads); missing data is never read as zero",
            numbers,
        )
    raw = max(valid, default=0)
    reason_hint: Reason | None = None
    if fallback_on and missing:
        assert policy.fallback is not None
        fallback_ask = _fallback_ask(policy.fallback.replicas, cur, up, down)
        if fallback_ask >= raw:  # HPA: the largest metric wins, the fallback is one metric
            raw = fallback_ask
            reason_hint = Reason.FALLBACK
    elif (missing or not obs.complete) and raw < cur:
        raw = cur
        limits.append(Reason.HOLD_PARTIAL_DATA)
    numbers["raw_recommendation"] = float(raw)
    numbers["demand_replicas"] = demand_now
    ctx = _Ctx(policy, obs, now, recs, numbers, active, raw)

    hpa_min = max(policy.min_replica_count, 1)
    # KEDA isActiveOrFallback: an active fallback activates a target at zero/idle (0 -> 1,
    # then the HPA part takes it to fallback.replicas).
    fallback_active = fallback_on and policy.fallback is not None and policy.fallback.replicas > 0
    keda = _keda_scale_executor(
        policy,
        obs,
        active or fallback_active,
        not missing and obs.complete,
        state,
        now,
        up,
        numbers,
        limits,
    )
    if keda is not None:
        desired, reason, cooling = keda
        if cooling:
            limits.append(Reason.COOLDOWN)
        if reason is not None:
            assert state.last_active_t is not None
            numbers["inactive_for_s"] = now - state.last_active_t
            if desired == cur:
                kept = limits
            elif reason == Reason.ACTIVATE:  # the held-queue size met the cold-start guard
                kept = [r for r in limits if r == Reason.WAITING_FOR_READY]
            else:
                kept = []
            return _final(ctx, state, desired, reason, kept)

    # HPA: out-of-range current counts snap to the bounds first.
    if cur > policy.max_replica_count:
        return _final(ctx, state, policy.max_replica_count, Reason.MAX_REPLICAS, limits)
    if cur < hpa_min:
        return _final(ctx, state, hpa_min, Reason.MIN_REPLICAS, limits)

    state, in_panic, panic_floor = _panic(policy, obs, state, now, demand_now, numbers)
    history = state.recommendations
    state = replace(state, recommendations=_with_recommendation(history, now, float(raw)))
    if in_panic:
        stabilized = max(raw, panic_floor)
    else:
        stabilized = stabilize(raw, cur, history, up, down, now)
    if stabilized != raw:
        limits.append(Reason.STABILIZED)
    fleet = None if in_panic else _regime_fleet(policy, obs)
    if fleet is not None:
        # the fleet regime: at least the learned fleet, and no replicas bought for a burst
        # (shorter than the cold start, it is over before they are Ready)
        held = min(max(stabilized, fleet), max(cur, fleet))
        if held != stabilized:
            limits.append(Reason.STABILIZED)
            stabilized = held
    numbers["stabilized_recommendation"] = float(stabilized)

    desired = _rate_limited(
        policy, cur, obs.ready_replicas, stabilized, hpa_min, state, up, down, now, numbers, limits
    )
    reason = reason_hint or (Reason.PANIC if in_panic and desired > cur else None)
    return _final(ctx, state, desired, reason, limits)


@dataclass(slots=True)
class _Ctx:
    """What one `decide` call computed before choosing the final count."""

    policy: Policy
    obs: Observation
    now: float
    recs: list[MetricRecommendation]
    numbers: dict[str, float]
    active: bool
    raw: int


def _final(
    ctx: _Ctx,
    state: DecisionState,
    desired: int,
    reason: Reason | None,
    limits: list[Reason],
) -> tuple[Decision, DecisionState]:
    """Apply the capacity cap, choose the reason and write the sentence."""
    obs, policy, recs, numbers, raw, now = (
        ctx.obs,
        ctx.policy,
        ctx.recs,
        ctx.numbers,
        ctx.raw,
        ctx.now,
    )
    active = ctx.active
    cur = obs.current_replicas
    if obs.capacity_max_replicas is not None and policy.capacity.enforce:
        cap = max(obs.capacity_max_replicas + policy.capacity.provisionable_replicas, cur)
        numbers["capacity_max_replicas"] = float(cap)
        if desired > cap:
            desired = cap
            limits.append(Reason.CAPACITY_LIMITED)
            reason = Reason.CAPACITY_LIMITED
    if reason is None:
        forecast_drove = any(
            r.forecast_replicas is not None
            and r.replicas is not None
            and r.forecast_replicas > r.replicas
            and r.forecast_replicas >= desired
            for r in recs
        )
        if desired > cur:
            reason = Reason.FORECAST if forecast_drove else Reason.SCALE_UP
        elif desired < cur:
            reason = Reason.SCALE_DOWN
        elif limits:
            reason = limits[-1]
        elif raw == cur and numbers.get("tolerated"):
            reason = Reason.WITHIN_TOLERANCE
        else:
            reason = Reason.STEADY
    verb = "scale up" if desired > cur else "scale down" if desired < cur else "hold"
    parts = [f"{verb} {cur} -> {desired}" if desired != cur else f"hold at {cur}"]
    parts.append(_describe_driver(recs))
    extra = {
        Reason.FALLBACK: "fallback replicas after repeated failed reads",
        Reason.ACTIVATE: (
            f"scaled from zero for {obs.held} held requests"
            if obs.held > 0 and cur == 0
            else "activation threshold crossed"
        ),
        Reason.IDLE: "inactive past cooldownPeriod",
        Reason.PANIC: f"panic mode (holding at least {state.panic_max_replicas})",
    }.get(reason)
    if extra:
        parts.append(extra)
    if limits:
        parts.append("limited by " + ", ".join(str(x) for x in dict.fromkeys(limits)))
    if desired != cur:
        state = replace(state, pending=ScaleEvent(t=now, change=desired - cur))
    decision = Decision(
        t=obs.t,
        current_replicas=cur,
        desired_replicas=desired,
        reason=reason,
        message="; ".join(parts),
        active=active,
        metrics=tuple(recs),
        numbers=numbers,
        limits=tuple(dict.fromkeys(limits)),
        panic=reason == Reason.PANIC
        or (state.panic_until_t is not None and now < state.panic_until_t),
    )
    return decision, state
