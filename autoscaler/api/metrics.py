"""The controller's own Prometheus metrics, in one registry the loop and the API share.

One class, not module globals, so that every process, test and demo builds its own
registry and two apps in one process never collide on metric names.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from autoscaler.domain import Decision, TargetRef
from autoscaler.metrics.signals import REJECT_REASONS

_TICK_BUCKETS_S = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_API_BUCKETS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
# Request label values come from closed sets: a client controls the method and the path, and
# an open label let 5,000 made-up methods create 75,000 series (12.7 MiB of /metrics).
HTTP_METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "CONNECT", "TRACE"}
)
UNMATCHED_ROUTE = "unmatched"
SCALE_FAILURE_REASONS = frozenset({"error", "conflict"})
_TARGET = ("namespace", "name")


# a scale from zero: a sleeping replica's seconds to a cold start's many minutes
_COLD_START_BUCKETS_S = (0.5, 1, 2.5, 5, 10, 20, 30, 60, 90, 120, 180, 300, 600, 1200)


class ControllerMetrics:
    """Decisions, desired vs current replicas, forecasts, scrape errors, tick and API time."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        target = _TARGET
        # Per-decision series (~15 per target): built from the latest decisions when
        # /metrics is scraped, not set on every tick (issue 16: 1,000 targets x 1 tick/s).
        self._decisions = _DecisionSeries()
        r.register(self._decisions)
        self.is_leader = Gauge(
            "llm_autoscaler_is_leader",
            "1 while this instance holds the leader Lease (only the leader writes).",
            registry=r,
        )
        self.sleeper_actions = Counter(
            "llm_autoscaler_sleeper_actions",
            "Sleeper actions by target and action: woken, slept, deleted, wake_failed, "
            "sleep_failed (docs/policy.md#sleepers).",
            [*target, "action"],
            registry=r,
        )
        self.scrape_errors = Counter(
            "llm_autoscaler_scrape_errors", "Failed metric reads per target.", target, registry=r
        )
        self.rejected_values = Counter(
            "llm_autoscaler_rejected_values",
            "Pods (or Prometheus answers) left unread because a value was out of range, "
            f"by reason: {', '.join(REJECT_REASONS)} (docs/metrics.md).",
            [*target, "reason"],
            registry=r,
        )
        self.reconcile_errors = Counter(
            "llm_autoscaler_reconcile_errors",
            "Reconciles of a target that raised (the other targets went on).",
            target,
            registry=r,
        )
        self.scale_failures = Counter(
            "llm_autoscaler_scale_failures",
            "Scale writes that applied nothing, by reason: error (API error or timeout after "
            "retries), conflict (still conflicting after the re-decide retries).",
            [*target, "reason"],
            registry=r,
        )
        self.loop_restarts = Counter(
            "llm_autoscaler_loop_restarts",
            "Control-loop restarts after an unexpected error (with backoff).",
            registry=r,
        )
        self.tick_duration = Histogram(
            "llm_autoscaler_tick_duration_seconds",
            "Duration of one control-loop tick over all targets.",
            buckets=_TICK_BUCKETS_S,
            registry=r,
        )
        self.decision_lag = Histogram(
            "llm_autoscaler_decision_lag_seconds",
            "From when a target was due (its polling interval, on its tick phase) to its "
            "decision: what a fleet's targets wait for each tick's reads and decisions.",
            buckets=_TICK_BUCKETS_S,
            registry=r,
        )
        self.api_request_duration = Histogram(
            "llm_autoscaler_api_request_duration_seconds",
            "REST API request latency by method, route template and status.",
            ["method", "route", "status"],
            buckets=_API_BUCKETS_S,
            registry=r,
        )
        self._connections_closed: Counter | None = None
        self._keda_streams: Counter | None = None
        self.cold_start_answered = Histogram(
            "llm_autoscaler_scale_from_zero_first_answer_seconds",
            "From the first request held at the activators for a target at zero to the "
            "first held request handed to a Ready replica (docs/activator.md).",
            target,
            buckets=_COLD_START_BUCKETS_S,
            registry=r,
        )

    def observe_cold_start_answered(self, ref: TargetRef, after_s: float) -> None:
        self.cold_start_answered.labels(ref.namespace, ref.name).observe(after_s)

    def observe_connection_closed(self, reason: str) -> None:
        """An HTTP connection the listener's limits closed (autoscaler/api/connections.py).
        Registered on first use, so /metrics is unchanged until a limit acts."""
        if self._connections_closed is None:
            self._connections_closed = Counter(
                "llm_autoscaler_http_connections_closed",
                "HTTP connections closed by the listener's limits, by reason: "
                "header_timeout, evicted (oldest waiting for headers, listener full), "
                "refused (listener full of requests in progress).",
                ["reason"],
                registry=self.registry,
            )
        self._connections_closed.labels(reason).inc()

    def observe_keda_stream(self, event: str) -> None:
        """A KEDA activation stream opened or closed (registered on first use)."""
        if self._keda_streams is None:
            self._keda_streams = Counter(
                "llm_autoscaler_keda_streams",
                "KEDA StreamIsActive streams, by event: opened, closed (open now: the difference).",
                ["event"],
                registry=self.registry,
            )
        self._keda_streams.labels(event).inc()

    def observe_decision(self, ref: TargetRef, decision: Decision) -> None:
        """Remember the decision (O(1) per tick); its series are built at scrape time."""
        self._decisions.observe(ref, decision)

    def observe_tick(self, duration_s: float) -> None:
        self.tick_duration.observe(duration_s)

    def observe_decision_lag(self, lag_s: float) -> None:
        self.decision_lag.observe(lag_s)

    def observe_scrape_error(self, ref: TargetRef) -> None:
        self.scrape_errors.labels(ref.namespace, ref.name).inc()

    def observe_rejected(self, ref: TargetRef, reason: str, count: int) -> None:
        if reason not in REJECT_REASONS:  # closed label set, whatever a source reports
            reason = "other"
        self.rejected_values.labels(ref.namespace, ref.name, reason).inc(count)

    def observe_sleeper_action(self, ref: TargetRef, action: str, count: int) -> None:
        """Sleepers woken, slept, deleted, or a failed sleep/wake (control/sleepers.py)."""
        self.sleeper_actions.labels(ref.namespace, ref.name, action).inc(count)

    def observe_reconcile_error(self, ref: TargetRef) -> None:
        self.reconcile_errors.labels(ref.namespace, ref.name).inc()

    def observe_scale_failure(self, ref: TargetRef, reason: str) -> None:
        if reason not in SCALE_FAILURE_REASONS:  # closed label set
            reason = "other"
        self.scale_failures.labels(ref.namespace, ref.name, reason).inc()

    def observe_loop_restart(self) -> None:
        self.loop_restarts.inc()

    def observe_request(self, method: str, route: str, status: int, duration_s: float) -> None:
        """``route`` must be a route template (or `UNMATCHED_ROUTE`), never a raw path."""
        method = method if method in HTTP_METHODS else "other"
        code = str(status) if 100 <= status <= 599 else "other"
        self.api_request_duration.labels(method, route, code).observe(duration_s)

    def forget(self, ref: TargetRef) -> None:
        """Drop a deleted target's gauges so dashboards do not show stale values."""
        self._decisions.forget(ref)
        labels = (ref.namespace, ref.name)
        for reason in (*REJECT_REASONS, "other"):
            with contextlib.suppress(KeyError):
                self.rejected_values.remove(*labels, reason)


