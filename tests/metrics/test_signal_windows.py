"""The compact per-pod windows against a straightforward reference that keeps every scrape.

Random histories of a few pods: scrape intervals from 0.5 s to 8 s, counter resets,
histogram restarts and bucket-layout changes, counters and histograms disappearing and
coming back. With ``resolution_s=0`` (every scrape kept) rates, bucket increases and
quantiles equal the reference's; at the default resolution each one equals the
reference's measured from some scrape at most ``window_s / WINDOW_POINTS`` after the
window's (or the family's) first scrape, to the newest scrape.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import pytest

from autoscaler.metrics.engines import EngineSnapshot
from autoscaler.metrics.exposition import HistogramData
from autoscaler.metrics.signals import (
    QUANTILES,
    RATES,
    WINDOW_POINTS,
    PodHistory,
    aggregate,
    histogram_quantile,
    observe,
    pod_bucket_increases,
    pod_rates,
)

INF = math.inf
WINDOW_S = 60.0
COUNTERS = ("requests", "prompt_tokens", "generation_tokens", "preemptions")
LAYOUTS = ((0.1, 0.5, 1.0, INF), (0.1, 0.25, 0.5, 1.0, INF), (0.05, 0.5, 2.0, INF))


@dataclass
class Sample:
    t: float
    counters: dict[str, float]
    hists: dict[str, dict[float, float]]  # cumulative count by bound
    gauges: dict[str, float]

    def snapshot(self) -> EngineSnapshot:
        hists = {k: HistogramData(tuple(h), tuple(h.values())) for k, h in self.hists.items()}
        return EngineSnapshot("vllm", dict(self.gauges), dict(self.counters), hists)


class RandomPod:
    """A pod's page over time: integer counts, so sums are exact in floats."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.t = rng.uniform(0, 5)
        self.counters: dict[str, float] = {k: float(rng.randint(0, 10**6)) for k in COUNTERS}
        self.buckets: dict[str, tuple[tuple[float, ...], list[float]]] = {
            k: (LAYOUTS[0], [float(rng.randint(0, 50)) for _ in LAYOUTS[0]])
            for k in ("ttft", "itl")
        }

    def step(self) -> Sample:
        rng = self.rng
        self.t += rng.choice((0.5, 1.0, 1.0, 1.0, 1.0, 2.0, 3.7, 8.0))
        for key in COUNTERS:
            roll = rng.random()
            if roll < 0.03 and key in self.counters:
                del self.counters[key]  # the family disappears from the page
            elif roll < 0.06 and key not in self.counters:
                self.counters[key] = float(rng.randint(0, 1000))  # and comes back
            elif key in self.counters:
                if roll < 0.09:
                    self.counters[key] = float(rng.randint(0, 20))  # the pod restarted
                else:
                    self.counters[key] += rng.randint(0, 50)
        for key in ("ttft", "itl"):
            roll = rng.random()
            if roll < 0.02 and key in self.buckets:
                del self.buckets[key]
            elif roll < 0.05 and key not in self.buckets:
                self.buckets[key] = (LAYOUTS[0], [0.0] * len(LAYOUTS[0]))
            elif key in self.buckets:
                bounds, counts = self.buckets[key]
                if roll < 0.07:  # restart with another layout
                    bounds = rng.choice(LAYOUTS)
                    counts = [0.0] * len(bounds)
                elif roll < 0.09:  # restart, same layout
                    counts = [0.0] * len(bounds)
                for _ in range(rng.randint(0, 8)):
                    counts[rng.randrange(len(counts))] += 1
                self.buckets[key] = (bounds, counts)
        hists: dict[str, dict[float, float]] = {}
        for key, (bounds, counts) in self.buckets.items():
            running, cumulative = 0.0, {}
            for b, c in zip(bounds, counts, strict=True):
                running += c
                cumulative[b] = running
            hists[key] = cumulative
        gauges = {"waiting": float(self.rng.randint(0, 9))}
        return Sample(self.t, dict(self.counters), hists, gauges)


# -- the reference: every scrape kept, PromQL-style sums of pairwise increases --------------


def _run(samples: Sequence[Sample], has: str, not_before: float) -> list[Sample]:
    """The newest unbroken run of samples holding family ``has``, inside the window."""
    run: list[Sample] = []
    for s in reversed(samples):
        if has not in s.counters and has not in s.hists:
            break
        run.append(s)
    now = samples[-1].t
    return [s for s in reversed(run) if s.t >= max(now - WINDOW_S, not_before)]


def ref_rate(samples: Sequence[Sample], key: str, not_before: float = -INF) -> float | None:
    run = _run(samples, key, not_before)
    if len(run) < 2:
        return None
    increase = 0.0
    for prev, cur in pairwise(run):
        a, b = prev.counters[key], cur.counters[key]
        increase += b - a if b >= a else b
    return increase / (run[-1].t - run[0].t)


