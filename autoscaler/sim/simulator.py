"""The simulation loop: trace -> router -> replicas; metrics as scraped; policy -> cluster.

Time advances in 1 s ticks (the finest scrape interval of any setup); inside a tick every
request is routed at its own arrival time and replicas run the exact step model. At each
tick the cluster's vLLM metrics are recorded as a scrape would see them; a policy polls
every ``poll_interval_s`` and sees the latest scrape at or before ``now - lag``, with
windowed rates and histogram quantiles computed from counter deltas (as PromQL would).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from autoscaler.domain import Forecast, Observation
from autoscaler.errors import ConfigError
from autoscaler.sim.cluster import Cluster, ClusterConfig, Pod, PodState
from autoscaler.sim.replica import (
    ITL_BUCKETS_S,
    TTFT_BUCKETS_S,
    HardwareProfile,
    Replica,
)
from autoscaler.sim.traces import Trace

TICK_S = 1.0
TAIL_CAP_S = 1800.0  # after the last arrival, give in-flight requests this long


@dataclass(frozen=True, slots=True)
class ScrapeModel:
    """How a setup reads metrics: scrape period, extra lag, rate/quantile window."""

    interval_s: float = 1.0
    lag_s: float = 0.0
    window_s: float = 60.0


class MetricsHistory:
    """Per-tick cluster metrics (what Prometheus would store from scraping the pods)."""

    def __init__(self) -> None:
        self.t: list[float] = []
        self.ready: list[int] = []
        self.waiting: list[float] = []
        self.running: list[float] = []
        self.kv_mean: list[float] = []
        self.kv_max: list[float] = []
        self.busy_s: list[float] = []
        self.arrivals: list[float] = []
        self.prompt_tokens: list[float] = []
        self.gen_tokens: list[float] = []
        self.preemptions: list[float] = []
        self.ttft_hist: list[tuple[int, ...]] = []
        self.itl_hist: list[tuple[int, ...]] = []

    def index_at(self, t: float) -> int | None:
        """Index of the last record at or before ``t`` (records are 1 s apart from 1 s)."""
        i = math.floor(t / TICK_S + 1e-9) - 1
        if i < 0 or not self.t:
            return None
        return min(i, len(self.t) - 1)


def _hist_quantile(q: float, bounds: tuple[float, ...], counts: np.ndarray) -> float | None:
    """PromQL ``histogram_quantile`` over non-cumulative bucket counts (+Inf last)."""
    total = float(counts.sum())
    if total <= 0:
        return None
    rank = q * total
    cum = np.cumsum(counts)
    b = int(np.searchsorted(cum, rank, side="left"))
    if b >= len(bounds):
        return bounds[-1]
    lower = bounds[b - 1] if b > 0 else 0.0
    prev = float(cum[b - 1]) if b > 0 else 0.0
    in_bucket = float(counts[b])
    if in_bucket <= 0:
        return bounds[b]
    return lower + (bounds[b] - lower) * (rank - prev) / in_bucket


class SimView:
    """What a policy may look at: scraped metrics (lagged) and the cluster's Kubernetes view."""

    def __init__(self, history: MetricsHistory, cluster: Cluster) -> None:
        self.history = history
        self.cluster = cluster

    def signals(self, now: float, scrape: ScrapeModel) -> tuple[dict[str, float], int]:
        """Canonical signals from the latest scrape visible at ``now``; (signals, pods)."""
        h = self.history
        seen_t = math.floor((now - scrape.lag_s) / scrape.interval_s + 1e-9) * scrape.interval_s
        i = h.index_at(seen_t)
        if i is None:
            return {}, 0
        out: dict[str, float] = {}
        ready = h.ready[i]
        if ready > 0:
            out["waiting"] = h.waiting[i]
            out["running"] = h.running[i]
            out["kv_cache_usage"] = h.kv_mean[i]
            out["kv_cache_usage_max"] = h.kv_max[i]
        j = h.index_at(h.t[i] - scrape.window_s)
        if j is not None and j < i:
            span = h.t[i] - h.t[j]
            out["arrival_rate_per_s"] = (h.arrivals[i] - h.arrivals[j]) / span
            out["prompt_tokens_per_s"] = (h.prompt_tokens[i] - h.prompt_tokens[j]) / span
            out["generation_tokens_per_s"] = (h.gen_tokens[i] - h.gen_tokens[j]) / span
            out["preemptions_per_s"] = (h.preemptions[i] - h.preemptions[j]) / span
            ttft = np.subtract(h.ttft_hist[i], h.ttft_hist[j])
            for q, name in ((0.5, "ttft_p50_s"), (0.95, "ttft_p95_s"), (0.99, "ttft_p99_s")):
                v = _hist_quantile(q, TTFT_BUCKETS_S, ttft)
                if v is not None:
                    out[name] = v
            itl = _hist_quantile(0.95, ITL_BUCKETS_S, np.subtract(h.itl_hist[i], h.itl_hist[j]))
            if itl is not None:
                out["itl_p95_s"] = itl
        return out, ready

    def gpu_utilization(self, now: float, scrape: ScrapeModel) -> float | None:
        """DCGM-style busy fraction per ready pod over the scrape window (None if no pods)."""
        h = self.history
        i = h.index_at(now - scrape.lag_s)
        if i is None:
            return None
        j = h.index_at(h.t[i] - scrape.window_s)
        if j is None or j >= i:
            return None
        pods = float(np.mean(h.ready[j + 1 : i + 1]))
        if pods <= 0:
            return None
        return min(1.0, (h.busy_s[i] - h.busy_s[j]) / ((h.t[i] - h.t[j]) * pods))

    def observe(
        self, now: float, scrape: ScrapeModel, forecast: Forecast | None = None
    ) -> Observation:
        signals, _ = self.signals(now, scrape)
        c = self.cluster
        return Observation(
            t=now,
            current_replicas=c.spec_replicas,
            ready_replicas=len(c.ready),
            signals=signals,
            pods_read=None,
            pending_replicas=c.pending_count(),
            forecast=forecast,
        )