class _DecisionSeries:
    """A prometheus_client collector over the latest decision per target.

    The same series as gauges set per decision would give (a value missing from the
    latest decision has no series: missing data is not zero), at no per-tick cost: the
    work is done per scrape (every 15-60 s), not per target per tick (every 1 s)."""

    def __init__(self) -> None:
        self.latest: dict[tuple[str, str], Decision] = {}
        # decisions by (namespace, name, reason): [count, created (unix s)]
        self.counts: dict[tuple[str, str, str], list[float]] = {}

    def observe(self, ref: TargetRef, decision: Decision) -> None:
        labels = (ref.namespace, ref.name)
        self.latest[labels] = decision
        key = (ref.namespace, ref.name, str(decision.reason))
        count = self.counts.get(key)
        if count is None:
            self.counts[key] = [1.0, time.time()]
        else:
            count[0] += 1.0

    def forget(self, ref: TargetRef) -> None:
        # The decisions counter keeps its series (a counter, as before).
        self.latest.pop((ref.namespace, ref.name), None)

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        (
            decisions,
            desired,
            current,
            active,
            value,
            forecast_value,
            forecast,
            horizon,
            capacity,
            sleeping,
            awake,
        ) = families = _families()
        for (ns, name, reason), (count, created) in list(self.counts.items()):
            decisions.add_metric((ns, name, reason), count, created=created)
        for labels, d in list(self.latest.items()):
            desired.add_metric(labels, d.desired_replicas)
            current.add_metric(labels, d.current_replicas)
            active.add_metric(labels, 1.0 if d.active else 0.0)
            values: dict[str, float | None] = {}
            forecasts: dict[str, float | None] = {}
            for m in d.metrics:  # the last recommendation of a signal wins
                values[m.signal] = m.value
                forecasts[m.signal] = m.forecast_value
            for signal, v in values.items():
                if v is not None:
                    value.add_metric((*labels, signal), v)
            for signal, v in forecasts.items():
                if v is not None:
                    forecast_value.add_metric((*labels, signal), v)
            numbers = d.numbers
            for key, number in numbers.items():
                parts = key.split(".")
                if len(parts) != 3:
                    continue
                if parts[0] == "forecast" and parts[2] == "predicted":
                    forecast.add_metric((*labels, parts[1]), number)
                elif parts[0] == "capacity" and parts[2] == "per_replica":
                    capacity.add_metric((*labels, parts[1]), number)
            sleeping_now = numbers.get("sleepers.sleeping")
            if sleeping_now is not None:
                sleeping.add_metric(labels, sleeping_now)
                awake.add_metric(labels, numbers.get("sleepers.awake", 0.0))
            h = numbers.get("forecast_horizon_s", numbers.get("forecast.horizon_s"))
            if h is not None:
                horizon.add_metric(labels, h)
        return iter(families)


