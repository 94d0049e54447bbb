"""Prefill/decode roles (issue 37): one model served disaggregated, two Deployments whose
load is coupled, sized independently within a ratio band.

- Prefill is driven by the prompt-token rate (tokens/s per replica) and, under SLO
  pressure, by waiting requests with TTFT over its SLO.
- Decode is driven by running requests (per replica) and KV-cache usage, and, under SLO
  pressure, by ITL over its SLO.
- Each role decides alone: one role's Pending pods stop that role's growth only, never
  the other role's scale-down (Dynamo's planner stalls both).
- A ratio band (prefill replicas per decode replica) only ever raises the role that
  lags, so neither role is cut below its own need.
- A signal a role needs that is missing holds that role's replicas (missing is never
  zero) and says so.

Pure: no I/O, no clock. `step_role` applies HPA's stabilisation windows and rate limits
to one role's count with that role's own state (the controller keeps one per role).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from autoscaler.domain import DecisionState, ScaleEvent, TimedValue
from autoscaler.errors import ConfigError
from autoscaler.policy.behavior import (
    observe_change,
    ready_step_limit,
    resolve,
    scale_down_limit,
    scale_up_limit,
    stabilize,
)
from autoscaler.policy.schema import Behavior


@dataclass(frozen=True, slots=True)
class RoleSignals:
    """Summed or worst-pod signals of each role's pods (None: not read)."""

    prompt_tokens_per_s: float | None  # prefill pods' prompt-token rate
    waiting: float | None  # prefill pods' waiting requests
    ttft_p90_s: float | None
    running: float | None  # decode pods' running requests
    kv_usage: float | None  # decode pods' mean KV-cache usage, 0..1
    itl_p90_s: float | None


@dataclass(frozen=True, slots=True)
class RoleTargets:
    prompt_tokens_per_s_per_prefill: float
    running_per_decode: float
    kv_usage_target: float = 0.8
    ttft_slo_s: float | None = None
    itl_slo_s: float | None = None
    min_prefill: int = 1
    max_prefill: int | None = None
    min_decode: int = 1
    max_decode: int | None = None
    ratio_band: tuple[float, float] | None = None  # prefill per decode replica: lo, hi

    def __post_init__(self) -> None:
        problems: list[str] = []
        for name in ("prompt_tokens_per_s_per_prefill", "running_per_decode"):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                problems.append(f"roles.{name}: value {v} must be > 0")
        if not 0 < self.kv_usage_target <= 1:
            problems.append(
                f"roles.kv_usage_target: value {self.kv_usage_target} must be in (0, 1]"
            )
        for name in ("min_prefill", "min_decode"):
            if getattr(self, name) < 0:
                problems.append(f"roles.{name}: value {getattr(self, name)} must be >= 0")
        for role in ("prefill", "decode"):
            hi, lo = getattr(self, f"max_{role}"), getattr(self, f"min_{role}")
            if hi is not None and hi < lo:
                problems.append(f"roles.max_{role}: value {hi} must be >= min_{role} ({lo})")
        if self.ratio_band is not None:
            lo_r, hi_r = self.ratio_band
            if not (0 < lo_r <= hi_r and math.isfinite(hi_r)):
                problems.append(
                    f"roles.ratio_band: value {self.ratio_band} must be (lo, hi) with 0 < lo <= hi"
                )
        if problems:
            raise ConfigError("invalid roles", problems)


@dataclass(frozen=True, slots=True)
class RoleState:
    replicas: int
    pending: int = 0


@dataclass(frozen=True, slots=True)
class RolesDecision:
    prefill: int
    decode: int
    notes: tuple[str, ...]  # why a role held, could not grow, or was raised by the band


def _need(load: float, per_replica: float) -> int:
    return math.ceil(load / per_replica - 1e-9) if load > 0 else 0


def _bounded(n: int, lo: int, hi: int | None) -> int:
    return max(lo, n if hi is None else min(n, hi))


