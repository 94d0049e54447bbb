"""A target with ``variants`` in the loop: from the observed view (the model's sums plus
one `VariantView` per Deployment) to the pure split (`policy.variants.plan_replicas`)
and the status rows. The writes themselves are the loop's (`ControlLoop._apply_variants`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from autoscaler.control.ports import TargetView, VariantView
from autoscaler.domain import Observation
from autoscaler.errors import PermanentError
from autoscaler.policy.variants import (
    Variant,
    VariantPlan,
    VariantState,
    capacity_units,
    length_shares_from_buckets,
    plan_replicas,
)
from autoscaler.target import TargetSpec, VariantSpec
from autoscaler.target_status import VariantStatus


def policy_variants(spec: TargetSpec) -> tuple[Variant, ...]:
    """The spec's variants as the split sees them: each replica covers its
    ``capacityPerReplica`` reference replicas (unset: 1, the reference, until a per-variant
    capacity is learned; the planner learns one per model, not per variant) and serves
    requests up to its ``maxModelLen`` tokens; cost per unit of capacity orders them."""
    return tuple(
        Variant(
            name=v.name,
            cost_per_replica_hour=v.cost_per_replica_hour,
            capacity_per_replica=1.0 if v.capacity_per_replica is None else v.capacity_per_replica,
            min_replicas=v.min_replicas,
            max_replicas=v.max_replicas,
            max_model_len=v.max_model_len,
        )
        for v in spec.variants
    )


def weighs_capacity(spec: TargetSpec) -> bool:
    """Whether any variant's replica is not one reference replica (``capacityPerReplica``
    set and not 1): then the decision counts capacity, not pods (`capacity_observation`)."""
    return any(v.capacity_per_replica not in (None, 1.0) for v in spec.variants)


def capacity_observation(spec: TargetSpec, view: TargetView, obs: Observation) -> Observation:
    """The observation the decision sees for a target with variants: its current, ready
    and pending replicas in reference replicas (each variant's pods times its
    ``capacityPerReplica``, rounded up; unschedulable pods excluded, as the model's view
    counts them), so the per-pod targets are per reference replica, a decision that holds
    asks for the capacity running, and an H100 of capacity 3 counts as three slices.
    Unchanged when every variant's capacity is 1."""
    seen = {vv.name: vv for vv in view.variants}
    if not weighs_capacity(spec) or any(v.name not in seen for v in spec.variants):
        return obs  # a variant not observed: `variant_states` fails the target clearly
    variants = policy_variants(spec)

    def units(count: Mapping[str, int]) -> int:
        return capacity_units(variants, count)

    stuck = {n: min(vv.unschedulable_replicas, vv.spec_replicas) for n, vv in seen.items()}
    running = {n: vv.spec_replicas - stuck[n] for n, vv in seen.items()}
    ready = {n: vv.ready_replicas for n, vv in seen.items()}
    pending = {n: max(0, vv.pending_replicas - stuck[n]) for n, vv in seen.items()}
    cap_max = obs.capacity_max_replicas
    if cap_max is not None:  # what the capacity book can still place, per variant
        room: dict[str, int] = {}
        for v in spec.variants:
            vv = seen[v.name]
            bounds = [
                b
                for b in (
                    None if vv.free_slots is None else running[v.name] + vv.free_slots,
                    None if v.max_replicas is None else max(0, v.max_replicas - stuck[v.name]),
                )
                if b is not None
            ]
            room[v.name] = min(bounds) if bounds else cap_max
        cap_max = units(room)
    return replace(
        obs,
        current_replicas=units(running),
        ready_replicas=units(ready),
        pending_replicas=units(pending),
        capacity_max_replicas=cap_max,
    )


def variant_states(spec: TargetSpec, view: TargetView) -> dict[str, VariantState]:
    """Per variant: its Deployment's replicas, its unschedulable pods (the split's
    "Pending": no node can take them now) and its free slots in the capacity book."""
    seen = {v.name: v for v in view.variants}
    missing = [v.name for v in spec.variants if v.name not in seen]
    if missing:
        raise PermanentError(
            f"target {spec.ref}: variants {missing} not observed (this cluster port does "
            "not observe variants; use the Kubernetes controller)"
        )
    states: dict[str, VariantState] = {}
    for v in spec.variants:
        vv = seen[v.name]
        states[v.name] = VariantState(
            replicas=vv.spec_replicas,
            pending=min(vv.unschedulable_replicas, vv.spec_replicas),
            free_slots=vv.free_slots,
        )
    return states


def plan_for(
    spec: TargetSpec,
    view: TargetView,
    desired_replicas: int,
    now: float,
    length_buckets: Mapping[float, float] | None = None,
) -> VariantPlan:
    """The split of ``desired_replicas`` (reference replicas) over ``spec``'s variants
    from ``view``, long requests steered by the pods' prompt-length histogram over the
    window (``length_buckets``; empty or None: unknown, one class all serve). The
    decision saw the current capacity rounded up (`capacity_observation`): that slack
    comes off the demand, so a decision that holds moves nothing."""
    variants = policy_variants(spec)
    states = variant_states(spec, view)
    running = {n: s.replicas - s.pending for n, s in states.items()}
    exact = sum(v.capacity_per_replica * running[v.name] for v in variants)
    slack = (capacity_units(variants, running) - exact) if weighs_capacity(spec) else 0.0
    return plan_replicas(
        variants,
        states,
        max(0, desired_replicas),
        now,
        length_shares=length_shares_from_buckets(length_buckets or {}),
        rounding_slack=min(max(slack, 0.0), 0.999999),
    )


def status_rows(spec: TargetSpec, view: TargetView, plan: VariantPlan) -> tuple[VariantStatus, ...]:
    """``status.variants[]``: per variant what was observed and what the split wants."""
    seen = {v.name: v for v in view.variants}
    return tuple(status_row(v, seen[v.name], plan) for v in spec.variants)


def status_row(v: VariantSpec, vv: VariantView, plan: VariantPlan) -> VariantStatus:
    """One ``status.variants[]`` row. A variant with a role is sized in pods per role
    (every replica counts one, lengths not steered): it carries the role, not the
    capacity and length fields."""
    weighted = v.role is None
    return VariantStatus(
        name=v.name,
        replicas=vv.spec_replicas,
        desired_replicas=plan.replicas[v.name],
        ready_replicas=vv.ready_replicas,
        pending_replicas=vv.pending_replicas,
        unschedulable_replicas=vv.unschedulable_replicas,
        cost=v.cost_per_replica_hour,
        free_slots=vv.free_slots,
        blocked=plan.blocked.get(v.name),
        role=v.role,
        capacity_per_replica=v.capacity_per_replica if weighted else None,
        max_model_len=v.max_model_len if weighted else None,
        too_long_share=plan.too_long_share.get(v.name) if weighted else None,
    )


def variant_numbers(spec: TargetSpec, plan: VariantPlan) -> dict[str, float]:
    """The split's numbers the decision publishes (REST, history): the capacity split
    (reference replicas, unschedulable pods' on top) and, when a variant has a
    ``maxModelLen``, whether the request lengths were read (1) or not (0: every class
    counted as servable by all) and the share of the demand no variant serves."""
    out = {"variants.demand_capacity": plan.demand_capacity}
    if any(v.max_model_len is not None for v in spec.variants):
        out["variants.lengths_known"] = 1.0 if plan.lengths_known else 0.0
        out["variants.unservable_share"] = plan.unservable_share
    return out
