"""What KEDA is told about a target, shared by the gRPC scaler and the metrics-api endpoint.

KEDA creates an HPA with an ``External`` metric of type ``AverageValue`` and target
``targetSize``; the HPA then asks for ``ceil(value / targetSize)`` replicas. Serving
``value = desiredReplicas * targetSize`` therefore lands the HPA on the controller's
desired count (outside the HPA's own tolerance band, see docs/keda.md).

Missing data is never zero: without a decision the value holds the observed replica count;
with nothing observed yet the read fails (`NoDataYet`), and KEDA treats a failed read as
"do not scale to zero" (or its ``fallback``), never as zero.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from autoscaler.control.state import ControllerState
from autoscaler.domain import Reason, TargetRef
from autoscaler.errors import ConfigError, PermanentError, TemporaryError

DEFAULT_TARGET_SIZE: Final = 1.0
# Upper bound on targetSize, for gRPC and HTTP alike: value = desiredReplicas * targetSize
# must fit KEDA's int64 metricValue (10_000 replicas * 1e9 = 1e13, far below 9.2e18).
MAX_TARGET_SIZE: Final = 1e9
# Lower bound: a smaller size makes value = desiredReplicas * targetSize round to 0 in
# KEDA's metric (5e-324 was accepted).
MIN_TARGET_SIZE: Final = 1e-6
# ASCII decimal only (as Go's strconv.ParseFloat, KEDA's parser, reads it): Python's
# float() also reads "1_000", "\u0661" (an Arabic-Indic one), " 5 " and "inf".
_DECIMAL_RE: Final = re.compile(r"[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")
DEFAULT_METRIC_NAME: Final = "llm-autoscaler-desired-replicas"
_METRIC_NAME_RE: Final = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}$")

# scalerMetadata keys (trigger ``metadata`` in the ScaledObject); others are ignored,
# since KEDA passes the whole trigger metadata (``scalerAddress`` included).
KEY_TARGET: Final = "llmAutoscaler"
KEY_NAMESPACE: Final = "namespace"
KEY_TARGET_SIZE: Final = "targetSize"
KEY_METRIC_NAME: Final = "metricName"


class TargetUnknown(PermanentError):
    """No such target in the controller (gRPC NOT_FOUND, HTTP 404)."""


class WrongMode(PermanentError):
    """The target is in ``direct`` mode: KEDA and the controller would both write replicas."""


class NoDataYet(TemporaryError):
    """Nothing observed for the target yet; KEDA must hold rather than read zero."""


@dataclass(frozen=True, slots=True)
class ScalerQuery:
    """A KEDA request resolved: which target, and the HPA target size to divide by."""

    ref: TargetRef
    target_size: float = DEFAULT_TARGET_SIZE
    metric_name: str = DEFAULT_METRIC_NAME


@dataclass(frozen=True, slots=True)
class ScalerReading:
    """What KEDA gets: activation and ``value = desired_replicas * target_size``."""

    ref: TargetRef
    active: bool
    desired_replicas: int
    current_replicas: int
    target_size: float
    reason: str
    held: bool  # True when no decision exists yet and the value holds the observed count

    @property
    def value(self) -> float:
        return self.desired_replicas * self.target_size


def _shown(value: str, limit: int = 64) -> str:
    """A metadata value quoted for a message, clipped: KEDA passes user text through."""
    return repr(value) if len(value) <= limit else f"{value[:limit]!r}... ({len(value)} chars)"


def parse_query(name: str, namespace: str, metadata: Mapping[str, str]) -> ScalerQuery:
    """Resolve ScaledObjectRef + scalerMetadata; bad metadata is a `ConfigError`."""
    problems: list[str] = []
    target_name = metadata.get(KEY_TARGET) or name
    target_ns = metadata.get(KEY_NAMESPACE) or namespace
    if not target_name:
        problems.append(f"{KEY_TARGET}: empty, and the ScaledObjectRef has no name")
    if not target_ns:
        problems.append(f"{KEY_NAMESPACE}: empty, and the ScaledObjectRef has no namespace")
    size = DEFAULT_TARGET_SIZE
    raw_size = metadata.get(KEY_TARGET_SIZE)
    if raw_size:
        size = float(raw_size) if _DECIMAL_RE.fullmatch(raw_size) else math.nan
        if not (math.isfinite(size) and MIN_TARGET_SIZE <= size <= MAX_TARGET_SIZE):
            problems.append(
                f"{KEY_TARGET_SIZE}: value {_shown(raw_size)} must be an ASCII decimal "
                f"number (such as 10, 0.5 or 1e3) in [{MIN_TARGET_SIZE:g}, {MAX_TARGET_SIZE:g}]"
            )
            size = DEFAULT_TARGET_SIZE
    metric = metadata.get(KEY_METRIC_NAME) or DEFAULT_METRIC_NAME
    if not _METRIC_NAME_RE.match(metric):
        problems.append(
            f"{KEY_METRIC_NAME}: value {_shown(metric)} must match {_METRIC_NAME_RE.pattern}"
        )
    if problems:
        raise ConfigError("invalid scalerMetadata", problems)
    return ScalerQuery(TargetRef(target_ns, target_name), size, metric)


def read_target(
    state: ControllerState, ref: TargetRef, target_size: float = DEFAULT_TARGET_SIZE
) -> ScalerReading:
    """The latest decision as KEDA should see it (never zero for missing data)."""
    status = state.status(ref)
    if status is None:
        raise TargetUnknown(
            f"no LLMAutoscaler target {ref} is known to this controller "
            f"(set scalerMetadata.{KEY_TARGET} / {KEY_NAMESPACE} to the target's name)"
        )
    if status.spec.mode == "direct":
        raise WrongMode(
            f"target {ref} is in mode 'direct': the controller writes its replicas itself; "
            "set mode 'keda' (or 'advisory') before pointing a ScaledObject at it"
        )
    decision = status.last_decision
    if decision is not None:
        desired, active = decision.desired_replicas, decision.active
        if decision.reason in (Reason.HOLD_MISSING_DATA, Reason.HOLD_PARTIAL_DATA):
            # Belt and braces: a hold never lowers the count nor deactivates a running target.
            desired = max(desired, decision.current_replicas)
            active = active or decision.current_replicas > 0
        return ScalerReading(
            ref,
            active,
            desired,
            decision.current_replicas,
            target_size,
            str(decision.reason),
            held=False,
        )
    if status.observations:
        current = status.observations[-1].current_replicas
        return ScalerReading(
            ref, current > 0, current, current, target_size, "no-decision-yet", held=True
        )
    raise NoDataYet(f"target {ref}: nothing observed yet; holding (KEDA keeps its replicas)")
