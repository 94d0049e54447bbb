"""A target whose variants carry roles (prefill, decode) in the loop: each role's pods,
its signals, its count and state, and the per-role split over its own variants. The pure
sizing is `policy.roles.size_roles` and `step_role`; the split `policy.variants`; the
reads and writes are the loop's (`ControlLoop._reconcile_roles`).

docs/policy.md "Prefill/decode roles".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.variants import policy_variants, status_row, variant_states
from autoscaler.domain import TargetRef
from autoscaler.policy.roles import RoleSignals, RoleState, RoleTargets
from autoscaler.policy.variants import VariantPlan, plan_replicas
from autoscaler.target import ROLES, Role, TargetSpec
from autoscaler.target_status import VariantStatus

# The signals each role is sized from, as the pod scrape names them. Latencies: the p95
# the scrape computes (TTFT, ITL), compared with ttftSloSeconds / itlSloSeconds.
PREFILL_SIGNALS = ("prompt_tokens_per_s", "waiting", "ttft_p95_s")
DECODE_SIGNALS = ("running", "kv_cache_usage", "itl_p95_s")


def has_roles(spec: TargetSpec) -> bool:
    return spec.roles is not None and any(v.role is not None for v in spec.variants)


def role_ref(spec: TargetSpec, role: Role) -> TargetRef:
    """A key of its own for the role's pods in the signal source (its scrape histories):
    ``<name>//<role>`` (no variant is named with a ``/``: `variant_target`'s refs differ)."""
    return TargetRef(spec.ref.namespace, f"{spec.ref.name}//{role}")


def split_role_ref(ref: TargetRef) -> tuple[TargetRef, Role | None]:
    """The target and role of a `role_ref` (a plain ref: itself, no role)."""
    name, sep, suffix = ref.name.partition("//")
    role = next((r for r in ROLES if r == suffix), None) if sep else None
    return (ref, None) if role is None else (TargetRef(ref.namespace, name), role)


def role_spec(spec: TargetSpec, role: Role) -> TargetSpec:
    return replace(spec, ref=role_ref(spec, role))


@dataclass(frozen=True, slots=True)
class RoleObserved:
    """One role as observed: its replicas that can run (without unschedulable pods, as
    the model's view counts them), ready ones, unschedulable ones, and a view of its pods
    for the signal source."""

    role: Role
    replicas: int
    ready: int
    unschedulable: int
    view: TargetView


def observe_role(spec: TargetSpec, view: TargetView, role: Role) -> RoleObserved:
    names = {v.name for v in spec.variants if v.role == role}
    parts = [vv for vv in view.variants if vv.name in names]
    stuck = sum(min(vv.unschedulable_replicas, vv.spec_replicas) for vv in parts)
    replicas = sum(vv.spec_replicas for vv in parts) - stuck
    ready = sum(vv.ready_replicas for vv in parts)
    pending = max(0, sum(vv.pending_replicas for vv in parts) - stuck)
    return RoleObserved(
        role=role,
        replicas=replicas,
        ready=ready,
        unschedulable=stuck,
        view=TargetView(
            spec_replicas=replicas,
            ready_replicas=ready,
            pending_replicas=pending,
            pods=tuple(p for vv in parts for p in vv.pods),
            unschedulable_replicas=stuck,
        ),
    )


def role_signals(readings: Mapping[Role, SignalReading]) -> RoleSignals:
    """Prefill pods: prompt-token rate, waiting, TTFT; decode pods: running, mean KV
    usage, ITL. A signal not read stays None (the role holds; never zero)."""
    pre, dec = readings["prefill"].signals, readings["decode"].signals
    return RoleSignals(
        prompt_tokens_per_s=pre.get("prompt_tokens_per_s"),
        waiting=pre.get("waiting"),
        ttft_p90_s=pre.get("ttft_p95_s"),
        running=dec.get("running"),
        kv_usage=dec.get("kv_cache_usage"),
        itl_p90_s=dec.get("itl_p95_s"),
    )


def merged_signals(readings: Mapping[Role, SignalReading]) -> dict[str, float]:
    """The signals the model's observation records: each from the role it sizes."""
    out: dict[str, float] = {}
    by_role: tuple[tuple[Role, tuple[str, ...]], ...] = (
        ("prefill", PREFILL_SIGNALS),
        ("decode", DECODE_SIGNALS),
    )
    for role, names in by_role:
        got = readings[role].signals
        out.update({n: got[n] for n in names if n in got})
    return out


def role_targets(spec: TargetSpec) -> RoleTargets:
    """The spec's ``roles`` block; each role at least max(1, its variants' minReplicas)
    and at most its variants' maxReplicas (when all set) and maxReplicaCount."""
    assert spec.roles is not None
    bounds: dict[str, tuple[int, int]] = {}
    for role in ROLES:
        vs = [v for v in spec.variants if v.role == role]
        low = max(1, sum(v.min_replicas for v in vs))
        high = spec.policy.max_replica_count
        if all(v.max_replicas is not None for v in vs):
            high = min(high, sum(v.max_replicas or 0 for v in vs))
        bounds[role] = (min(low, high), high)
    r = spec.roles
    return RoleTargets(
        prompt_tokens_per_s_per_prefill=r.prompt_tokens_per_s_per_prefill,
        running_per_decode=r.running_per_decode,
        kv_usage_target=r.kv_usage_target,
        ttft_slo_s=r.ttft_slo_s,
        itl_slo_s=r.itl_slo_s,
        min_prefill=bounds["prefill"][0],
        max_prefill=bounds["prefill"][1],
        min_decode=bounds["decode"][0],
        max_decode=bounds["decode"][1],
        ratio_band=r.ratio_band,
    )


def role_state(observed: RoleObserved) -> RoleState:
    return RoleState(replicas=observed.replicas, pending=observed.unschedulable)


def plan_role(
    spec: TargetSpec, view: TargetView, role: Role, desired_replicas: int, now: float
) -> VariantPlan:
    """The role's count split over the role's variants only (cheapest first up, the
    unschedulable skip, most expensive first down). A role is sized in pods (per-replica
    targets of the ``roles`` block), so here every replica counts as one: capacity and
    length steering are the role-less split's (docs/policy.md "Variants")."""
    variants = tuple(
        replace(v, capacity_per_replica=1.0, max_model_len=None)
        for v in policy_variants(spec)
        if _role_of(spec, v.name) == role
    )
    states = {
        name: s for name, s in variant_states(spec, view).items() if _role_of(spec, name) == role
    }
    return plan_replicas(variants, states, max(0, desired_replicas), now)


def _role_of(spec: TargetSpec, name: str) -> Role | None:
    return next((v.role for v in spec.variants if v.name == name), None)


def role_status_rows(
    spec: TargetSpec, view: TargetView, plans: Mapping[Role, VariantPlan]
) -> tuple[VariantStatus, ...]:
    """``status.variants[]`` with each row's role, in the spec's order."""
    seen = {v.name: v for v in view.variants}
    rows = []
    for v in spec.variants:
        assert v.role is not None
        rows.append(status_row(v, seen[v.name], plans[v.role]))
    return tuple(rows)
