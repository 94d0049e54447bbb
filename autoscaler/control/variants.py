"""A target with ``variants`` in the loop: from the observed view (the model's sums plus
one `VariantView` per Deployment) to the pure split (`policy.variants.plan_replicas`)
and the status rows. The writes themselves are the loop's (`ControlLoop._apply_variants`).
"""

from __future__ import annotations

from autoscaler.control.ports import TargetView
from autoscaler.errors import PermanentError
from autoscaler.policy.variants import Variant, VariantPlan, VariantState, plan_replicas
from autoscaler.target import TargetSpec
from autoscaler.target_status import VariantStatus


def policy_variants(spec: TargetSpec) -> tuple[Variant, ...]:
    """The spec's variants as the split sees them: one replica of any variant is one
    replica of the decision (its cost per replica-hour orders them)."""
    return tuple(
        Variant(
            name=v.name,
            cost_per_replica_hour=v.cost_per_replica_hour,
            capacity_per_replica=1.0,
            min_replicas=v.min_replicas,
            max_replicas=v.max_replicas,
        )
        for v in spec.variants
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


def plan_for(spec: TargetSpec, view: TargetView, desired_replicas: int, now: float) -> VariantPlan:
    """The split of ``desired_replicas`` over ``spec``'s variants from ``view``."""
    return plan_replicas(
        policy_variants(spec), variant_states(spec, view), max(0, desired_replicas), now
    )


def status_rows(spec: TargetSpec, view: TargetView, plan: VariantPlan) -> tuple[VariantStatus, ...]:
    """``status.variants[]``: per variant what was observed and what the split wants."""
    seen = {v.name: v for v in view.variants}
    rows = []
    for v in spec.variants:
        vv = seen[v.name]
        rows.append(
            VariantStatus(
                name=v.name,
                replicas=vv.spec_replicas,
                desired_replicas=plan.replicas[v.name],
                ready_replicas=vv.ready_replicas,
                pending_replicas=vv.pending_replicas,
                unschedulable_replicas=vv.unschedulable_replicas,
                cost=v.cost_per_replica_hour,
                free_slots=vv.free_slots,
                blocked=plan.blocked.get(v.name),
            )
        )
    return tuple(rows)
