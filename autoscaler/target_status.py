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


def status_body(
    decision: Decision | None,
    *,
    now_rfc3339: str,
    conditions: Sequence[Condition] = (),
    previous: Mapping[str, Any] | None = None,
    observed_generation: int | None = None,
    policy: PolicyStatus | None = None,
) -> dict[str, Any]:
    """The ``status`` block; a condition keeps its lastTransitionTime while unchanged.
    ``policy``: ``profile`` (the profile applied, ``recommended`` when the spec names
    none) and ``policyHash`` (`autoscaler.policy.document.document_hash`)."""
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
