"""Compact per-target histories read back exactly what was published, bounded."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from autoscaler.control.history import DecisionHistory, ObservationRing
from autoscaler.domain import Decision, Forecast, MetricRecommendation, Observation, Reason


def obs(t: float, signals: dict[str, float], forecast: Forecast | None = None) -> Observation:
    return Observation(
        t=t,
        current_replicas=3,
        ready_replicas=2,
        signals=signals,
        pods_read=None if t == 2 else 2,
        pending_replicas=1,
        capacity_max_replicas=None if t == 1 else 7,
        forecast=forecast,
    )


def test_observations_read_back_as_published_and_wrap_at_maxlen() -> None:
    f = Forecast(
        60.0, MappingProxyType({"running": 40.5}), "holt", MappingProxyType({"running": 8.0})
    )
    published = [
        obs(1, {"running": 42.0, "waiting": 3.0}, f),
        obs(2, {"running": 41.0}),
        obs(3, {"waiting": 0.0, "ttft_p99": 0.25}),
        obs(4, {}),
    ]
    ring = ObservationRing(3)
    for o in published:
        ring.append(o)
    assert len(ring) == 3 and ring
    assert list(ring) == published[1:]
    assert ring[-1] == published[3] and ring[0] == published[1]
    assert ring[1:] == published[2:]
    with pytest.raises(IndexError):
        ring[3]
    full = ObservationRing(8)
    full.append(published[0])
    assert full[0] == published[0]
    assert full[0].forecast == f


def test_a_signal_absent_from_an_observation_reads_back_absent_not_zero() -> None:
    ring = ObservationRing(4)
    ring.append(obs(1, {"running": 42.0}))
    ring.append(obs(2, {"waiting": 1.0}))
    assert ring[-1].signals == {"waiting": 1.0}
    assert "running" not in ring[-1].signals


def decision(t: float, current: int, desired: int, numbers: dict[str, float]) -> Decision:
    metric = MetricRecommendation("running", "AverageValue", 42.0, 336.0, 8)
    return Decision(
        t=t,
        current_replicas=current,
        desired_replicas=desired,
        reason=Reason.STEADY if current == desired else Reason.SCALE_UP,
        message=f"hold at {current}; running=336 asks for {desired}",
        active=True,
        metrics=(metric,),
        numbers=numbers,
    )


def test_planner_numbers_kept_on_the_newest_decision_and_change_points_only() -> None:
    history = DecisionHistory(maxlen=10)
    history.append(decision(1, 8, 8, {"forecast.horizon_s": 90.0}))
    history.append(decision(2, 8, 9, {"forecast.horizon_s": 91.0}))  # a change point
    history.append(decision(3, 9, 9, {"forecast.horizon_s": 92.0}))
    history.append(decision(4, 9, 9, {"forecast.horizon_s": 93.0}))
    assert [dict(d.numbers) for d in history] == [
        {},
        {"forecast.horizon_s": 91.0},
        {},
        {"forecast.horizon_s": 93.0},
    ]
    assert [d.t for d in history] == [1, 2, 3, 4]
    # A steady target's repeated message is stored once.
    assert history[-1].message is history[-2].message
    assert history[-1].metrics == history[-2].metrics
    assert history[-1] == decision(4, 9, 9, {"forecast.horizon_s": 93.0})


def test_decision_history_is_bounded() -> None:
    history = DecisionHistory(maxlen=3)
    for t in range(5):
        history.append(decision(t, 1, 1, {}))
    assert [d.t for d in history] == [2, 3, 4]
    assert history.maxlen == 3


def test_decisions_read_back_as_appended_with_none_values_limits_and_flags() -> None:
    odd = Decision(
        t=7.25,
        current_replicas=3,
        desired_replicas=5,
        reason=Reason.SCALE_UP,
        message="scale up",
        active=False,
        metrics=(
            MetricRecommendation("running", "AverageValue", 42.0, None, None),
            MetricRecommendation("ttft_p95_s", "Value", 0.5, 0.75, 5, 0.5, 4, True, True),
        ),
        numbers={"demand_replicas": 4.5},
        limits=(Reason.SCALE_UP, Reason.STEADY),
        panic=True,
    )
    plain = decision(8, 5, 5, {})
    history = DecisionHistory(maxlen=4)
    for d in (odd, plain, odd, plain, odd):  # wraps: the oldest slot is reused
        history.append(d)
    assert list(history) == [plain, odd, plain, odd]
    assert history[1:3] == [odd, plain]
    assert history[-1].numbers == {"demand_replicas": 4.5}  # the newest keeps its numbers
    assert history[0].numbers == {}  # a steady one loses them once it is not the newest
    assert history[1].numbers == {"demand_replicas": 4.5}  # a change point keeps them
    with pytest.raises(IndexError):
        history[4]


def test_distinct_messages_are_not_kept_once_their_decisions_are_gone() -> None:
    history = DecisionHistory(maxlen=2)
    for t in range(200):
        message = f"hold at 1; running={t}"
        history.append(Decision(t, 1, 1, Reason.STEADY, message, active=True))
    assert [d.message for d in history] == ["hold at 1; running=198", "hold at 1; running=199"]
    assert len(history._interned) <= 4 * 2 + 64 + 1


def test_a_replica_count_beyond_32_bits_widens_its_column_instead_of_failing() -> None:
    ring = ObservationRing(2)
    ring.append(obs(1, {}))
    big = Observation(t=2, current_replicas=3, ready_replicas=2, capacity_max_replicas=2**40)
    ring.append(big)
    assert ring[-1] == big and ring[0] == obs(1, {})