def ref_increases(
    samples: Sequence[Sample], key: str, not_before: float = -INF
) -> dict[float, float] | None:
    run = _run(samples, key, not_before)
    if len(run) < 2:
        return None
    total: dict[float, float] = {}
    for prev, cur in pairwise(run):
        a, b = prev.hists[key], cur.hists[key]
        restart = a.keys() != b.keys() or any(b[le] < a[le] for le in b)
        total = {le: total.get(le, 0.0) + (c if restart else c - a[le]) for le, c in b.items()}
    return total


def ref_first_t(samples: Sequence[Sample], key: str) -> float | None:
    """The family's first scrape inside the window (of its newest unbroken run)."""
    run = _run(samples, key, -INF)
    return run[0].t if run else None


def combine(
    gauges: Sequence[Mapping[str, float]],
    rates: Sequence[Mapping[str, float]],
    increases: Sequence[Mapping[str, Mapping[float, float]]],
) -> dict[str, float]:
    """Target signals from per-pod numbers, the obvious way."""
    out: dict[str, float] = {}
    waiting = [g["waiting"] for g in gauges if "waiting" in g]
    if waiting:
        out["waiting"] = float(sum(waiting))
    for signal, key in RATES:
        values = [r[key] for r in rates if key in r]
        if values:
            out[signal] = sum(values)
    for signal, key, q in QUANTILES:
        merged: dict[float, float] = {}
        for inc in increases:
            for le, c in inc.get(key, {}).items():
                merged[le] = merged.get(le, 0.0) + c
        value = histogram_quantile(q, merged) if merged else None
        if value is not None:
            out[signal] = value
    return out


def ref_aggregate(pods: Sequence[Sequence[Sample]]) -> dict[str, float]:
    rates = [
        {k: r for k in COUNTERS if (r := ref_rate(s, k)) is not None} for s in pods if len(s) > 0
    ]
    increases = [
        {k: i for k in ("ttft", "itl") if (i := ref_increases(s, k)) is not None} for s in pods
    ]
    return combine([s[-1].gauges for s in pods], rates, increases)


