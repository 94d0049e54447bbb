"""The LLMAutoscaler custom resource <-> `TargetSpec`, and its status block.

The ``autoscaling.llmscaler.io/paused`` and ``paused-replicas`` annotations (KEDA's pause,
`autoscaler.policy.status.parse_pause`) become ``TargetSpec.pause``.

Spec = the policy document (camelCase: ``profile`` and the fields set over it,
`autoscaler.policy.document`) plus ``scaleTargetRef``, ``mode``, ``metricsPort``,
``metricsPath``, ``engine`` and an optional ``selector`` (``matchLabels``). The document is
written back as the user wrote it, never the effective policy (a profile's values stay
the profile's). An invalid object is rejected whole with every problem named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from autoscaler.domain import Decision, TargetRef
from autoscaler.errors import ConfigError
from autoscaler.kube.names import CRD_GROUP, CRD_KIND, CRD_VERSION
from autoscaler.policy.document import PolicySource, load_source
from autoscaler.policy.status import PolicyStatus, parse_pause
from autoscaler.store.base import Mode, ScaleTargetRef, TargetSpec

API_VERSION = f"{CRD_GROUP}/{CRD_VERSION}"
_TARGET_KEYS = frozenset(
    {"scaleTargetRef", "mode", "metricsPort", "metricsPath", "engine", "selector"}
)
_MODES = ("direct", "keda", "advisory")


def spec_to_object(spec: TargetSpec) -> dict[str, Any]:
    body: dict[str, Any] = spec.policy_document()
    body["scaleTargetRef"] = {
        "apiVersion": spec.scale_target_ref.api_version,
        "kind": spec.scale_target_ref.kind,
        "name": spec.scale_target_ref.name,
    }
    body["mode"] = spec.mode
    body["metricsPort"] = spec.metrics_port
    body["metricsPath"] = spec.metrics_path
    body["engine"] = spec.engine
    if spec.selector is not None:
        body["selector"] = {"matchLabels": dict(spec.selector)}
    return {
        "apiVersion": API_VERSION,
        "kind": CRD_KIND,
        "metadata": {"name": spec.ref.name, "namespace": spec.ref.namespace},
        "spec": body,
    }


def object_to_spec(obj: Mapping[str, Any]) -> TargetSpec:
    """Validate one LLMAutoscaler object; `ConfigError` names object, field, value, rule."""
    meta = obj.get("metadata") or {}
    ref = TargetRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
    raw = dict(obj.get("spec") or {})
    problems: list[str] = []
    str_ref = raw.get("scaleTargetRef") or {}
    kind = str_ref.get("kind", "Deployment")
    if kind not in ("Deployment", "StatefulSet"):
        problems.append(
            f"spec.scaleTargetRef.kind: value {kind!r} must be Deployment or StatefulSet"
        )
    if not str_ref.get("name"):
        problems.append("spec.scaleTargetRef.name: required, the Deployment/StatefulSet name")
    mode = raw.get("mode", "direct")
    if mode not in _MODES:
        problems.append(f"spec.mode: value {mode!r} must be one of {', '.join(_MODES)}")
    port = raw.get("metricsPort", 8000)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(f"spec.metricsPort: value {port!r} must be an integer in 1..65535")
    path = raw.get("metricsPath", "/metrics")
    if not isinstance(path, str) or not path.startswith("/"):
        problems.append(f"spec.metricsPath: value {path!r} must start with '/'")
    selector = raw.get("selector")
    labels: dict[str, str] | None = None
    if selector is not None:
        ml = selector.get("matchLabels") if isinstance(selector, dict) else None
        if not isinstance(ml, dict) or not ml:
            problems.append("spec.selector.matchLabels: must be a non-empty map when set")
        else:
            labels = {str(k): str(v) for k, v in ml.items()}
    pause, pause_problems = parse_pause(meta.get("annotations") or {})
    problems.extend(pause_problems)
    policy_doc = {k: v for k, v in raw.items() if k not in _TARGET_KEYS}
    source: PolicySource | None = None
    try:
        source = load_source(policy_doc)
    except ConfigError as err:
        problems.extend(f"spec.{p}" for p in err.problems)
    if problems or source is None:
        raise ConfigError(f"{CRD_KIND} {ref}", problems)
    return TargetSpec.from_source(
        ref,
        source,
        scale_target_ref=ScaleTargetRef(
            kind=kind,
            name=str(str_ref["name"]),
            api_version=str(str_ref.get("apiVersion", "apps/v1")),
        ),
        mode=cast(Mode, mode),
        metrics_port=port,
        metrics_path=path,
        engine=str(raw.get("engine", "auto")),
        selector=labels,
        pause=pause,
    )


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
            }
        )
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
