"""What a target's status says about its policy: the profile, a hash of the effective
policy, and the fields that look like defaults an older CRD wrote into the object.

See docs/policy.md#what-the-status-reports and
#upgrading-from-the-crd-before-profiles.

Before profiles (the CRD before commit 73d98bd), the LLMAutoscaler schema carried a
``default:`` for most policy fields, which the API server wrote into every stored object
(``maxReplicaCount: 16``, ...). Those values now read as set by the user and override the
selected profile's. The API server kept no record of which values it filled, so a value
equal to an old default is ambiguous: the old CRD may have written it, or the user did.
`old_default_overrides` therefore names only the fields that (1) the document sets,
(2) to exactly the old CRD's default, (3) where the profile sets a different value, so
the field changes what the target runs. A field set to any other value, or to a value
the profile shares, is never named.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from autoscaler.domain import Decision, Reason
from autoscaler.policy.document import PROFILE_FIELD, profile_document

# Every `default:` of the policy fields in deploy/base/crd.yaml before profiles
# (`git show 73d98bd^:deploy/base/crd.yaml`, copied to tests/fixtures/; the table is checked
# against the copy by tests/policy/test_policy_status.py). Nested ones were filled only when
# the object had the block (an object without ``panic`` got no ``panic.threshold``).
OLD_CRD_DEFAULTS: Mapping[tuple[str, ...], Any] = {
    ("minReplicaCount",): 1,
    ("maxReplicaCount",): 16,
    ("cooldownPeriod",): 300,
    ("pollingInterval",): 1.0,
    ("panic", "windowSeconds"): 6.0,
    ("panic", "threshold"): 2.0,
    ("panic", "stableWindowSeconds"): 60.0,
    ("prediction", "enabled"): True,
    ("prediction", "forecaster"): "auto",
    ("prediction", "coldStartPriorSeconds"): 90.0,
    ("prediction", "minPodsToLearn"): 3,
    ("prediction", "learnedCapacityHeadroom"): 1.0,
    ("capacity", "enforce"): True,
    ("capacity", "provisionableReplicas"): 0,
    ("warmPool", "enabled"): False,
    ("warmPool", "minReplicas"): 0,
    ("warmPool", "maxReplicas"): 4,
    ("warmPool", "leadTimeSeconds"): 300.0,
    ("warmPool", "priorityClassName"): "llm-warm-pool-low",
    ("warmPool", "peakPriorityClassName"): "llm-warm-pool-peak",
    ("coldStartGuard", "enabled"): True,
    ("allowFractionAverageValue",): False,
}
_MISSING = object()


def _at(doc: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = doc
    for key in path:
        if not isinstance(node, Mapping) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values: 16 and 16.0 alike (the API server may store a float default
    as an integer), but a boolean is never a number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return float(a) == float(b)
    return bool(type(a) is type(b) and a == b)


@dataclass(frozen=True, slots=True)
class Override:
    """A field the document sets to the old CRD's default, over a different profile value."""

    field: str  # dotted camelCase path
    value: Any  # the document's (= the old default)
    profile_value: Any  # what the profile would give instead


def old_default_overrides(document: Mapping[str, Any], profile: str) -> tuple[Override, ...]:
    """The fields of ``document`` (camelCase, as written) that hold exactly the old CRD's
    default where ``profile`` sets another value, in `OLD_CRD_DEFAULTS` order."""
    base = profile_document(profile)
    out: list[Override] = []
    for path, old in OLD_CRD_DEFAULTS.items():
        got = _at(document, path)
        if got is _MISSING or not _same(got, old):
            continue
        theirs = _at(base, path)
        if theirs is _MISSING or _same(theirs, old):
            continue  # the profile leaves it unset, or gives the same value: no effect
        out.append(Override(".".join(path), got, theirs))
    return tuple(out)


def overrides_message(profile: str, overrides: tuple[Override, ...]) -> str:
    """The ``OverridesProfile`` condition's message (docs/policy.md, Upgrading)."""
    listed = ", ".join(
        f"{o.field}={_json(o.value)} (profile: {_json(o.profile_value)})" for o in overrides
    )
    return (
        f"these fields override the profile {profile!r} with the value the CRD before "
        f"profiles filled in by default: {listed}; if the old CRD wrote them, remove them "
        "from the spec to get the profile's values (if you set them yourself, nothing to do)"
    )