def close(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def close_dicts(a: Mapping[float, float] | None, b: Mapping[float, float] | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)


def simulate(
    seed: int, pods: int, steps: int, resolution_s: float | None
) -> Iterator[tuple[list[PodHistory], list[list[Sample]]]]:
    """Yield, after every scrape of every pod, the histories and every sample so far."""
    rng = random.Random(seed)
    sources = [RandomPod(rng) for _ in range(pods)]
    samples: list[list[Sample]] = [[] for _ in range(pods)]
    histories: list[PodHistory | None] = [None] * pods
    for _ in range(steps):
        for i, source in enumerate(sources):
            sample = source.step()
            samples[i].append(sample)
            histories[i] = observe(
                histories[i], sample.snapshot(), sample.t, WINDOW_S, resolution_s
            )
        yield [h for h in histories if h is not None], samples


@pytest.mark.parametrize("seed", range(12))
def test_keeping_every_scrape_matches_the_reference_exactly(seed: int) -> None:
    for histories, samples in simulate(seed, pods=3, steps=200, resolution_s=0):
        for h, s in zip(histories, samples, strict=True):
            rates = pod_rates(h)
            for key in COUNTERS:
                assert close(rates.get(key), ref_rate(s, key)), (key, s[-1].t)
            increases = pod_bucket_increases(h)
            for key in ("ttft", "itl"):
                assert close_dicts(increases.get(key), ref_increases(s, key)), (key, s[-1].t)
        got, want = aggregate(histories), ref_aggregate(samples)
        assert got.keys() == want.keys() and all(close(got[k], want[k]) for k in got)


def _matches_a_late_start(
    got: object, samples: Sequence[Sample], key: str, measure: object, resolution_s: float
) -> bool:
    """``got`` is the reference measured from some scrape at most resolution_s after the
    family's first scrape in the window (absent only when that leaves the newest alone)."""
    first = ref_first_t(samples, key)
    if first is None:
        return got is None
    starts = [s.t for s in samples if first <= s.t <= first + resolution_s]
    compare = close if key in COUNTERS else close_dicts
    if got is None:
        return measure(samples, key) is None or samples[-1].t - first <= resolution_s  # type: ignore[operator]
    return any(compare(got, measure(samples, key, t)) for t in starts)  # type: ignore[operator]


@pytest.mark.parametrize("seed", range(12))
def test_coarse_windows_match_the_reference_with_a_start_at_most_one_resolution_late(
    seed: int,
) -> None:
    resolution_s = WINDOW_S / WINDOW_POINTS
    for histories, samples in simulate(seed, pods=3, steps=200, resolution_s=None):
        rates_by_pod, increases_by_pod = [], []
        for h, s in zip(histories, samples, strict=True):
            rates, increases = pod_rates(h), pod_bucket_increases(h)
            for key in COUNTERS:
                assert _matches_a_late_start(rates.get(key), s, key, ref_rate, resolution_s)
            for key in ("ttft", "itl"):
                assert _matches_a_late_start(
                    increases.get(key), s, key, ref_increases, resolution_s
                )
            rates_by_pod.append(rates)
            increases_by_pod.append(increases)
        # the fast path of aggregate computes the same as the per-pod functions
        got = aggregate(histories)
        want = combine([s[-1].gauges for s in samples], rates_by_pod, increases_by_pod)
        assert got.keys() == want.keys() and all(close(got[k], want[k]) for k in got)


def vllm_like(t: float) -> EngineSnapshot:
    """A steady pod: 10 requests/s, ttft all in (0.1, 0.5]."""
    n = 10.0 * t
    ttft = HistogramData((0.1, 0.5, 1.0, INF), (0.0, n, n, n))
    return EngineSnapshot("vllm", {"waiting": 1.0}, {"requests": n}, {"ttft": ttft})


def test_one_second_scrapes_keep_about_window_points_rows_and_exact_rates() -> None:
    h = None
    for second in range(600):
        h = observe(h, vllm_like(float(second)), float(second), WINDOW_S)
        assert h is not None and len(h.rows) <= WINDOW_POINTS + 2
        if second >= 1:
            assert aggregate([h])["arrival_rate_per_s"] == pytest.approx(10.0)
    assert h is not None
    # the window's start is at most 5 s late, its end is the newest scrape
    assert 540 <= h.times[0] <= 545 and h.times[-1] == 599


def test_a_second_scrape_gives_a_rate_at_once_even_within_the_resolution() -> None:
    h = observe(None, vllm_like(0.0), 0.0, WINDOW_S)
    h = observe(h, vllm_like(1.0), 1.0, WINDOW_S)
    out = aggregate([h])
    assert out["arrival_rate_per_s"] == pytest.approx(10.0)
    assert 0.1 < out["ttft_p50_s"] < 0.5


def test_a_counter_appearing_mid_window_is_rated_from_its_first_sight() -> None:
    h = observe(None, vllm_like(0.0), 0.0, WINDOW_S)
    h = observe(h, vllm_like(1.0), 1.0, WINDOW_S)
    with_tokens = vllm_like(2.0)
    with_tokens = EngineSnapshot(
        "vllm", {}, {**with_tokens.counters, "prompt_tokens": 1000.0}, with_tokens.histograms
    )
    h = observe(h, with_tokens, 2.0, WINDOW_S)
    assert "prompt_tokens_per_s" not in aggregate([h])  # one scrape of it: no rate, not 0
    more = EngineSnapshot(
        "vllm", {}, {**vllm_like(3.0).counters, "prompt_tokens": 1300.0}, with_tokens.histograms
    )
    h = observe(h, more, 3.0, WINDOW_S)
    out = aggregate([h])
    assert out["prompt_tokens_per_s"] == pytest.approx(300.0)
    assert out["arrival_rate_per_s"] == pytest.approx(10.0)  # the others keep their window


def test_pods_with_different_layouts_merge_by_bound() -> None:
    a = observe(None, vllm_like(0.0), 0.0, WINDOW_S)
    a = observe(a, vllm_like(1.0), 1.0, WINDOW_S)  # 10 in (0.1, 0.5]
    other = (0.1, 0.25, 0.5, 1.0, INF)
    b = observe(
        None, EngineSnapshot("vllm", {}, {}, {"ttft": HistogramData(other, (0,) * 5)}), 0.0, 60
    )
    b = observe(
        b,
        EngineSnapshot("vllm", {}, {}, {"ttft": HistogramData(other, (0, 30, 30, 30, 30))}),
        1.0,
        60,
    )  # 30 in (0.1, 0.25]
    out = aggregate([a, b])
    # merged: 0.1 -> 0, 0.25 -> 30, 0.5 -> 40: p50 (rank 20) lies in (0.1, 0.25]
    assert out["ttft_p50_s"] == pytest.approx(0.1 + 0.15 * 20 / 30)


def test_a_windows_middle_rows_are_kept_packed_and_read_back_bit_for_bit() -> None:
    # fractional counters (a latency sum, token counts / 3): no float32 would hold them
    def page(t: float) -> EngineSnapshot:
        n = 10.0 * t
        ttft = HistogramData((0.1, 0.5, 1.0, INF), (n / 3, n, n, n), n, n * 0.123456789)
        counters = {"requests": n, "prompt_tokens": n * 701 / 3}
        return EngineSnapshot("vllm", {"waiting": 1.0}, counters, {"ttft": ttft})

    h = None
    for second in range(120):
        h = observe(h, page(float(second)), float(second), WINDOW_S)
    assert h is not None
    items = h.rows._items
    assert len(items) > 3 and all(isinstance(r, bytes) for r in items[1:-1])
    assert not isinstance(items[0], bytes) and not isinstance(items[-1], bytes)
    from autoscaler.metrics.signals import _raw

    # no reset: each kept row is that scrape's values as read, bit for bit
    assert [r.tobytes() for r in h.rows] == [_raw(page(t)).tobytes() for t in h.times]
    assert h.rows[len(h.rows) // 2].tobytes() == _raw(page(h.times[len(h.rows) // 2])).tobytes()
    rate = aggregate([h])["prompt_tokens_per_s"]
    first, last = h.times[0], h.times[-1]
    assert rate == (last * 10 * 701 / 3 - first * 10 * 701 / 3) / (last - first)