class Autoscaler(Protocol):
    """A policy under test: polled every ``poll_interval_s`` (whole seconds)."""

    name: str
    poll_interval_s: float

    def initial_replicas(self) -> int: ...

    def warm_pool_size(self, now: float, view: SimView) -> int | None:
        """Pause pods wanted now (None: keep the cluster's configured pool)."""
        ...

    def desired(self, now: float, view: SimView) -> int: ...


@dataclass(slots=True)
class SimResult:
    """Per-request outcomes plus the time series the plot and the report need."""

    policy: str
    trace: str
    slo_ttft_s: float
    price_per_gpu_hour: float
    ttft_s: np.ndarray  # inf for dropped and rejected requests
    arrival_s: np.ndarray
    itl_samples: list[tuple[float, int]]
    gpu_hours: float
    dropped: int
    scale_events: int
    max_replicas: int
    end_s: float
    preemptions: int
    cold_start_s: list[float]
    timeline_t: list[float] = field(default_factory=list)
    timeline_spec: list[int] = field(default_factory=list)
    timeline_ready: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    # refused at admission (over max_model_len or the KV cache): vLLM's HTTP 400
    rejected: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    # admitted requests whose TTFT alone on an idle replica already exceeds the SLO
    infeasible: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    stopped_early: bool = False  # `stop_at_s` / `miss_budget` cut the run short

    def summary(self) -> dict[str, Any]:
        """The per-policy JSON row (fields documented in docs/simulator.md)."""
        served = self.ttft_s[np.isfinite(self.ttft_s)]
        n = len(self.ttft_s)
        rejected = self.rejected if len(self.rejected) == n else np.zeros(n, dtype=bool)
        infeasible = self.infeasible if len(self.infeasible) == n else np.zeros(n, dtype=bool)
        met = self.ttft_s <= self.slo_ttft_s
        admitted = n - int(rejected.sum())
        ok = int(np.count_nonzero(met))
        feasible = ~rejected & ~infeasible
        n_feasible = int(feasible.sum())
        ok_feasible = int(np.count_nonzero(met & feasible))
        itl_p99 = _weighted_quantile(self.itl_samples, 0.99)
        cs = np.asarray(self.cold_start_s) if self.cold_start_s else None
        return {
            "policy": self.policy,
            "trace": self.trace,
            "gpu_hours": round(self.gpu_hours, 4),
            "cost_usd": round(self.gpu_hours * self.price_per_gpu_hour, 2),
            "requests": n,
            "rejected": n - admitted,
            "slo_ttft_s": self.slo_ttft_s,
            "slo_attainment": round(ok / admitted, 5) if admitted else None,
            "slo_misses": admitted - ok,
            "slo_feasible_share": round(n_feasible / admitted, 5) if admitted else None,
            "slo_attainment_feasible": (round(ok_feasible / n_feasible, 5) if n_feasible else None),
            "ttft_p50_s": _q(served, 0.50),
            "ttft_p99_s": _q(served, 0.99),
            "itl_p99_s": None if itl_p99 is None else round(itl_p99, 5),
            "dropped": self.dropped,
            "scale_events": self.scale_events,
            "max_replicas": self.max_replicas,
            "preemptions": self.preemptions,
            "cold_start_p50_s": None if cs is None else round(float(np.median(cs)), 1),
            "sim_end_s": round(self.end_s, 1),
            "wall_s": round(self.wall_s, 3),
        }


