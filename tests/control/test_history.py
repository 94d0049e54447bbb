"""Compact per-target histories read back exactly what was published, bounded."""

from __future__ import annotations

import random
from dataclasses import replace
from types import MappingProxyType

import pytest

from autoscaler.control.history import HISTORY_BLOCK, OBS_BLOCK, DecisionHistory, ObservationRing
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
    blocks = history._blocks
    kept = set(blocks.open.messages.values)
    for layout, _ in blocks.sealed:
        kept.update(layout[1])
    assert kept <= {
        "",
        "hold at 1; running=197",
        "hold at 1; running=198",
        "hold at 1; running=199",
    }


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
    assert ring._blocks.open.signals.cols["running"].typecode == "f"  # integral values stay 4 bytes
    assert ring._blocks.open.signals.cols["odd"].typecode == "d"


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


def _odd_observation(rng: random.Random, t: int) -> Observation:
    """Values a compact column must widen for or keep bit for bit: float32-inexact,
    subnormal, huge, negative zero; counts past one byte and past 32 bits; many models."""
    pool = [0.1, 1e300, -0.0, 2.0**-1074, 1e-45, 42.0, 3.5, -7.25, 1 / 3, float(t)]
    signals = {s: rng.choice(pool) for s in ("running", "waiting", "x", "y") if rng.random() < 0.8}
    forecast = None
    if rng.random() < 0.7:
        forecast = Forecast(
            rng.choice([90.0, 0.1, 61.5]),
            MappingProxyType({"running": rng.choice(pool)}),
            rng.choice(["holt", "auto:seasonal", f"model-{t % 70}"]),
            MappingProxyType({"running": rng.choice(pool)} if rng.random() < 0.5 else {}),
        )
    return Observation(
        t=t + rng.choice([0.0, 0.1, 1e-9]),
        current_replicas=rng.choice([0, 8, 300, 70_000]),
        ready_replicas=rng.randint(0, 300),
        signals=signals,
        pods_read=rng.choice([None, 0, 8, 2**40]),
        pending_replicas=rng.randint(0, 3),
        capacity_max_replicas=rng.choice([None, 2**20, 5]),
        forecast=forecast,
    )


def _same(a: Observation, b: Observation) -> bool:
    """Equal, and every float bit for bit (-0.0 is not 0.0)."""
    import struct

    def bits(o: Observation) -> list[bytes]:
        values = [o.t, *(o.signals[k] for k in sorted(o.signals))]
        if o.forecast is not None:
            f = o.forecast
            values += [f.horizon_s, *(f.signals[k] for k in sorted(f.signals))]
            values += [f.capacity_per_replica[k] for k in sorted(f.capacity_per_replica)]
        return [struct.pack("<d", v) for v in values]

    return a == b and bits(a) == bits(b)


