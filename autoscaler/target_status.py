"""The LLMAutoscaler custom resource's status block (its spec encoding, with `TargetSpec`,
is in `autoscaler.target`): conditions, the last decision, the policy in use."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.domain import Decision
from autoscaler.policy.status import PolicyStatus


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: str  # "True" | "False" | "Unknown"
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class VariantStatus:
    """One variant of a target with ``variants``: ``status.variants[]`` (and the REST
    target's status). ``replicas``: the Deployment's replicas when observed;
    ``desiredReplicas``: the split's count for it; ``pendingReplicas``: created, not Ready;
    ``unschedulableReplicas``: of those, what no node can take now; ``blocked``: why it
    could not grow when growth was wanted; ``capacityPerReplica``: reference replicas one
    of its replicas covers (unset: 1); ``maxModelLen`` as written; ``tooLongShare``: of
    the demand, the share over its maxModelLen (only longer variants serve it)."""

    name: str
    replicas: int
    desired_replicas: int
    ready_replicas: int
    pending_replicas: int
    unschedulable_replicas: int
    cost: float
    free_slots: int | None = None
    blocked: str | None = None
    role: str | None = None  # prefill | decode: a target whose variants carry roles
    capacity_per_replica: float | None = None  # None: not set (1 until learned)
    max_model_len: int | None = None
    too_long_share: float | None = None  # None: no demand over its maxModelLen

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "replicas": self.replicas,
            "desiredReplicas": self.desired_replicas,
            "readyReplicas": self.ready_replicas,
            "pendingReplicas": self.pending_replicas,
            "unschedulableReplicas": self.unschedulable_replicas,
            "cost": self.cost,
        }
        if self.free_slots is not None:
            doc["freeSlots"] = self.free_slots
        if self.blocked is not None:
            doc["blocked"] = self.blocked
        if self.role is not None:
            doc["role"] = self.role
        if self.capacity_per_replica is not None:
            doc["capacityPerReplica"] = self.capacity_per_replica
        if self.max_model_len is not None:
            doc["maxModelLen"] = self.max_model_len
        if self.too_long_share is not None:
            doc["tooLongShare"] = round(self.too_long_share, 4)
        return doc


def variant_summary(variants: Sequence[VariantStatus]) -> str:
    """``h100=2,mig=3``: desired replicas per variant (the ``Variants`` column); with
    roles each prefixed by its role's initial: ``P:prefill-h100=3,D:decode-h100=1``."""
    return ",".join(
        f"{v.role[0].upper()}:{v.name}={v.desired_replicas}"
        if v.role
        else f"{v.name}={v.desired_replicas}"
        for v in variants
    )


def role_rows(variants: Sequence[VariantStatus]) -> list[dict[str, Any]]:
    """``status.roles[]``: per role (in the order first seen) the sums of its variants'
    rows: replicas, desiredReplicas (the role's decision as split), readyReplicas and
    unschedulableReplicas. Empty when no row carries a role."""
    rows: dict[str, dict[str, Any]] = {}
    for v in variants:
        if v.role is None:
            continue
        row = rows.setdefault(
            v.role,
            {
                "role": v.role,
                "replicas": 0,
                "desiredReplicas": 0,
                "readyReplicas": 0,
                "unschedulableReplicas": 0,
            },
        )
        row["replicas"] += v.replicas
        row["desiredReplicas"] += v.desired_replicas
        row["readyReplicas"] += v.ready_replicas
        row["unschedulableReplicas"] += v.unschedulable_replicas
    return list(rows.values())


def status_body(
    decision: Decision | None,
    *,
    now_rfc3339: str,
    conditions: Sequence[Condition] = (),
    previous: Mapping[str, Any] | None = None,
    observed_generation: int | None = None,
    policy: PolicyStatus | None = None,
    variants: Sequence[VariantStatus] | None = (),
) -> dict[str, Any]:
    """The ``status`` block; a condition keeps its lastTransitionTime while unchanged.
    ``policy``: ``profile`` (the profile applied, ``recommended`` when the spec names
    none) and ``policyHash`` (`autoscaler.policy.document.document_hash`). ``variants``:
    ``status.variants[]`` and ``status.variantSummary`` (``h100=2,mig=3``); None removes
    both (a spec that no longer has variants)."""
    before = {c.get("type"): c for c in (previous or {}).get("conditions") or []}
    conds = []
    for c in conditions:
        old = before.get(c.type)
        since = (
            old.get("lastTransitionTime", now_rfc3339)
            if old and old.get("status") == c.status
            else now_rfc3339
        )
        conds.append(
            {
                "type": c.type,
                "status": c.status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
            }
        )
    status: dict[str, Any] = {"conditions": conds}
    if decision is not None:
        status.update(
            {
                "currentReplicas": decision.current_replicas,
                "desiredReplicas": decision.desired_replicas,
                "lastReason": str(decision.reason),
                "lastMessage": decision.message,
                "lastDecisionTime": now_rfc3339,
                # requests held at the activators (the `Held` column of kubectl get llmas)
                "held": int(decision.numbers.get("held", 0)),
            }
        )
        sleeping = decision.numbers.get("sleepers.sleeping")
        if sleeping is not None:  # a target with sleepers (docs/policy.md#sleepers)
            status["sleepingReplicas"] = int(sleeping)
            status["awakeReplicas"] = int(decision.numbers.get("sleepers.awake", 0))
    if variants:  # a target with variants (docs/policy.md "Variants")
        status["variants"] = [v.to_dict() for v in variants]
        status["variantSummary"] = variant_summary(variants)
        roles = role_rows(variants)
        if roles:  # variants with roles (docs/policy.md "Prefill/decode roles")
            status["roles"] = roles
    elif variants is None:  # variants removed from the spec: null deletes (merge patch)
        status["variants"] = None
        status["variantSummary"] = None
        status["roles"] = None
    if observed_generation is not None:
        status["observedGeneration"] = observed_generation
    if policy is not None:
        status["profile"] = policy.profile
        status["policyHash"] = policy.policy_hash
    return status


OVERRIDES_PROFILE = "OverridesProfile"


def overrides_condition(policy: PolicyStatus) -> Condition | None:
    """``OverridesProfile=True`` (reason ``OldCRDDefault``) naming the fields that hold the
    pre-profiles CRD's default over the profile's value; None when there are none (the
    condition is then left out of the status)."""
    message = policy.overrides_message()
    if message is None:
        return None
    return Condition(OVERRIDES_PROFILE, "True", "OldCRDDefault", message)