def _q(a: np.ndarray, q: float) -> float | None:
    return round(float(np.quantile(a, q)), 5) if len(a) else None


def _weighted_quantile(samples: list[tuple[float, int]], q: float) -> float | None:
    if not samples:
        return None
    arr = np.asarray(samples, dtype=np.float64)
    order = np.argsort(arr[:, 0], kind="stable")
    d, w = arr[order, 0], arr[order, 1]
    cum = np.cumsum(w)
    k = int(np.searchsorted(cum, q * cum[-1], side="left"))
    return float(d[min(k, len(d) - 1)])


def admission(
    trace: Trace, profile: HardwareProfile, slo_ttft_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """(rejected, infeasible) masks: refused like vLLM (over ``max_model_len`` or the KV
    cache), and admitted but over the SLO even alone on an idle replica (no policy can
    serve those in time). Idle TTFTs are computed once per distinct prompt length."""
    prompt = trace.prompt_tokens
    output = trace.output_tokens
    total = prompt + output
    rejected = (total > profile.max_model_len) | (total > profile.kv_capacity_tokens)
    uniq, inv = np.unique(prompt, return_inverse=True)
    idle = np.array([profile.idle_ttft_s(int(p)) for p in uniq], dtype=np.float64)[inv]
    infeasible = ~rejected & (idle > slo_ttft_s)
    return rejected, infeasible


class _Totals:
    """Busy seconds and ITL samples of deleted pods, so the cluster's busy counter stays
    monotone across pod churn (the integer counters are the cluster's `CounterSink`)."""

    def __init__(self) -> None:
        self.busy_s = 0.0
        self.itl_samples: list[tuple[float, int]] = []
        self.retired: set[int] = set()

    def retire(self, pod: Pod) -> None:
        r = pod.replica
        if r is None or pod.pid in self.retired:
            return
        self.retired.add(pod.pid)
        self.busy_s += r.busy_s
        self.itl_samples.extend(r.itl_samples)


def simulate(
    trace: Trace,
    policy: Autoscaler,
    config: ClusterConfig,
    *,
    slo_ttft_s: float = 0.5,
    seed: int = 0,
    max_replicas_cap: int = 10_000,
    progress: Callable[[float], None] | None = None,
    timeline_every_s: float = 10.0,
    stop_at_s: float | None = None,
    miss_budget: int | None = None,
) -> SimResult:
    """Replay ``trace`` against ``policy`` on a fresh cluster; deterministic under ``seed``.

    Two early stops for searches that only need part of the answer (the result then has
    ``stopped_early`` set and only its per-request TTFTs up to the stop are meaningful):
    ``stop_at_s`` ends the run at that simulated second (requests without a first token
    by then keep TTFT inf: the oracle's windows only need to know who met the SLO), and
    ``miss_budget`` ends it as soon as more admitted requests than that have certainly
    missed the SLO (static sizing only needs to know the fleet failed)."""
    import time as _time

    if policy.poll_interval_s < TICK_S or not float(policy.poll_interval_s).is_integer():
        raise ConfigError(
            f"{policy.name}: poll_interval_s value {policy.poll_interval_s} must be a whole "
            "number of seconds >= 1"
        )
    wall0 = _time.perf_counter()
    rng = np.random.default_rng(seed)
    cluster = Cluster(config, rng)
    history = MetricsHistory()
    view = SimView(history, cluster)
    totals = _Totals()

    n = len(trace)
    arrival = trace.arrival_s
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    arr_list = arrival.tolist()
    ttft = np.full(n, np.inf)
    done = np.zeros(n, dtype=bool)
    rejected, infeasible = admission(trace, config.profile, slo_ttft_s)
    rejected_l = rejected.tolist()
    dropped_ids: set[int] = set()
    refused_ids: set[int] = set()
    n_done = 0
    router_q: deque[int] = deque()

    cluster.reconcile_warm_pool(config.warm_pool_size, 0.0)
    initial = min(max(0, policy.initial_replicas()), max_replicas_cap)
    cluster.scale_to(initial, 0.0)
    for pod in cluster.live:  # the trace starts on an already running Deployment
        pod.ready_t = 0.0
        pod.created_t = 0.0
    cluster.tick(0.0)
    cluster.scale_events = 0
    max_replicas = cluster.spec_replicas
    poll = int(policy.poll_interval_s)
    last_arrival = float(arrival[-1]) if n else 0.0
    end_cap = last_arrival + TAIL_CAP_S
    timeline_t: list[float] = []
    timeline_spec: list[int] = []
    timeline_ready: list[int] = []
    tl_every = max(1, int(timeline_every_s))
    report_every = max(1, int(max(last_arrival, 1.0) / 20))
    i = 0
    k = 0
    rr = 0
    stopped_early = False
    check_every = 10  # ticks between miss-budget checks
    counted = ~rejected

    def route(rid: int, now: float) -> bool:
        nonlocal rr
        ready = cluster.ready
        m = len(ready)
        if not m:
            return False
        # Join-the-shortest-queue on the gateway's in-flight counts; ties rotate: the
        # first least-loaded pod from position rr (mod m).
        if m == 1:
            best = ready[0].replica
        else:
            loads = [p.replica.load for p in ready]  # type: ignore[union-attr]
            start = rr % m
            rotated = loads[start:] + loads[:start]
            best = ready[(start + rotated.index(min(rotated))) % m].replica
        rr += 1
        assert best is not None
        best.run_until(now)
        if not best.add_request(rid, prompt[rid], output[rid], now):
            refused_ids.add(rid)  # `admission` refuses these first; kept as a guard
        return True

    def collect(rep: Replica) -> None:
        nonlocal n_done
        ev = rep.events
        if not ev.first_tokens and not ev.finished:
            return
        ev = rep.drain_events()
        for rid, t in ev.first_tokens:
            ttft[rid] = t - arr_list[rid]
        for rid, _t in ev.finished:
            if not done[rid]:
                done[rid] = True
                n_done += 1

    def certain_misses(now: float) -> int:
        # Admitted requests that arrived over an SLO ago and have no first token within
        # it: whatever happens next, they missed.
        cut = int(np.searchsorted(arrival, now - slo_ttft_s, side="left"))
        return int(np.count_nonzero(ttft[:cut][counted[:cut]] > slo_ttft_s))

    while True:
        k += 1
        now = k * TICK_S
        while i < n and arr_list[i] < now:
            if rejected_l[i]:
                pass  # the API server answers 400 at once; no replica sees it
            elif router_q or not route(i, arr_list[i]):
                router_q.append(i)
            i += 1
        for pod in cluster.live:
            if pod.replica is not None:
                pod.replica.run_until(now)
                collect(pod.replica)
        before = [p for p in cluster.live if p.replica is not None]
        for rid in cluster.tick(now):
            dropped_ids.add(rid)
        for pod in before:
            if pod.state is PodState.DELETED:
                collect(pod.replica)  # type: ignore[arg-type]
                totals.retire(pod)
        while router_q:
            rid = router_q[0]
            if now - arr_list[rid] > config.router_timeout_s:
                router_q.popleft()
                dropped_ids.add(rid)
                continue
            if not route(rid, now):
                break
            router_q.popleft()
        _record(history, cluster, totals, now, i)
        if k % poll == 0:
            want = policy.desired(now, view)
            want = max(0, min(int(want), max_replicas_cap))
            cluster.scale_to(want, now)
            max_replicas = max(max_replicas, cluster.spec_replicas)
            pool = policy.warm_pool_size(now, view)
            cluster.reconcile_warm_pool(
                config.warm_pool_size if pool is None else max(0, pool), now
            )
        if k % tl_every == 0:
            timeline_t.append(now)
            timeline_spec.append(cluster.spec_replicas)
            timeline_ready.append(len(cluster.ready))
        if progress is not None and k % report_every == 0:
            progress(min(1.0, now / max(last_arrival, 1.0)))
        if (
            i >= n
            and not router_q
            and all(p.replica is None or p.replica.idle for p in cluster.live)
        ):
            break
        if now >= end_cap:
            break
        if stop_at_s is not None and now >= stop_at_s:
            stopped_early = True
            break
        if miss_budget is not None and k % check_every == 0 and certain_misses(now) > miss_budget:
            stopped_early = True
            break
    end = now
    for pod in list(cluster.live):
        rep = pod.replica
        if rep is not None:
            for rid in rep.in_flight_ids():
                if not done[rid]:
                    dropped_ids.add(rid)
        totals.retire(pod)
    dropped_ids.update(router_q)
    for rid in dropped_ids:
        if not done[rid] and not stopped_early:  # cut short: in flight is not dropped
            ttft[rid] = np.inf
    dropped_ids -= refused_ids
    dropped = int(sum(1 for rid in dropped_ids if not done[rid]))
    if refused_ids:
        rejected = rejected.copy()
        rejected[list(refused_ids)] = True
        infeasible[list(refused_ids)] = False
    return SimResult(
        policy=policy.name,
        trace=trace.name,
        slo_ttft_s=slo_ttft_s,
        price_per_gpu_hour=config.price_per_gpu_hour,
        ttft_s=ttft,
        arrival_s=arrival,
        itl_samples=totals.itl_samples,
        gpu_hours=cluster.gpu_hours(end),
        dropped=dropped,
        scale_events=cluster.scale_events,
        max_replicas=max_replicas,
        end_s=end,
        preemptions=cluster.counters.preemptions,
        cold_start_s=[c for c in cluster.cold_start_samples if c > 0],
        timeline_t=timeline_t,
        timeline_spec=timeline_spec,
        timeline_ready=timeline_ready,
        wall_s=_time.perf_counter() - wall0,
        rejected=rejected,
        infeasible=infeasible,
        stopped_early=stopped_early,
    )


def _record(
    h: MetricsHistory, cluster: Cluster, totals: _Totals, now: float, arrivals: int
) -> None:
    waiting = running = 0
    kv_sum = kv_max = 0.0
    ready = cluster.ready
    for pod in ready:
        r = pod.replica
        assert r is not None
        waiting += r.num_waiting
        running += r.num_running
        kv = r.kv_usage()
        kv_sum += kv
        if kv > kv_max:
            kv_max = kv
    busy = totals.busy_s
    for pod in cluster.live:
        r = pod.replica
        if r is not None:
            busy += r.busy_s
    c = cluster.counters
    h.t.append(now)
    h.ready.append(len(ready))
    h.waiting.append(float(waiting))
    h.running.append(float(running))
    h.kv_mean.append(kv_sum / len(ready) if ready else 0.0)
    h.kv_max.append(kv_max)
    h.busy_s.append(busy)
    h.arrivals.append(float(arrivals))
    h.prompt_tokens.append(float(c.prompt_tokens))
    h.gen_tokens.append(float(c.generation_tokens))
    h.preemptions.append(float(c.preemptions))
    h.ttft_hist.append(tuple(c.ttft_counts))
    h.itl_hist.append(tuple(c.itl_counts))
