"""Prefill/decode disaggregation (issue 37): one model served by a prefill pool and a
decode pool, each sized over time by `autoscaler.policy.roles.size_roles`.

Model (docs/simulator.md "Prefill/decode disaggregation"):

- Both pools are `sim/cluster.py` clusters of a `ClusterConfig` (profile, cold-start
  phases, price, drain): a pod is billed from creation, Ready after its sampled cold start,
  drained on scale-down. Each pool has its own nodes and its own seeded random stream. The
  decode pool may run another GPU type (``DisaggConfig.decode_cluster``, for example a MIG
  slice: decode is bound by memory bandwidth, prefill by compute); a request is admitted
  only when both pools' profiles take its context.
- A prefill replica is the `sim/replica.py` engine given only the prompt (one output
  token): chunked prefill, queueing and KV admission as the aggregated replica. Its first
  token ends prefill; the request's KV then moves to the decode pool in
  ``KvTransfer.seconds(prompt)``. TTFT = prefill queue + prefill + transfer (the first
  token reaches the user once its KV has moved).
- A decode replica is the same engine fed KV-ready requests (`Replica.add_request` with
  ``kv_ready``): a request waits until its prompt's KV blocks and a sequence slot are free,
  then joins the decode batch with no prefill work; ITL comes from the batch's step time
  as on the aggregated replica. Its first interval (handoff to next token) includes that
  admission wait. A decode replica that runs out of blocks preempts and recomputes
  locally, as vLLM does.
- Both pools route join-the-shortest-queue on in-flight requests, as the aggregated
  gateway (`sim/simulator.py`); a request no ready pod can take waits at the router (and
  is dropped after ``router_timeout_s``).
- Sizing: every poll, `size_roles` on the pools' scraped signals (prefill: prompt-token
  rate, waiting, TTFT p90; decode: running, mean KV usage, ITL p90; rates and quantiles
  over ``window_s`` from counter deltas, as `SimView`), then per role the HPA behaviour
  of the aggregated ``ours`` policy through `policy.roles.step_role`, as the controller
  applies it (scale-down stabilisation window, scale-up rate policies, the cold-start
  guard). Pods waiting for a node
  (Kubernetes' Pending) are the role's ``pending``.

Not modelled: the prefill replica's blocks held until the transfer completes, transfer
bandwidth contention between requests, prefix caching. Deterministic under ``seed``.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from autoscaler.domain import DecisionState, TimedValue
from autoscaler.errors import ConfigError
from autoscaler.metrics.signals import DEFAULT_WINDOW_S
from autoscaler.policy.behavior import (
    resolve,
)
from autoscaler.policy.profiles import recommended
from autoscaler.policy.roles import RoleSignals, RoleState, RoleTargets, size_roles, step_role
from autoscaler.policy.schema import Behavior
from autoscaler.sim.cluster import Cluster, ClusterConfig, Pod, PodState
from autoscaler.sim.replica import ITL_BUCKETS_S, TTFT_BUCKETS_S, HardwareProfile, Replica
from autoscaler.sim.simulator import (
    TAIL_CAP_S,
    TICK_S,
    MetricsHistory,
    ScrapeModel,
    SimView,
    _hist_quantile,
    _record,
    _Totals,
    admission,
)
from autoscaler.sim.traces import Trace

PREROLL_S = 900.0  # as sim/compare.py: where each deployment enters the trace
PREROLL_PASSES = 3


@dataclass(frozen=True, slots=True)
class KvTransfer:
    """Time to move a prompt's KV from a prefill to a decode replica.

    Defaults: Llama-3-8B BF16 KV is 128 KiB per token (calibration.md section 2); the link
    is an assumption (not in calibration.md): one 200 Gb/s RDMA NIC per GPU at line rate,
    25 GB/s, so 5.2 us per prompt token, plus a fixed 1 ms per request for the handshake.
    """

    bytes_per_token: float = 131_072.0
    bandwidth_bytes_per_s: float = 25e9
    fixed_s: float = 0.001

    def __post_init__(self) -> None:
        if not (self.bytes_per_token >= 0 and math.isfinite(self.bytes_per_token)):
            raise ConfigError(
                f"kv_transfer.bytes_per_token: value {self.bytes_per_token} must be >= 0"
            )
        if not self.bandwidth_bytes_per_s > 0:
            raise ConfigError(
                f"kv_transfer.bandwidth_bytes_per_s: value {self.bandwidth_bytes_per_s} must be > 0"
            )
        if not (self.fixed_s >= 0 and math.isfinite(self.fixed_s)):
            raise ConfigError(f"kv_transfer.fixed_s: value {self.fixed_s} must be >= 0")

    @property
    def s_per_token(self) -> float:
        return self.bytes_per_token / self.bandwidth_bytes_per_s

    def seconds(self, prompt_tokens: int) -> float:
        return self.fixed_s + prompt_tokens * self.s_per_token


NO_TRANSFER = KvTransfer(bytes_per_token=0.0, fixed_s=0.0)


def role_targets(
    profile: HardwareProfile,
    trace: Trace,
    *,
    slo_ttft_s: float,
    slo_itl_s: float,
    prefill_utilisation: float = 0.5,
    decode_utilisation: float = 0.75,
    kv_usage_target: float = 0.8,
    decode_profile: HardwareProfile | None = None,
) -> RoleTargets:
    """Per-replica targets from the step model (offline profiling, as the variants'
    capacities): a prefill replica's prompt tokens/s at the trace's token-weighted mean
    prompt (chunked, attention included) x ``prefill_utilisation``; a decode replica's
    running requests at which a step at the mean decode context still meets the ITL SLO,
    capped by ``max_num_seqs`` and the KV target, x ``decode_utilisation``. The decode
    side uses ``decode_profile`` when the decode pool runs another GPU type."""
    for name, v in (
        ("prefill_utilisation", prefill_utilisation),
        ("decode_utilisation", decode_utilisation),
    ):
        if not 0 < v <= 1:
            raise ConfigError(f"role_targets.{name}: value {v} must be in (0, 1]")
    dprof = profile if decode_profile is None else decode_profile
    if not slo_itl_s * 1000.0 > dprof.t0_ms:
        raise ConfigError(
            f"role_targets.slo_itl_s: value {slo_itl_s} must exceed the decode profile's"
            f" empty step ({dprof.t0_ms} ms on {dprof.name})"
        )
    prompt = trace.prompt_tokens.astype(np.float64)
    output = trace.output_tokens.astype(np.float64)
    if len(prompt) == 0:
        raise ConfigError(f"role_targets: trace {trace.name!r} has no requests")
    mean_prompt = max(1, round(float((prompt * prompt).sum() / prompt.sum())))
    mean_prompt = min(mean_prompt, profile.max_model_len - 1)
    prefill_tps = mean_prompt / profile.idle_ttft_s(mean_prompt)
    ctx = float(np.mean(prompt + output / 2.0))
    per_seq_ms = dprof.alpha_ms_per_seq + dprof.beta_ms_per_1k_ctx * ctx / 1000.0
    by_itl = (slo_itl_s * 1000.0 - dprof.t0_ms) / per_seq_ms
    by_kv = kv_usage_target * dprof.kv_capacity_tokens / max(ctx, 1.0)
    running = max(1.0, min(by_itl, by_kv, float(dprof.max_num_seqs)) * decode_utilisation)
    return RoleTargets(
        prompt_tokens_per_s_per_prefill=prefill_tps * prefill_utilisation,
        running_per_decode=running,
        kv_usage_target=kv_usage_target,
        ttft_slo_s=slo_ttft_s,
        itl_slo_s=slo_itl_s,
    )


@dataclass(frozen=True, slots=True)
class DisaggConfig:
    cluster: ClusterConfig  # the prefill pool, and the decode pool unless decode_cluster
    targets: RoleTargets
    decode_cluster: ClusterConfig | None = None  # the decode pool's GPU type, price
    transfer: KvTransfer = field(default_factory=KvTransfer)
    behavior: Behavior = field(default_factory=lambda: _ours_behavior())
    poll_interval_s: float = 1.0
    window_s: float = DEFAULT_WINDOW_S
    max_replicas_per_role: int = 256

    def __post_init__(self) -> None:
        if self.poll_interval_s < TICK_S or not float(self.poll_interval_s).is_integer():
            raise ConfigError(
                f"disagg.poll_interval_s: value {self.poll_interval_s} must be a whole number"
                " of seconds >= 1"
            )
        if not self.window_s >= TICK_S:
            raise ConfigError(f"disagg.window_s: value {self.window_s} must be >= {TICK_S}")

    @property
    def decode_pool(self) -> ClusterConfig:
        return self.cluster if self.decode_cluster is None else self.decode_cluster


def _ours_behavior() -> Behavior:
    behavior = recommended().behavior
    assert behavior is not None
    return behavior


def _role_state(behavior: Behavior, initial: int) -> DecisionState:
    """A role's behaviour state entering the trace: the deployment ran at ``initial``
    before it (recommendations over the longest window, as sim/policies.py seeds them)."""
    up, down = resolve(behavior)
    keep = max(up.stabilization_window_s, down.stabilization_window_s)
    return DecisionState(
        recommendations=tuple(
            TimedValue(t=-float(k), value=float(initial)) for k in range(keep, -1, -15)
        )
    )


@dataclass(slots=True)
class DisaggResult:
    trace: str
    slo_ttft_s: float
    slo_itl_s: float
    ttft_s: np.ndarray  # inf: dropped; rejected requests are masked by `rejected`
    rejected: np.ndarray
    itl_samples: list[tuple[float, int]]
    gpu_hours_prefill: float
    gpu_hours_decode: float
    dollars_prefill: float
    dollars_decode: float
    dropped: int
    preemptions: int
    max_prefill: int
    max_decode: int
    end_s: float
    timeline_t: list[float] = field(default_factory=list)
    timeline_prefill: list[int] = field(default_factory=list)
    timeline_decode: list[int] = field(default_factory=list)

    @property
    def gpu_hours(self) -> float:
        return self.gpu_hours_prefill + self.gpu_hours_decode

    @property
    def gpu_dollars(self) -> float:
        return self.dollars_prefill + self.dollars_decode

    def summary(self) -> dict[str, Any]:
        admitted = ~self.rejected
        n_adm = int(admitted.sum())
        met = int(np.count_nonzero((self.ttft_s <= self.slo_ttft_s) & admitted))
        return {
            "gpu_hours": round(self.gpu_hours, 4),
            "gpu_hours_prefill": round(self.gpu_hours_prefill, 4),
            "gpu_hours_decode": round(self.gpu_hours_decode, 4),
            "gpu_dollars": round(self.gpu_dollars, 3),
            "requests": len(self.ttft_s),
            "rejected": len(self.ttft_s) - n_adm,
            "ttft_attainment": round(met / n_adm, 5) if n_adm else None,
            "itl_attainment": itl_attainment(self.itl_samples, self.slo_itl_s),
            "dropped": self.dropped,
            "preemptions": self.preemptions,
            "max_prefill": self.max_prefill,
            "max_decode": self.max_decode,
        }


def itl_attainment(samples: list[tuple[float, int]], slo_itl_s: float) -> float | None:
    """Share of generated tokens (after the first) whose interval met ``slo_itl_s``."""
    total = sum(w for _d, w in samples)
    if total <= 0:
        return None
    ok = sum(w for d, w in samples if d <= slo_itl_s)
    return round(ok / total, 5)


def _pending(cluster: Cluster, now: float, first_nodes: int) -> int:
    """Pods Kubernetes would show Pending: waiting for a node a scale-up provisions. (The
    nodes of the Deployment running before the trace, ids below ``first_nodes``, keep the
    cluster model's provisioning time for later pods, as in the aggregated simulator, but
    exist: a pod placed there is scheduled.)"""
    return sum(
        1
        for p in cluster.live
        if p.state is PodState.STARTING and p.node.nid >= first_nodes and p.node.ready_t > now
    )


def _window_quantile(
    h: MetricsHistory, now: float, window_s: float, q: float, itl: bool
) -> float | None:
    i = h.index_at(now)
    if i is None:
        return None
    j = h.index_at(h.t[i] - window_s)
    if j is None or j >= i:
        return None
    if itl:
        return _hist_quantile(q, ITL_BUCKETS_S, np.subtract(h.itl_hist[i], h.itl_hist[j]))
    return _hist_quantile(q, TTFT_BUCKETS_S, np.subtract(h.ttft_hist[i], h.ttft_hist[j]))


def _role_signals(
    pre: tuple[MetricsHistory, Cluster],
    dec: tuple[MetricsHistory, Cluster],
    now: float,
    scrape: ScrapeModel,
) -> RoleSignals:
    p_sig, _ = SimView(*pre).signals(now, scrape)
    d_sig, _ = SimView(*dec).signals(now, scrape)
    return RoleSignals(
        prompt_tokens_per_s=p_sig.get("prompt_tokens_per_s"),
        waiting=p_sig.get("waiting"),
        ttft_p90_s=_window_quantile(pre[0], now, scrape.window_s, 0.9, itl=False),
        running=d_sig.get("running"),
        kv_usage=d_sig.get("kv_cache_usage"),
        itl_p90_s=_window_quantile(dec[0], now, scrape.window_s, 0.9, itl=True),
    )


def simulate_disagg(
    trace: Trace,
    cfg: DisaggConfig,
    *,
    slo_ttft_s: float,
    slo_itl_s: float,
    initial: tuple[int, int] = (1, 1),
    seed: int = 0,
    stop_at_s: float | None = None,
    timeline_every_s: float = 10.0,
) -> DisaggResult:
    """Replay ``trace`` on a prefill and a decode pool sized by `size_roles` (see the
    module doc); deterministic under ``seed``."""
    if initial[0] < 0 or initial[1] < 0:
        raise ConfigError(f"disagg.initial: value {initial} must be (prefill, decode) >= 0")
    rngs = np.random.default_rng(seed).spawn(2)
    pools = (Cluster(cfg.cluster, rngs[0]), Cluster(cfg.decode_pool, rngs[1]))
    hists = (MetricsHistory(), MetricsHistory())
    totals = (_Totals(), _Totals())
    pc, dc = pools
    states = [_role_state(cfg.behavior, initial[0]), _role_state(cfg.behavior, initial[1])]
    scrape = ScrapeModel(interval_s=1.0, lag_s=0.0, window_s=cfg.window_s)
    cap = cfg.max_replicas_per_role

    n = len(trace)
    arr = trace.arrival_s.tolist()
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    ttft = np.full(n, np.inf)
    done = np.zeros(n, dtype=bool)
    rejected, _infeasible = admission(trace, cfg.cluster.profile, slo_ttft_s)
    if cfg.decode_cluster is not None:  # the decode side must hold the whole context too
        rejected = rejected | admission(trace, cfg.decode_cluster.profile, slo_ttft_s)[0]
    rejected_l = rejected.tolist()
    dropped_ids: set[int] = set()
    handoffs: list[tuple[float, int]] = []  # (time the KV is on the decode side, rid)
    pq: deque[int] = deque()  # waiting for a ready prefill pod
    dq: deque[tuple[float, int]] = deque()  # (handoff time, rid) waiting for a decode pod
    rr = [0, 0]

    for c, k0 in zip(pools, initial, strict=True):
        c.scale_to(min(k0, cap), 0.0)
        for pod in c.live:  # the trace starts on already running Deployments
            pod.ready_t = 0.0
            pod.created_t = 0.0
        c.tick(0.0)
        c.scale_events = 0
    first_nodes = (len(pc.nodes), len(dc.nodes))
    max_rep = [pc.spec_replicas, dc.spec_replicas]

    def pick(c: Cluster, role: int) -> Replica | None:
        ready = c.ready
        m = len(ready)
        if not m:
            return None
        start = rr[role] % m
        rr[role] += 1
        best = ready[start]
        best_load = best.replica.load  # type: ignore[union-attr]
        for off in range(1, m):
            pod = ready[(start + off) % m]
            load = pod.replica.load  # type: ignore[union-attr]
            if load < best_load:
                best, best_load = pod, load
        return best.replica

    def route_prefill(rid: int, t: float) -> bool:
        rep = pick(pc, 0)
        if rep is None:
            return False
        rep.run_until(t)
        rep.add_request(rid, prompt[rid], 1, t)
        return True

    def route_decode(rid: int, t: float) -> bool:
        rep = pick(dc, 1)
        if rep is None:
            return False
        rep.run_until(t)
        rep.add_request(rid, prompt[rid], output[rid], t, kv_ready=True)
        return True

    def collect_prefill(rep: Replica) -> None:
        ev = rep.events
        if not ev.first_tokens and not ev.finished:
            return
        ev = rep.drain_events()
        for rid, t in ev.first_tokens:
            h = t + cfg.transfer.seconds(prompt[rid])
            ttft[rid] = h - arr[rid]
            if output[rid] > 1:
                heapq.heappush(handoffs, (h, rid))
            else:
                done[rid] = True

    def collect_decode(rep: Replica) -> None:
        ev = rep.events
        if not ev.first_tokens and not ev.finished:
            return
        for rid, _t in rep.drain_events().finished:
            done[rid] = True

    def advance(c: Cluster, tot: _Totals, now: float, collect: Any) -> None:
        for pod in c.live:
            if pod.replica is not None:
                pod.replica.run_until(now)
                collect(pod.replica)
        before: list[Pod] = [p for p in c.live if p.replica is not None]
        dropped_ids.update(c.tick(now))
        for pod in before:
            if pod.state is PodState.DELETED:
                collect(pod.replica)
                tot.retire(pod)

    timeline_t: list[float] = []
    timeline_p: list[int] = []
    timeline_d: list[int] = []
    tl_every = max(1, int(timeline_every_s))
    poll = int(cfg.poll_interval_s)
    end_cap = (arr[-1] if n else 0.0) + TAIL_CAP_S
    i = 0
    k = 0
    now = 0.0
    while True:
        k += 1
        now = k * TICK_S
        while i < n and arr[i] < now:
            if not rejected_l[i] and (pq or not route_prefill(i, arr[i])):
                pq.append(i)
            i += 1
        advance(pc, totals[0], now, collect_prefill)
        while pq:
            rid = pq[0]
            if now - arr[rid] > cfg.cluster.router_timeout_s:
                dropped_ids.add(pq.popleft())
            elif route_prefill(rid, now):
                pq.popleft()
            else:
                break
        while dq:  # older handoffs first
            h, rid = dq[0]
            if now - h > cfg.decode_pool.router_timeout_s:
                dropped_ids.add(dq.popleft()[1])
            elif route_decode(rid, now):
                dq.popleft()
            else:
                break
        while handoffs and handoffs[0][0] < now:
            h, rid = heapq.heappop(handoffs)
            if dq or not route_decode(rid, h):
                dq.append((h, rid))
        advance(dc, totals[1], now, collect_decode)
        _record(hists[0], pc, totals[0], now, i)
        _record(hists[1], dc, totals[1], now, i)
        if k % poll == 0:
            sig = _role_signals((hists[0], pc), (hists[1], dc), now, scrape)
            dec = size_roles(
                sig,
                cfg.targets,
                RoleState(pc.spec_replicas, _pending(pc, now, first_nodes[0])),
                RoleState(dc.spec_replicas, _pending(dc, now, first_nodes[1])),
            )
            for role, (c, want) in enumerate(zip(pools, (dec.prefill, dec.decode), strict=True)):
                # each role through `ours`' HPA behaviour on its own (`step_role`, as the
                # controller does): stabilised, rate-limited, the cold-start guard
                step = step_role(
                    cfg.behavior,
                    min(want, cap),
                    c.spec_replicas,
                    len(c.ready),
                    states[role],
                    now,
                    floor=0,
                )
                states[role] = step.state
                c.scale_to(step.desired, now)
                max_rep[role] = max(max_rep[role], c.spec_replicas)
        if k % tl_every == 0:
            timeline_t.append(now)
            timeline_p.append(pc.spec_replicas)
            timeline_d.append(dc.spec_replicas)
        if (
            i >= n
            and not pq
            and not dq
            and not handoffs
            and all(p.replica is None or p.replica.idle for c in pools for p in c.live)
        ):
            break
        if now >= end_cap or (stop_at_s is not None and now >= stop_at_s):
            break
    for c, tot in zip(pools, totals, strict=True):
        for pod in list(c.live):
            rep = pod.replica
            if rep is not None:
                dropped_ids.update(r for r in rep.in_flight_ids() if not done[r])
            tot.retire(pod)
    dropped_ids.update(pq)
    dropped_ids.update(rid for _h, rid in dq)
    dropped_ids.update(rid for _h, rid in handoffs)
    dropped = 0
    for rid in dropped_ids:
        if not done[rid]:
            ttft[rid] = np.inf
            dropped += 1
    return DisaggResult(
        trace=trace.name,
        slo_ttft_s=slo_ttft_s,
        slo_itl_s=slo_itl_s,
        ttft_s=ttft,
        rejected=rejected,
        itl_samples=totals[0].itl_samples + totals[1].itl_samples,
        gpu_hours_prefill=pc.gpu_hours(now),
        gpu_hours_decode=dc.gpu_hours(now),
        dollars_prefill=pc.gpu_hours(now) * cfg.cluster.price_per_gpu_hour,
        dollars_decode=dc.gpu_hours(now) * cfg.decode_pool.price_per_gpu_hour,
        dropped=dropped,
        preemptions=pc.counters.preemptions + dc.counters.preemptions,
        max_prefill=max_rep[0],
        max_decode=max_rep[1],
        end_s=now,
        timeline_t=timeline_t,
        timeline_prefill=timeline_p,
        timeline_decode=timeline_d,
    )


def settled_roles(
    trace: Trace, cfg: DisaggConfig, *, slo_ttft_s: float, slo_itl_s: float, seed: int = 0
) -> tuple[int, int]:
    """Where the pools enter the trace, by the aggregated comparison's rule
    (`sim/compare.py` ``settled_replicas``): the trace's first `PREROLL_S` replayed from
    one Ready replica per role, then from where that ended, until the counts repeat."""
    head = trace.window(0.0, PREROLL_S)
    counts = (1, 1)
    for _ in range(PREROLL_PASSES):
        res = simulate_disagg(
            head,
            cfg,
            slo_ttft_s=slo_ttft_s,
            slo_itl_s=slo_itl_s,
            initial=counts,
            seed=seed,
            stop_at_s=PREROLL_S,
        )
        if not res.timeline_t:
            break
        settled = (max(1, res.timeline_prefill[-1]), max(1, res.timeline_decode[-1]))
        if settled == counts:
            break
        counts = settled
    return counts
