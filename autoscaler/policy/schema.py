"""The policy schema, shared by the decision core, the REST API, the CRD and the CLI.

Names and shapes follow KEDA's ScaledObject and the HPA ``behavior`` block (camelCase in
JSON/YAML) so users can paste what they already have. Validation happens here, once:
`load_policy` rejects an invalid policy whole, and every problem names field, value, rule.

Every number is finite (``Infinity``/``NaN`` are refused) and bounded, so that the
decision math cannot overflow whatever finite signal it meets: metric targets within
[`TARGET_MIN`, `VALUE_MAX`], activation targets <= `VALUE_MAX`, rate-policy values <=
`RATE_POLICY_VALUE_MAX` (pods, or percent: 100x per period), replica counts <= `REPLICAS_MAX`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, ValidationError, model_validator
from pydantic.alias_generators import to_camel

from autoscaler.domain import FRACTION_SIGNALS, SignalName
from autoscaler.errors import ConfigError

TARGET_MIN = 1e-6  # a metric target below this is a typo (and overflows value / target)
VALUE_MAX = 1e9  # largest metric target or activation target (as the HTTP/gRPC caps)
RATE_POLICY_VALUE_MAX = 10_000
REPLICAS_MAX = 10_000

POLLING_INTERVAL_MIN_S = 0.1  # below this a target ticks faster than the loop can scrape
# A tolerance is a fraction of the current replicas. HPA accepts any value >= 0 and its
# own tests use 2.0 ("never scale down"), so pasted HPA behaviour keeps working up to 10
# (1,000%: scale up only past 11x demand); 1e308 and the like are refused.
TOLERANCE_MAX = 10.0

# Strict scalars: a JSON string or boolean is not a number here, as in the CRD's schema
# (the API server refuses ``"5"`` and ``true`` for an integer), so a document one of
# them accepts the other accepts too; and what is stored is the value validated.
Int = Annotated[int, Strict()]
Float = Annotated[float, Strict()]
Bool = Annotated[bool, Strict()]

CAPACITY_SIGNALS: tuple[str, ...] = (
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "arrival_rate_per_s",
    "running",
)


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="forbid",
        allow_inf_nan=False,  # a policy stored with Infinity serialises as null
    )

    def dump(self) -> dict[str, Any]:
        """camelCase, JSON-ready, without unset optional blocks."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class MetricSpec(_Model):
    """One scaling metric. ``AverageValue``: desired = ceil(total / target).
    ``Value``: desired = ceil(readyReplicas * value / target) (HPA external-metric rules)."""

    signal: SignalName
    type: Literal["AverageValue", "Value"] = "AverageValue"
    target: Float = Field(ge=TARGET_MIN, le=VALUE_MAX)
    activation_target: Float = Field(default=0.0, ge=0, le=VALUE_MAX)


class ScalingPolicy(_Model):
    type: Literal["Pods", "Percent"]
    value: Int = Field(gt=0, le=RATE_POLICY_VALUE_MAX)
    period_seconds: Int = Field(gt=0, le=1800)


class ScalingRules(_Model):
    """HPA ``behavior.scaleUp`` / ``scaleDown``; ``None`` fields take HPA's defaults."""

    stabilization_window_seconds: Int | None = Field(default=None, ge=0, le=3600)
    select_policy: Literal["Max", "Min", "Disabled"] | None = None
    # HPA validation only requires >= 0 (its own tests use 2.0: never scale in that
    # direction); bounded at TOLERANCE_MAX.
    tolerance: Float | None = Field(default=None, ge=0, le=TOLERANCE_MAX)
    policies: tuple[ScalingPolicy, ...] | None = None


class Behavior(_Model):
    scale_up: ScalingRules | None = None
    scale_down: ScalingRules | None = None


class Fallback(_Model):
    """KEDA ``fallback``: after ``failureThreshold`` failed reads, go to ``replicas``."""

    failure_threshold: Int = Field(ge=1, le=1_000_000)
    replicas: Int = Field(ge=0, le=REPLICAS_MAX)


