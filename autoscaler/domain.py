"""Domain types shared by every layer: targets, observations, forecasts, decisions.

All are frozen dataclasses so that the pure core can neither mutate its inputs nor keep
hidden state: everything the core remembers lives in `DecisionState` and is returned.
Times are plain floats in seconds on one clock per target (passed in, never read here).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final, Literal

# Canonical, engine-neutral signal names. Counts are totals over the target's ready pods,
# fractions are means over ready pods (``kv_cache_usage_max`` is the max), latencies are
# windowed quantiles in seconds, rates are per second.
SignalName = Literal[
    "waiting",
    "running",
    "kv_cache_usage",
    "kv_cache_usage_max",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
    "itl_p95_s",
    "arrival_rate_per_s",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
    "preemptions_per_s",
]
SIGNALS: Final[tuple[str, ...]] = SignalName.__args__  # type: ignore[attr-defined]
FRACTION_SIGNALS: Final[frozenset[str]] = frozenset({"kv_cache_usage", "kv_cache_usage_max"})
LATENCY_SIGNALS: Final[frozenset[str]] = frozenset(
    {"ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p95_s"}
)


@dataclass(frozen=True, slots=True)
class TargetRef:
    """A scale target, addressed like a Kubernetes object."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True)
class Forecast:
    """Predicted signal values at ``t + horizon_s`` (same names and units as signals)."""

    horizon_s: float
    signals: Mapping[str, float]
    model: str = "unknown"
    # Learned per-replica capacity at the latency SLO, per signal (only learned ones).
    capacity_per_replica: Mapping[str, float] = field(default_factory=dict)
    # The load regime learned from the target's history (`forecast.regime`: ``regime.*``
    # numbers; ``regime.scale_down_window_s`` lengthens the decision's scale-down window).
    regime: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Observation:
    """What the shell read about one target at time ``t``.

    A signal absent from ``signals`` is missing data: never read as zero.
    ``pods_read`` < ``ready_replicas`` means totals are lower bounds (some pods unknown),
    so they may justify a scale-up but never a scale-down.
    """

    t: float
    current_replicas: int
    ready_replicas: int
    signals: Mapping[str, float] = field(default_factory=dict)
    pods_read: int | None = None
    pending_replicas: int = 0
    capacity_max_replicas: int | None = None
    forecast: Forecast | None = None
    # Requests held at the activators (no Ready replica to take them) and requests they
    # have in flight (streams included): activity that keeps a target from zero, and the
    # queue a scale-up from zero is sized for.
    held: int = 0
    in_flight: int = 0

    @property
    def complete(self) -> bool:
        """True when every ready pod was read (or the source reads targets as a whole)."""
        return self.pods_read is None or self.pods_read >= self.ready_replicas


class Reason(StrEnum):
    """Machine-readable decision reasons (stable strings: used in metrics and events)."""

    SCALE_UP = "scale-up"
    SCALE_DOWN = "scale-down"
    STEADY = "steady"
    WITHIN_TOLERANCE = "within-tolerance"
    HOLD_MISSING_DATA = "hold-missing-data"
    HOLD_PARTIAL_DATA = "hold-partial-data"
    FALLBACK = "fallback"
    ACTIVATE = "activate"
    IDLE = "idle"
    COOLDOWN = "cooldown"
    PANIC = "panic"
    FORECAST = "forecast"
    STABILIZED = "stabilized"
    RATE_LIMITED = "rate-limited"
    WAITING_FOR_READY = "waiting-for-ready"
    MAX_REPLICAS = "max-replicas"
    MIN_REPLICAS = "min-replicas"
    CAPACITY_LIMITED = "capacity-limited"
    PAUSED = "paused"  # the autoscaling.llmscaler.io/paused(-replicas) annotation


@dataclass(frozen=True, slots=True)
class MetricRecommendation:
    """One metric's reading and the replicas it asks for (``None`` when missing)."""

    signal: str
    metric_type: str
    target: float
    value: float | None
    replicas: int | None
    forecast_value: float | None = None
    forecast_replicas: int | None = None
    active: bool = False
    learned: bool = False  # target = learned per-replica capacity (prediction block)

    @property
    def missing(self) -> bool:
        return self.value is None


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one tick for one target, with the reason and numbers behind it."""

    t: float
    current_replicas: int
    desired_replicas: int
    reason: Reason
    message: str
    active: bool
    metrics: tuple[MetricRecommendation, ...] = ()
    numbers: Mapping[str, float] = field(default_factory=dict)
    limits: tuple[Reason, ...] = ()
    panic: bool = False

    @property
    def changed(self) -> bool:
        return self.desired_replicas != self.current_replicas

    def to_dict(self) -> dict[str, object]:
        """JSON-ready view (used by the CLI, REST API and events)."""
        return {
            "t": self.t,
            "current_replicas": self.current_replicas,
            "desired_replicas": self.desired_replicas,
            "reason": str(self.reason),
            "message": self.message,
            "active": self.active,
            "panic": self.panic,
            "limits": [str(x) for x in self.limits],
            "metrics": [
                {
                    "signal": m.signal,
                    "type": m.metric_type,
                    "target": m.target,
                    "value": m.value,
                    "replicas": m.replicas,
                    "forecast_value": m.forecast_value,
                    "forecast_replicas": m.forecast_replicas,
                    "active": m.active,
                    "learned": m.learned,
                }
                for m in self.metrics
            ],
            "numbers": dict(self.numbers),
        }


@dataclass(frozen=True, slots=True)
class ScaleEvent:
    """An observed change of the target's replica count (HPA's scale-event record)."""

    t: float
    change: int  # positive: added replicas, negative: removed replicas


@dataclass(frozen=True, slots=True)
class TimedValue:
    t: float
    value: float


@dataclass(frozen=True, slots=True)
class DecisionState:
    """Everything the core remembers between ticks, returned anew by every `decide`."""

    recommendations: tuple[TimedValue, ...] = ()  # unstabilised recommendations (HPA)
    demand: tuple[TimedValue, ...] = ()  # raw replica demand per tick (panic averaging)
    events: tuple[ScaleEvent, ...] = ()  # observed replica changes (rate policies)
    last_replicas: int | None = None
    pending: ScaleEvent | None = None  # our last advised change, stamped when decided
    last_active_t: float | None = None
    consecutive_failures: int = 0
    panic_until_t: float | None = None
    panic_max_replicas: int = 0