def _families() -> tuple[
    CounterMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
    GaugeMetricFamily,
]:
    signal = (*_TARGET, "signal")
    return (
        CounterMetricFamily(
            "llm_autoscaler_decisions",
            "Decisions taken, by target and reason.",
            labels=(*_TARGET, "reason"),
        ),
        GaugeMetricFamily(
            "llm_autoscaler_desired_replicas",
            "Replicas the latest decision asks for.",
            labels=_TARGET,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_current_replicas",
            "Replicas observed at the latest decision.",
            labels=_TARGET,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_active",
            "1 when the target is active (KEDA activation).",
            labels=_TARGET,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_metric_value",
            "Latest value of each scaling signal (absent when the read failed).",
            labels=signal,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_forecast_value",
            "Forecast value of each scaling signal at now + horizon.",
            labels=signal,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_forecast",
            "Every signal the planner forecasts at now + horizon (rates included).",
            labels=signal,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_forecast_horizon_seconds",
            "Forecast horizon (the learned cold start, or the policy's horizonSeconds).",
            labels=_TARGET,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_capacity_per_replica",
            "Per-replica capacity per signal: learned at the SLO, else the configured target.",
            labels=signal,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_sleeping_replicas",
            "Replicas in vLLM sleep mode at the latest decision (targets with policy.sleep).",
            labels=_TARGET,
        ),
        GaugeMetricFamily(
            "llm_autoscaler_awake_replicas",
            "Replicas not asleep at the latest decision (targets with policy.sleep).",
            labels=_TARGET,
        ),
    )