class Panic(_Model):
    """Knative KPA panic mode: when demand averaged over ``windowSeconds`` asks for at
    least ``threshold`` x the ready replicas, scale up at once and do not scale down
    until ``stableWindowSeconds`` pass without panic."""

    window_seconds: Float = Field(default=6.0, gt=0, le=600)
    threshold: Float = Field(default=2.0, gt=1, le=100)
    stable_window_seconds: Float = Field(default=60.0, gt=0, le=3600)


class Prediction(_Model):
    """Forecast hook: scale for the larger of demand now and demand at now + horizon.
    ``horizonSeconds`` unset means the target's learned cold start (prior until learned).

    ``learnedCapacitySignal`` (opt-in): once the planner has learned what one replica
    sustains of this signal while TTFT stays under the SLO, that capacity (times
    ``learnedCapacityHeadroom``) acts as one more ``AverageValue`` metric. Until it is
    learned the metric does not exist (never a guessed target)."""

    enabled: Bool = True
    forecaster: Literal["ewma", "holt", "seasonal", "auto"] = "auto"
    horizon_seconds: Float | None = Field(default=None, gt=0, le=3600)
    cold_start_prior_seconds: Float = Field(default=90.0, gt=0, le=3600)
    min_pods_to_learn: Int = Field(default=3, ge=1, le=REPLICAS_MAX)
    learned_capacity_signal: SignalName | None = None
    learned_capacity_headroom: Float = Field(default=1.0, gt=0, le=1)

    @model_validator(mode="after")
    def _capacity_signal(self) -> Prediction:
        name = self.learned_capacity_signal
        if name is not None and name not in CAPACITY_SIGNALS:
            raise ValueError(
                f"learnedCapacitySignal={name!r} must be a per-replica load or rate signal "
                f"({', '.join(CAPACITY_SIGNALS)}): a fraction or a latency has no "
                "per-replica capacity"
            )
        return self


class Capacity(_Model):
    """Cap desired replicas to what the GPU resource can place; report capacity-limited."""

    enforce: Bool = True
    gpu_resource: str | None = None
    provisionable_replicas: Int = Field(default=0, ge=0, le=REPLICAS_MAX)


class WarmPool(_Model):
    """Pause pods holding warm GPUs so a scale-up lands on a warm node."""

    enabled: Bool = False
    min_replicas: Int = Field(default=0, ge=0, le=REPLICAS_MAX)
    max_replicas: Int = Field(default=4, ge=0, le=REPLICAS_MAX)
    lead_time_seconds: Float = Field(default=300.0, ge=0, le=3600)
    priority_class_name: str = "llm-warm-pool-low"
    peak_priority_class_name: str = "llm-warm-pool-peak"

    @model_validator(mode="after")
    def _bounds(self) -> WarmPool:
        if self.min_replicas > self.max_replicas:
            raise ValueError(
                f"minReplicas={self.min_replicas} must be <= maxReplicas={self.max_replicas}"
            )
        return self


class ColdStartGuard(_Model):
    """While replicas are starting, allow at most one scale-up policy step beyond the
    READY replicas (Knative limits scale-up relative to ready pods). A queue keeps growing
    until new pods are ready, so without this a long cold start compounds the Percent
    policy into a large overshoot. Off reproduces HPA exactly."""

    enabled: Bool = True


HOLD_CAP_MAX = 1_000_000  # the activator's own bound (activator/config.py)


class ScaleToZero(_Model):
    """Serverless scale to zero (docs/activator.md). ``enabled``: the target goes to 0
    replicas after ``idlePeriodSeconds`` without activity, even with ``minReplicaCount``
    >= 1 (that count then applies while active, as KEDA's ``idleReplicaCount: 0``). Never
    while a replica is starting, a request is held at an activator or a response is still
    streaming. ``holdCap``: requests the activators hold for the target while it has no
    Ready replica (unset: the activator's own default)."""

    enabled: Bool = False
    idle_period_seconds: Int | None = Field(default=None, ge=0, le=86_400)
    hold_cap: Int | None = Field(default=None, ge=1, le=HOLD_CAP_MAX)


