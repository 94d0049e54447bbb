"""Compact per-target histories read back exactly what was published, bounded."""

from __future__ import annotations

import random
from dataclasses import replace
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


def test_a_value_float32_cannot_hold_exactly_widens_its_column_and_reads_back_exact() -> None:
    ring = ObservationRing(4)
    values = [42.0, 0.1, 1e300, -0.0, 1e-45, 2.0**-149, 3.0]
    published = []
    for t, v in enumerate(values):
        o = obs(t, {"running": 42.0, "odd": v})
        ring.append(o)
        published.append(o)
        assert ring[-1] == o and ring[-1].signals["odd"] == v
    assert list(ring) == published[-4:]
    assert ring._signals.cols["running"].typecode == "f"  # integral values stay 4 bytes
    assert ring._signals.cols["odd"].typecode == "d"


def test_decisions_with_large_replica_counts_and_fractional_values_read_back_exact() -> None:
    history = DecisionHistory(maxlen=3)
    appended = []
    for t, (replicas, value) in enumerate([(8, 336.0), (300, 0.1), (70_000, 1e-300), (9, 7.5)]):
        metric = MetricRecommendation("running", "AverageValue", 42.0, value, replicas, None, None)
        d = Decision(t, replicas, replicas + 1, Reason.SCALE_UP, "up", True, (metric,), {})
        history.append(d)
        appended.append(d)
        assert history[-1] == d
    assert list(history) == [replace(d, numbers={}) for d in appended[1:3]] + [appended[3]]


def test_random_histories_read_back_what_was_appended() -> None:
    rng = random.Random(7)
    signals = ["running", "waiting", "ttft_p95_s", "arrival_rate_per_s"]

    def number() -> float:
        return rng.choice([float(rng.randint(0, 500)), rng.random() * 1e3, rng.random(), 0.0])

    ring = ObservationRing(50)
    history = DecisionHistory(40)
    observed: list[Observation] = []
    decided: list[Decision] = []
    for t in range(300):
        f = None
        if rng.random() < 0.8:
            f = Forecast(
                rng.choice([90.0, 61.5]),
                MappingProxyType({s: number() for s in signals if rng.random() < 0.7}),
                rng.choice(["holt", "auto:seasonal"]),
                MappingProxyType({s: number() for s in signals if rng.random() < 0.3}),
            )
        o = Observation(
            t=float(t) + rng.random(),
            current_replicas=rng.randint(0, 300),
            ready_replicas=rng.randint(0, 300),
            signals={s: number() for s in signals if rng.random() < 0.9},
            pods_read=rng.choice([None, rng.randint(0, 300)]),
            pending_replicas=rng.randint(0, 3),
            capacity_max_replicas=rng.choice([None, 2**20]),
            forecast=f,
        )
        ring.append(o)
        observed.append(o)
        metrics = tuple(
            MetricRecommendation(
                s,
                rng.choice(["AverageValue", "Value"]),
                rng.choice([42.0, 0.5]),
                rng.choice([None, number()]),
                rng.choice([None, rng.randint(0, 400)]),
                rng.choice([None, number()]),
                rng.choice([None, rng.randint(0, 400)]),
                rng.random() < 0.5,
                rng.random() < 0.5,
            )
            for s in signals[: rng.randint(0, 3)]
        )
        current, desired = rng.randint(0, 200), rng.randint(0, 200)
        d = Decision(
            t=o.t,
            current_replicas=current,
            desired_replicas=desired,
            reason=rng.choice(list(Reason)),
            message=f"hold; running={rng.randint(0, 9)}",
            active=rng.random() < 0.5,
            metrics=metrics,
            numbers={"x": number()},
            limits=tuple(rng.sample(list(Reason), rng.randint(0, 2))),
            panic=rng.random() < 0.1,
        )
        history.append(d)
        decided.append(d)
    assert list(ring) == observed[-50:]
    kept = decided[-40:]
    want = [
        d
        if (i == len(kept) - 1 or d.current_replicas != d.desired_replicas)
        else replace(d, numbers={})
        for i, d in enumerate(kept)
    ]
    assert list(history) == want