def _json(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@dataclass(frozen=True, slots=True)
class PolicyStatus:
    """The policy part of a target's status (``status.profile``, ``status.policyHash``,
    the ``OverridesProfile`` condition). Compared whole to decide whether to write."""

    profile: str
    policy_hash: str
    overrides: tuple[Override, ...] = ()

    def overrides_message(self) -> str | None:
        return overrides_message(self.profile, self.overrides) if self.overrides else None


def policy_status(
    profile: str, policy_hash: str, document: Mapping[str, Any] | None
) -> PolicyStatus:
    """``document``: the policy document as written (None: a policy built in code, which
    has no document a user wrote, so nothing to warn about)."""
    overrides: tuple[Override, ...] = ()
    if document is not None:
        overrides = old_default_overrides(
            {k: v for k, v in document.items() if k != PROFILE_FIELD}, profile
        )
    return PolicyStatus(profile=profile, policy_hash=policy_hash, overrides=overrides)


# --- whether the controller can see: MetricsAvailable, Active, Fallback -------------------

METRICS_READ = "MetricsRead"
NO_PODS = "NoPods"
SCRAPE_ERRORS = "ScrapeErrors"
PROMETHEUS_UNAVAILABLE = "PrometheusUnavailable"
NO_SIGNALS = "NoSignals"


@dataclass(frozen=True, slots=True)
class MetricsAvailability:
    """The ``MetricsAvailable`` condition of one tick: could any signal be read, and if
    not, why (the first error as the source reported it)."""

    available: bool
    reason: str
    message: str

    @property
    def status(self) -> str:
        return "True" if self.available else "False"


def metrics_availability(
    *,
    source: str,
    spec_replicas: int,
    pods: int,
    pods_read: int | None,
    signals_read: int,
    errors: tuple[str, ...],
) -> MetricsAvailability:
    """``source``: "pods" (each pod's /metrics) or "prometheus". ``pods``: the ready pods
    with a metrics endpoint; ``signals_read``: how many signals came back with a value.
    Blind (False) is when no signal was read at all; some pods unread with signals from
    the others is available, with the first error in the message."""
    first = f"; first error: {errors[0]}" if errors else ""
    if signals_read > 0:
        read = f"{pods_read} of {pods} pods read" if pods_read is not None else "signals read"
        extra = f" ({len(errors)} errors{first})" if errors else ""
        return MetricsAvailability(True, METRICS_READ, read + extra)
    if source == "prometheus" and errors and pods > 0:
        return MetricsAvailability(
            False, PROMETHEUS_UNAVAILABLE, f"Prometheus answered no query{first}"
        )
    if pods == 0:
        return MetricsAvailability(
            False,
            NO_PODS,
            f"no ready pod with a metrics endpoint to read ({spec_replicas} replicas in spec)",
        )
    if errors:
        return MetricsAvailability(
            False, SCRAPE_ERRORS, f"none of {pods} pods could be read{first}"
        )
    return MetricsAvailability(
        False, NO_SIGNALS, f"{pods} pods read but none exposes the policy's signals"
    )


@dataclass(frozen=True, slots=True)
class ConditionFields:
    """A condition's type, status, reason and message (target_status.py's `Condition` is the
    same shape; policy stays free of the Kubernetes layer)."""

    type: str
    status: str
    reason: str
    message: str


def active_fields(active: bool, metrics: MetricsAvailability | None) -> ConditionFields:
    """``Active`` as KEDA's ScaledObject reports it, except that a target whose metrics
    could not be read is ``Unknown`` (reason ``MetricsUnavailable``), never ``Idle``:
    nothing read is not the same as nothing to do."""
    if active:
        return ConditionFields(
            "Active", "True", "DemandAboveActivation", "at least one metric is active"
        )
    if metrics is not None and not metrics.available:
        return ConditionFields(
            "Active", "Unknown", "MetricsUnavailable", f"nothing was read: {metrics.message}"
        )
    return ConditionFields("Active", "False", "Idle", "no metric above its activation target")


def fallback_fields(fallback: bool, message: str) -> ConditionFields:
    """``Fallback=True`` while the policy's ``fallback.replicas`` drives the count (KEDA's
    Fallback column), with the decision's message."""
    if fallback:
        return ConditionFields("Fallback", "True", "FallbackReplicas", message)
    return ConditionFields("Fallback", "False", "MetricsDriven", "the count follows the metrics")


# --- pause (KEDA's autoscaling.keda.sh/paused and paused-replicas, on our group) ----------

PAUSED_ANNOTATION = "autoscaling.llmscaler.io/paused"
PAUSED_REPLICAS_ANNOTATION = "autoscaling.llmscaler.io/paused-replicas"


@dataclass(frozen=True, slots=True)
class Pause:
    """A paused target: no writes but, with ``replicas``, one to that count. ``None``:
    frozen at whatever count it has."""

    replicas: int | None = None


def parse_pause(annotations: Mapping[str, Any]) -> tuple[Pause | None, list[str]]:
    """The pause the annotations ask for, and the problems (field, value, rule) of bad
    values. As KEDA: ``paused-replicas: "N"`` pauses at N (and wins over ``paused``),
    ``paused: "true"`` at the current count; removing them resumes."""
    problems: list[str] = []
    raw_n = annotations.get(PAUSED_REPLICAS_ANNOTATION)
    raw_flag = annotations.get(PAUSED_ANNOTATION)
    flag = False
    if raw_flag is not None:
        if str(raw_flag).lower() not in ("true", "false"):
            problems.append(
                f"metadata.annotations[{PAUSED_ANNOTATION}]: value {raw_flag!r} must be "
                '"true" or "false"'
            )
        flag = str(raw_flag).lower() == "true"
    if raw_n is not None:
        text = str(raw_n).strip()
        if not text.isdigit():
            problems.append(
                f"metadata.annotations[{PAUSED_REPLICAS_ANNOTATION}]: value {raw_n!r} must be "
                "a whole number >= 0"
            )
        else:
            return Pause(int(text)), problems
    return (Pause() if flag else None), problems


def paused_decision(decision: Decision, pause: Pause) -> Decision:
    """The decision a paused target runs: the pause's count (or the current one), with
    what the policy would have asked for in the message."""
    desired = pause.replicas if pause.replicas is not None else decision.current_replicas
    how = (
        f"{PAUSED_REPLICAS_ANNOTATION}={pause.replicas}"
        if pause.replicas is not None
        else f"{PAUSED_ANNOTATION}=true"
    )
    return replace(
        decision,
        desired_replicas=desired,
        reason=Reason.PAUSED,
        message=(
            f"paused at {desired} replicas ({how}); the policy asks for "
            f"{decision.desired_replicas} ({decision.reason}): remove the annotation to resume"
        ),
        limits=(),
        panic=False,
    )


def paused_fields(pause: Pause | None) -> ConditionFields | None:
    """``Paused=True`` while paused (shown in ``kubectl get``); absent otherwise."""
    if pause is None:
        return None
    at = f"at {pause.replicas} replicas" if pause.replicas is not None else "at its current count"
    return ConditionFields("Paused", "True", "PausedByAnnotation", f"no writes; held {at}")
