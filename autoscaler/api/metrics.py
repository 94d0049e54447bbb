"""The controller's own Prometheus metrics, in one registry the loop and the API share.

One class, not module globals, so that every process, test and demo builds its own
registry and two apps in one process never collide on metric names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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


class ControllerMetrics:
    """Decisions, desired vs current replicas, forecasts, scrape errors, tick and API time."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        target = ("namespace", "name")
        self.decisions = Counter(
            "llm_autoscaler_decisions",
            "Decisions taken, by target and reason.",
            [*target, "reason"],
            registry=r,
        )
        self.desired_replicas = Gauge(
            "llm_autoscaler_desired_replicas",
            "Replicas the latest decision asks for.",
            target,
            registry=r,
        )
        self.current_replicas = Gauge(
            "llm_autoscaler_current_replicas",
            "Replicas observed at the latest decision.",
            target,
            registry=r,
        )
        self.active = Gauge(
            "llm_autoscaler_active",
            "1 when the target is active (KEDA activation).",
            target,
            registry=r,
        )
        self.metric_value = Gauge(
            "llm_autoscaler_metric_value",
            "Latest value of each scaling signal (absent when the read failed).",
            [*target, "signal"],
            registry=r,
        )
        self.forecast_value = Gauge(
            "llm_autoscaler_forecast_value",
            "Forecast value of each scaling signal at now + horizon.",
            [*target, "signal"],
            registry=r,
        )
        self.forecast = Gauge(
            "llm_autoscaler_forecast",
            "Every signal the planner forecasts at now + horizon (rates included).",
            [*target, "signal"],
            registry=r,
        )
        self.forecast_horizon = Gauge(
            "llm_autoscaler_forecast_horizon_seconds",
            "Forecast horizon (the learned cold start, or the policy's horizonSeconds).",
            target,
            registry=r,
        )
        self.capacity_per_replica = Gauge(
            "llm_autoscaler_capacity_per_replica",
            "Per-replica capacity per signal: learned at the SLO, else the configured target.",
            [*target, "signal"],
            registry=r,
        )
        self._numbered: dict[tuple[str, str], set[tuple[Gauge, str]]] = {}
        self.is_leader = Gauge(
            "llm_autoscaler_is_leader",
            "1 while this instance holds the leader Lease (only the leader writes).",
            registry=r,
        )
        self.scrape_errors = Counter(
            "llm_autoscaler_scrape_errors", "Failed metric reads per target.", target, registry=r
        )
        self.rejected_values = Counter(
            "llm_autoscaler_rejected_values",
            "Pods (or Prometheus answers) left unread because a value was out of range, "
            "by reason: not-finite, negative, above-one.",
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
        self.api_request_duration = Histogram(
            "llm_autoscaler_api_request_duration_seconds",
            "REST API request latency by method, route template and status.",
            ["method", "route", "status"],
            buckets=_API_BUCKETS_S,
            registry=r,
        )

    def observe_decision(self, ref: TargetRef, decision: Decision) -> None:
        labels = (ref.namespace, ref.name)
        self.decisions.labels(*labels, str(decision.reason)).inc()
        self.desired_replicas.labels(*labels).set(decision.desired_replicas)
        self.current_replicas.labels(*labels).set(decision.current_replicas)
        self.active.labels(*labels).set(1.0 if decision.active else 0.0)
        for m in decision.metrics:
            if m.value is None:
                # Missing data is not zero: drop the series rather than export a 0.
                self._remove(self.metric_value, (*labels, m.signal))
            else:
                self.metric_value.labels(*labels, m.signal).set(m.value)
            if m.forecast_value is None:
                self._remove(self.forecast_value, (*labels, m.signal))
            else:
                self.forecast_value.labels(*labels, m.signal).set(m.forecast_value)
        self._observe_numbers(labels, decision.numbers)

    def _observe_numbers(self, labels: tuple[str, str], numbers: Mapping[str, float]) -> None:
        """Planner numbers as series; a number absent this tick drops its series."""
        seen: set[tuple[Gauge, str]] = set()
        for key, value in numbers.items():
            parts = key.split(".")
            if len(parts) == 3 and parts[0] == "forecast" and parts[2] == "predicted":
                gauge, signal = self.forecast, parts[1]
            elif len(parts) == 3 and parts[0] == "capacity" and parts[2] == "per_replica":
                gauge, signal = self.capacity_per_replica, parts[1]
            else:
                continue
            gauge.labels(*labels, signal).set(value)
            seen.add((gauge, signal))
        for gauge, signal in self._numbered.get(labels, set()) - seen:
            self._remove(gauge, (*labels, signal))
        self._numbered[labels] = seen
        horizon = numbers.get("forecast_horizon_s", numbers.get("forecast.horizon_s"))
        if horizon is None:
            self._remove(self.forecast_horizon, labels)
        else:
            self.forecast_horizon.labels(*labels).set(horizon)

    def observe_tick(self, duration_s: float) -> None:
        self.tick_duration.observe(duration_s)

    def observe_scrape_error(self, ref: TargetRef) -> None:
        self.scrape_errors.labels(ref.namespace, ref.name).inc()

    def observe_rejected(self, ref: TargetRef, reason: str, count: int) -> None:
        if reason not in REJECT_REASONS:  # closed label set, whatever a source reports
            reason = "other"
        self.rejected_values.labels(ref.namespace, ref.name, reason).inc(count)

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
        labels = (ref.namespace, ref.name)
        for gauge in (
            self.desired_replicas,
            self.current_replicas,
            self.active,
            self.forecast_horizon,
        ):
            self._remove(gauge, labels)
        for gauge, signal in self._numbered.pop(labels, set()):
            self._remove(gauge, (*labels, signal))
        for reason in (*REJECT_REASONS, "other"):
            with contextlib.suppress(KeyError):
                self.rejected_values.remove(*labels, reason)

    @staticmethod
    def _remove(metric: Gauge, labels: tuple[str, ...]) -> None:
        with contextlib.suppress(KeyError):
            metric.remove(*labels)