SLEEP_TTL_MAX_S = 7 * 86_400


class Sleep(_Model):
    """vLLM sleep mode ("sleepers", docs/policy.md#sleepers). On scale-down an idle Ready
    replica is put to sleep (``POST /sleep?level=1``) instead of being removed, while fewer
    than ``maxSleeping`` sleep; the Deployment keeps counting it. A scale-up wakes sleepers
    first (``POST /wake_up``, seconds) and cold-starts only the rest. A sleeper asleep for
    ``ttlSeconds`` is deleted (unset or null: never). The pods must run vLLM with
    ``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``."""

    max_sleeping: Int = Field(ge=0, le=REPLICAS_MAX)
    ttl_seconds: Float | None = Field(default=None, gt=0, le=SLEEP_TTL_MAX_S)


def _default_metrics() -> tuple[MetricSpec, ...]:
    # running 32 per replica: on the simulator's 8B/H100 replica TTFT p95 nears 0.5 s at
    # ~25-40 concurrent conversations (prefill shares each step with the decode batch);
    # 96 was never reached before the queue, so scaling waited for TTFT to break.
    # prompt tokens/s 8000 per replica: TTFT is bound by prefill, and queue counts miss
    # prefill-heavy load (a few 50k-token prompts fill a replica with 3 requests). 8000
    # is ~23% of an 8B/H100's ~35k tokens/s prefill (calibration.md 1d): enough headroom
    # for long prompts' attention cost and head-of-line blocking (docs/benchmarks.md,
    # issue 18). Scale it with prefill throughput on other hardware (A100 or 70B/TP4:
    # ~3200).
    return (
        MetricSpec(signal="waiting", type="AverageValue", target=4.0),
        MetricSpec(signal="running", type="AverageValue", target=32.0),
        MetricSpec(signal="kv_cache_usage", type="Value", target=0.8),
        MetricSpec(signal="prompt_tokens_per_s", type="AverageValue", target=8000.0),
    )