def size_roles(
    signals: RoleSignals, targets: RoleTargets, prefill: RoleState, decode: RoleState
) -> RolesDecision:
    """Replicas per role (see module doc)."""
    notes: list[str] = []
    # prefill
    if signals.prompt_tokens_per_s is None:
        p = prefill.replicas
        notes.append("prefill: prompt-token rate missing, holding")
    else:
        p = _need(signals.prompt_tokens_per_s, targets.prompt_tokens_per_s_per_prefill)
        if (
            targets.ttft_slo_s is not None
            and signals.ttft_p90_s is not None
            and signals.ttft_p90_s > targets.ttft_slo_s
            and (signals.waiting or 0) > 0
        ):
            p = max(p, prefill.replicas + 1)
            notes.append("prefill: TTFT over its SLO with requests waiting")
    # decode
    if signals.running is None and signals.kv_usage is None:
        d = decode.replicas
        notes.append("decode: running and KV usage missing, holding")
    else:
        d = 0
        if signals.running is not None:
            d = _need(signals.running, targets.running_per_decode)
        if signals.kv_usage is not None:
            d = max(d, _need(decode.replicas * signals.kv_usage, targets.kv_usage_target))
        if (
            targets.itl_slo_s is not None
            and signals.itl_p90_s is not None
            and signals.itl_p90_s > targets.itl_slo_s
        ):
            d = max(d, decode.replicas + 1)
            notes.append("decode: ITL over its SLO")
    p = _bounded(p, targets.min_prefill, targets.max_prefill)
    d = _bounded(d, targets.min_decode, targets.max_decode)
    # the band raises the lagging role only
    if targets.ratio_band is not None:
        lo_r, hi_r = targets.ratio_band
        if p < lo_r * d:
            raised = _bounded(math.ceil(lo_r * d - 1e-9), targets.min_prefill, targets.max_prefill)
            if raised > p:
                notes.append(f"prefill: raised to {raised} by the ratio band")
                p = raised
        elif p > hi_r * d:
            raised = _bounded(math.ceil(p / hi_r - 1e-9), targets.min_decode, targets.max_decode)
            if raised > d:
                notes.append(f"decode: raised to {raised} by the ratio band")
                d = raised
    # Pending pods stop their own role's growth only
    if prefill.pending and p > prefill.replicas:
        notes.append(f"prefill: {prefill.pending} pod(s) Pending, not growing")
        p = prefill.replicas
    if decode.pending and d > decode.replicas:
        notes.append(f"decode: {decode.pending} pod(s) Pending, not growing")
        d = decode.replicas
    return RolesDecision(prefill=p, decode=d, notes=tuple(notes))


# ------------------------------------------------------------ per-role HPA behaviour


@dataclass(frozen=True, slots=True)
class RoleStep:
    """One role's count after its own stabilisation windows and rate limits."""

    desired: int
    state: DecisionState
    limits: tuple[str, ...]  # stabilized | rate-limited | waiting-for-ready


def step_role(
    behavior: Behavior,
    sized: int,
    current: int,
    ready: int,
    state: DecisionState,
    now: float,
    *,
    floor: int = 1,
    cold_start_guard: bool = True,
) -> RoleStep:
    """HPA's behaviour for one role: ``sized`` (`size_roles`' count for it) stabilised
    over the role's own recommendations (scale-up: the min in its window, scale-down: the
    max), then its own rate policies over its own observed changes, then (with
    ``cold_start_guard``) at most one policy step beyond its ready replicas. Never below
    ``floor`` on the way down, never beyond ``sized`` or below ``current`` when growing
    (Pending pods, which `size_roles` already held, stay held). Pure: ``now`` passed in."""
    up, down = resolve(behavior)
    state = observe_change(state, current, now)
    keep_recs = max(up.stabilization_window_s, down.stabilization_window_s)
    keep_events = max(up.longest_period_s, down.longest_period_s)
    history = tuple(r for r in state.recommendations if r.t > now - keep_recs)
    state = replace(
        state,
        recommendations=(*history, TimedValue(now, float(sized))),
        events=tuple(e for e in state.events if e.t > now - keep_events),
    )
    limits: list[str] = []
    stabilized = stabilize(sized, current, history, up, down, now)
    if stabilized != sized:
        limits.append("stabilized")
    desired = stabilized
    if stabilized > current:
        allowed = max(scale_up_limit(current, state.events, up, now), current)
        if cold_start_guard:
            guard = max(ready_step_limit(ready, up), current)
            if guard < min(allowed, stabilized):
                limits.append("waiting-for-ready")
            allowed = min(allowed, guard)
        if stabilized > allowed:
            if "waiting-for-ready" not in limits:
                limits.append("rate-limited")
            desired = allowed
    elif stabilized < current:
        allowed = max(min(scale_down_limit(current, state.events, down, now), current), floor)
        if stabilized < allowed:
            limits.append("rate-limited")
            desired = allowed
    if desired != current:
        state = replace(state, pending=ScaleEvent(t=now, change=desired - current))
    return RoleStep(desired=desired, state=state, limits=tuple(limits))
