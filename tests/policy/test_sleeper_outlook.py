"""Sleep or zero: the outlook keeps sleepers while the target's own past quiet periods say
the next burst comes within the TTL, and releases them when they say it does not. Pure:
time is an argument."""

from __future__ import annotations

import pytest

from autoscaler.errors import ConfigError
from autoscaler.policy.sleepers import (
    KEEP,
    NO_FORECAST,
    RELEASE,
    Outlook,
    QuietGap,
    outlook,
)

TTL = 600.0


def gaps(*lengths: float, ended: bool = True) -> tuple[QuietGap, ...]:
    return tuple(QuietGap(x, ended) for x in lengths)


def test_without_enough_history_there_is_no_forecast_and_the_ttl_decides() -> None:
    look = outlook(1_000.0, 900.0, gaps(50, 60), TTL)
    assert look.reason == NO_FORECAST and look.keep
    assert look.quiet_s == 100 and look.gaps == 2
    assert "2 past quiet periods, 3 needed" in look.message


def test_bursts_that_came_within_the_ttl_keep_the_sleepers() -> None:
    look = outlook(1_000.0, 900.0, gaps(150, 200, 400, 30), TTL)  # 100 s quiet so far
    assert look.reason == KEEP and look.keep
    # the 30 s period is not comparable: this one has already lasted longer
    assert (look.comparable, look.ended_within_ttl) == (3, 3)
    assert look.message == (
        "next burst expected within ttlSeconds 600: 3 of 3 past quiet periods longer than "
        "100 s ended by a scale-up within 600 s; sleepers kept"
    )


def test_bursts_that_came_after_the_ttl_release_the_sleepers_early() -> None:
    look = outlook(1_000.0, 990.0, gaps(3_000, 5_000, 200, 4_000), TTL)
    assert look.reason == RELEASE and not look.keep
    assert (look.comparable, look.ended_within_ttl) == (4, 1)
    assert "no burst expected within ttlSeconds 600: 1 of 4" in look.message
    assert look.message.endswith("sleepers released")


def test_the_chance_is_conditional_on_how_long_this_quiet_period_has_lasted() -> None:
    history = gaps(60, 70, 80, 2_000, 3_000)
    assert outlook(10.0, 0.0, history, TTL).keep  # 3 of 5 longer than 10 s came in time
    later = outlook(100.0, 0.0, history, TTL)  # past 100 s, only the long ones remain
    assert not later.keep and (later.comparable, later.ended_within_ttl) == (2, 0)


def test_quieter_than_ever_before_releases() -> None:
    look = outlook(500.0, 0.0, gaps(60, 70, 80), TTL)
    assert look.reason == RELEASE and look.comparable == 0


def test_a_period_not_seen_to_its_end_counts_only_when_seen_past_the_ttl() -> None:
    # lost track at 100 s: unknown whether it ended within the TTL, so left out
    unknown = gaps(100, ended=False) * 3 + gaps(300)
    look = outlook(50.0, 0.0, unknown, TTL)
    assert (look.comparable, look.ended_within_ttl) == (1, 1) and look.keep
    # seen quiet for 700 s > TTL: it did not end within it
    past = gaps(700, ended=False) * 3 + gaps(300)
    look = outlook(50.0, 0.0, past, TTL)
    assert (look.comparable, look.ended_within_ttl) == (4, 1) and not look.keep


def test_the_threshold_is_a_parameter() -> None:
    history = gaps(100, 100, 2_000, 2_000)
    assert outlook(10.0, 0.0, history, TTL).keep  # 2 of 4 = 0.5
    assert not outlook(10.0, 0.0, history, TTL, keep_above=0.75).keep


def test_numbers_round_trip_for_the_status_condition() -> None:
    look = outlook(1_000.0, 990.0, gaps(3_000, 5_000, 200, 4_000), TTL)
    back = Outlook.from_numbers({**look.numbers(), "other": 1.0})
    assert back == look and back is not None and back.message == look.message
    assert Outlook.from_numbers({}) is None


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"ttl_s": 0.0}, "ttl_s"), ({"min_gaps": 0}, "min_gaps"), ({"keep_above": 0.0}, "keep_above")],
)
def test_bad_arguments_name_the_field(kwargs: dict[str, float], field: str) -> None:
    args: dict[str, float] = {"ttl_s": TTL, **kwargs}
    ttl = args.pop("ttl_s")
    with pytest.raises(ConfigError, match=f"^{field}: value"):
        outlook(0.0, 0.0, (), ttl, **args)  # type: ignore[arg-type]
