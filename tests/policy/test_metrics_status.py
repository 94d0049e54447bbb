"""A blind target says so: MetricsAvailable names why nothing was read, Active is never
Idle when nothing was read, Fallback shows when fallback.replicas drives the count."""

from __future__ import annotations

import pytest

from autoscaler.policy.status import (
    NO_PODS,
    NO_SIGNALS,
    PROMETHEUS_UNAVAILABLE,
    SCRAPE_ERRORS,
    MetricsAvailability,
    active_fields,
    fallback_fields,
    metrics_availability,
)


def _m(**kw: object) -> MetricsAvailability:
    args: dict[str, object] = {
        "source": "pods",
        "spec_replicas": 2,
        "pods": 2,
        "pods_read": 2,
        "signals_read": 3,
        "errors": (),
    }
    args.update(kw)
    return metrics_availability(**args)  # type: ignore[arg-type]


def test_signals_read_is_available_even_with_some_pods_unread() -> None:
    m = _m(pods_read=1, errors=("pod-b: connection refused",))
    assert (m.available, m.status) == (True, "True")
    assert "1 of 2 pods read" in m.message and "first error: pod-b: connection refused" in m.message


@pytest.mark.parametrize(
    ("kw", "reason", "says"),
    [
        ({"pods": 0, "pods_read": 0, "signals_read": 0}, NO_PODS, "no ready pod"),
        (
            {"pods_read": 0, "signals_read": 0, "errors": ("pod-a: timeout", "pod-b: 503")},
            SCRAPE_ERRORS,
            "first error: pod-a: timeout",
        ),
        (
            {"source": "prometheus", "pods_read": 0, "signals_read": 0, "errors": ("HTTP 503",)},
            PROMETHEUS_UNAVAILABLE,
            "Prometheus answered no query; first error: HTTP 503",
        ),
        ({"pods_read": 2, "signals_read": 0}, NO_SIGNALS, "none exposes"),
    ],
)
def test_blind_names_the_reason_and_the_first_error(
    kw: dict[str, object], reason: str, says: str
) -> None:
    m = _m(**kw)
    assert (m.available, m.status, m.reason) == (False, "False", reason)
    assert says in m.message


def test_no_pods_wins_over_prometheus_errors_when_there_is_nothing_to_ask_about() -> None:
    m = _m(source="prometheus", pods=0, pods_read=0, signals_read=0, errors=("HTTP 503",))
    assert m.reason == NO_PODS


def test_active_is_unknown_never_idle_when_nothing_was_read() -> None:
    blind = _m(pods=0, pods_read=0, signals_read=0)
    c = active_fields(False, blind)
    assert (c.status, c.reason) == ("Unknown", "MetricsUnavailable")
    assert "Idle" not in c.reason + c.message and blind.message in c.message
    seen = active_fields(False, _m())
    assert (seen.status, seen.reason) == ("False", "Idle")
    assert active_fields(True, blind).status == "True"  # a forecast/activation said so


def test_fallback_condition_follows_the_decision() -> None:
    on = fallback_fields(True, "fallback: 2 replicas after 3 failed reads")
    assert (on.type, on.status, on.reason) == ("Fallback", "True", "FallbackReplicas")
    assert "3 failed reads" in on.message
    assert fallback_fields(False, "x").status == "False"