class Policy(_Model):
    """A target's scaling policy (KEDA ScaledObject fields plus HPA behavior, plus ours)."""

    min_replica_count: Int = Field(default=1, ge=0, le=REPLICAS_MAX)
    max_replica_count: Int = Field(default=16, ge=1, le=REPLICAS_MAX)
    idle_replica_count: Int | None = Field(default=None, ge=0, le=REPLICAS_MAX)
    cooldown_period: Int = Field(default=300, ge=0, le=86_400)
    polling_interval: Float = Field(default=1.0, ge=POLLING_INTERVAL_MIN_S, le=3600)
    fallback: Fallback | None = None
    metrics: tuple[MetricSpec, ...] = Field(default_factory=_default_metrics, min_length=1)
    behavior: Behavior = Field(default_factory=Behavior)
    panic: Panic | None = None
    prediction: Prediction | None = None
    capacity: Capacity = Field(default_factory=Capacity)
    warm_pool: WarmPool = Field(default_factory=WarmPool)
    cold_start_guard: ColdStartGuard = Field(default_factory=ColdStartGuard)
    scale_to_zero: ScaleToZero = Field(default_factory=ScaleToZero)
    sleep: Sleep | None = None  # unset: no sleepers (scale-down removes replicas)
    allow_fraction_average_value: Bool = False

    @property
    def may_go_to_zero(self) -> bool:
        """``scaleToZero.enabled``, or KEDA's ``minReplicaCount: 0`` / ``idleReplicaCount: 0``."""
        return (
            self.scale_to_zero.enabled
            or self.min_replica_count == 0
            or self.idle_replica_count == 0
        )

    @property
    def zero_idle_period_s(self) -> int:
        """Seconds without activity before the target goes to zero (or to idle)."""
        period = self.scale_to_zero.idle_period_seconds
        return period if period is not None else self.cooldown_period

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        problems: list[str] = []
        if self.min_replica_count > self.max_replica_count:
            problems.append(
                f"minReplicaCount: value {self.min_replica_count} must be <= "
                f"maxReplicaCount ({self.max_replica_count})"
            )
        if self.idle_replica_count is not None and not (
            self.idle_replica_count < max(self.min_replica_count, 1)
        ):
            problems.append(
                f"idleReplicaCount: value {self.idle_replica_count} must be < "
                f"minReplicaCount ({self.min_replica_count}), as in KEDA"
            )
        stz = self.scale_to_zero
        if stz.enabled and self.idle_replica_count:
            problems.append(
                f"scaleToZero.enabled: value true conflicts with idleReplicaCount "
                f"({self.idle_replica_count}): the idle count of a target that goes to zero "
                "is 0 (unset idleReplicaCount)"
            )
        if not self.may_go_to_zero:
            for name, value in (
                ("idlePeriodSeconds", stz.idle_period_seconds),
                ("holdCap", stz.hold_cap),
            ):
                if value is not None:
                    problems.append(
                        f"scaleToZero.{name}: value {value} applies only to a target that "
                        "may go to zero: set scaleToZero.enabled: true (or minReplicaCount 0)"
                    )
        if self.fallback is not None and self.fallback.replicas > self.max_replica_count:
            problems.append(
                f"fallback.replicas: value {self.fallback.replicas} must be <= "
                f"maxReplicaCount ({self.max_replica_count})"
            )
        seen: set[tuple[str, str]] = set()
        for i, m in enumerate(self.metrics):
            key = (m.signal, m.type)
            if key in seen:
                problems.append(f"metrics[{i}]: signal {m.signal!r} with type {m.type} repeated")
            seen.add(key)
            if m.signal in FRACTION_SIGNALS:
                if m.target > 1:
                    problems.append(
                        f"metrics[{i}].target: value {m.target} for fraction signal "
                        f"{m.signal!r} must be <= 1"
                    )
                if m.type == "AverageValue" and not self.allow_fraction_average_value:
                    ceiling = 1 / m.target
                    bound = f"{math.ceil(ceiling)}" if math.isfinite(ceiling) else "a fixed"
                    problems.append(
                        f"metrics[{i}].type: AverageValue on fraction signal {m.signal!r} "
                        f"computes ceil(fraction / {m.target}) and can never ask for more "
                        f"than {bound} replicas; use type Value (or set "
                        "allowFractionAverageValue to reproduce KEDA's behaviour)"
                    )
        if problems:
            raise ValueError("; ".join(problems))
        return self


def _format_errors(err: ValidationError) -> list[str]:
    out: list[str] = []
    for e in err.errors():
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in e["loc"])
        loc = loc.replace(".[", "[")
        value = e.get("input")
        shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
        msg = e["msg"].removeprefix("Value error, ")
        out.append(f"{loc or 'policy'}: {msg} (value {shown})" if loc else msg)
    return out


def validate_policy(data: Mapping[str, Any]) -> Policy:
    """Validate a whole policy (no profile: unset fields take the schema's defaults) or
    raise `ConfigError`. Documents from users go through `load_policy`."""
    try:
        return Policy.model_validate(dict(data))
    except ValidationError as err:
        raise ConfigError("invalid policy", _format_errors(err)) from None


def load_policy(data: Mapping[str, Any]) -> Policy:
    """Validate a policy document (camelCase or snake_case keys): its ``profile``
    (default ``recommended``) with the document's fields merged over it
    (`autoscaler.policy.document`), or raise `ConfigError`."""
    from autoscaler.policy.document import load_policy as load_document

    return load_document(data)


def policy_errors(data: Mapping[str, Any]) -> list[str]:
    """The problems `load_policy` would report, or an empty list."""
    try:
        load_policy(data)
    except ConfigError as err:
        return err.problems
    return []