@pytest.mark.parametrize("maxlen", [1, 7, OBS_BLOCK, OBS_BLOCK + 1, 2 * OBS_BLOCK + 13, 600])
def test_observations_read_back_bit_for_bit_across_sealed_blocks_and_wraps(maxlen: int) -> None:
    rng = random.Random(maxlen)
    ring = ObservationRing(maxlen)
    published: list[Observation] = []
    for t in range(3 * maxlen + 2 * OBS_BLOCK + 5):
        o = _odd_observation(rng, t)
        ring.append(o)
        published.append(o)
        assert _same(ring[-1], o)  # the newest is always readable
        if t % 97 == 0:
            kept = published[-maxlen:]
            assert len(ring) == len(kept)
            assert all(_same(a, b) for a, b in zip(ring, kept, strict=True))
    kept = published[-maxlen:]
    got = list(ring)
    assert len(got) == maxlen and all(_same(a, b) for a, b in zip(got, kept, strict=True))
    for i in (0, min(1, maxlen - 1), maxlen // 2, maxlen - 1, -1, -maxlen):
        assert _same(ring[i], kept[i])
    assert ring[maxlen // 3 : maxlen - 2 : 5] == kept[maxlen // 3 : maxlen - 2 : 5]
    with pytest.raises(IndexError):
        ring[maxlen]
    with pytest.raises(IndexError):
        ring[-maxlen - 1]
    # bounded: the blocks holding the last maxlen observations and no more
    size = min(OBS_BLOCK, maxlen)
    assert len(ring._blocks.sealed) <= -(-maxlen // size)


def test_a_signal_that_appears_or_goes_between_blocks_reads_back_absent_not_zero() -> None:
    ring = ObservationRing(3 * OBS_BLOCK)
    published = []
    for t in range(3 * OBS_BLOCK):
        signals = {"running": float(t)}
        if OBS_BLOCK // 2 <= t < 2 * OBS_BLOCK:  # only in parts of the first two blocks
            signals["waiting"] = 1.5
        o = Observation(t=float(t), current_replicas=1, ready_replicas=1, signals=signals)
        ring.append(o)
        published.append(o)
    assert list(ring) == published
    assert "waiting" not in ring[0].signals and ring[OBS_BLOCK].signals["waiting"] == 1.5
    assert "waiting" not in ring[-1].signals


def test_a_steady_targets_sealed_observations_take_less_than_their_columns() -> None:
    ring = ObservationRing(600)
    for t in range(600):
        ring.append(
            Observation(
                t=1000.0 + t,
                current_replicas=8,
                ready_replicas=8,
                signals={"running": 336.0 + t % 5, "arrival_rate_per_s": 3.0 + (t % 7) / 10},
                pods_read=8,
            )
        )
    sealed = sum(len(blob) for _, blob in ring._blocks.sealed)
    columns = (
        len(ring._blocks.sealed) * OBS_BLOCK * (8 + 5 + 1 + 4 + 4 + 8)
    )  # t ints model + 3 floats
    assert sealed < columns / 2


@pytest.mark.parametrize("maxlen", [1, 3, HISTORY_BLOCK, HISTORY_BLOCK + 1, 500])
def test_decisions_read_back_across_sealed_blocks_with_numbers_on_change_points(
    maxlen: int,
) -> None:
    rng = random.Random(maxlen)
    history = DecisionHistory(maxlen)
    decided: list[Decision] = []
    for t in range(2 * maxlen + 3 * HISTORY_BLOCK + 7):
        replicas = rng.choice([8, 8, 8, 300, 70_000])
        metric = MetricRecommendation(
            rng.choice(["running", "ttft_p95_s"]),
            "AverageValue",
            rng.choice([42.0, 0.5]),
            rng.choice([None, 0.1, 336.0, -0.0, 1e300]),
            rng.choice([None, replicas]),
            rng.choice([None, 1 / 3]),
            None,
            rng.random() < 0.5,
        )
        d = Decision(
            t=t + 0.25,
            current_replicas=replicas,
            desired_replicas=replicas if rng.random() < 0.8 else replicas + 1,
            reason=rng.choice(list(Reason)),
            message=f"hold; running={t % 3}",
            active=rng.random() < 0.5,
            metrics=(metric,) * rng.randint(0, 2),
            numbers={"x": float(t)},
            limits=tuple(rng.sample(list(Reason), rng.randint(0, 2))),
            panic=rng.random() < 0.1,
        )
        history.append(d)
        decided.append(d)
        assert history[-1] == d  # the newest keeps its numbers
    kept = decided[-maxlen:]
    want = [
        d
        if (i == len(kept) - 1 or d.current_replicas != d.desired_replicas)
        else replace(d, numbers={})
        for i, d in enumerate(kept)
    ]
    assert list(history) == want
    assert history[-maxlen:] == want and history[0] == want[0]
    assert len(history._numbers) <= maxlen  # numbers of dropped decisions are gone
    assert len(history._blocks.sealed) <= -(-maxlen // min(HISTORY_BLOCK, maxlen))
