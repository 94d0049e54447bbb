"""The sleeper planner: wake before cold start, sleep within the budget, TTL expiry."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy.sleepers import Fleet, SleepPlan, expired, plan


def test_scale_up_wakes_sleepers_first_and_cold_starts_only_the_rest() -> None:
    assert plan(4, Fleet(awake=1, idle_ready=1, asleep=2), 2) == SleepPlan(wake=2, start=1)
    assert plan(1, Fleet(awake=0, idle_ready=0, asleep=3), 3) == SleepPlan(wake=1)


def test_scale_down_sleeps_within_the_budget_and_deletes_the_rest() -> None:
    assert plan(0, Fleet(awake=3, idle_ready=3, asleep=1), 2) == SleepPlan(sleep=1, delete=2)
    assert plan(0, Fleet(awake=2, idle_ready=2, asleep=0), 0) == SleepPlan(delete=2)


def test_scale_down_never_removes_a_busy_or_starting_replica() -> None:
    assert plan(0, Fleet(awake=3, idle_ready=1, asleep=0), 5) == SleepPlan(sleep=1)
    assert plan(1, Fleet(awake=2, idle_ready=0, asleep=0), 5) == SleepPlan()


def test_at_the_desired_size_nothing_changes() -> None:
    assert plan(2, Fleet(awake=2, idle_ready=2, asleep=1), 1) == SleepPlan()


def test_expired_sleepers_are_those_past_the_ttl() -> None:
    assert expired([0.0, 100.0, 250.0], 300.0, 200.0) == [0, 1]
    assert expired([0.0], 1e9, None) == []


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: plan(-1, Fleet(0, 0, 0), 0), "desired"),
        (lambda: plan(1, Fleet(0, 0, 0), -1), "sleeping_budget"),
        (lambda: Fleet(awake=1, idle_ready=2, asleep=0), "idle_ready"),
        (lambda: expired([0.0], 1.0, 0.0), "ttl_s"),
    ],
)
def test_bad_input_is_refused_naming_the_field(call: Callable[[], object], field: str) -> None:
    with pytest.raises(ConfigError, match=field):
        call()
