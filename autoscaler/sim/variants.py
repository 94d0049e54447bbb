"""One model served by several GPU variants (issue 37): profiles, profiling, a router and
four ways to size the variants, on the same replica engine as the single-Deployment
simulator (sim/replica.py).

- Profiles: Llama-3-8B on a MIG ``2g.20gb`` slice of an H100 (FP8 weights, as the seed
  deploy/examples/vllm-llama3-8b-mig-2g20gb.yaml), on an L4 (FP8 weights) and on a full
  H100 (sim/replica.py's ``8b-h100``); derivations and sources in docs/simulator.md.
- Capacity per replica and size bucket: Mélange-style offline profiling, the highest
  Poisson rate of the bucket's requests one replica serves with 99% of the (idle-feasible)
  requests under the TTFT SLO.
- The router sends each request to the ready replica, among variants able to serve its
  size bucket, with the least in-flight load relative to that variant's capacity.
- Pods: a pod waits Pending while its variant's capacity book (``slots``) is full, is
  billed from placement, is ready ``cold_start_s`` later, and is drained on scale-down
  (pending pods first, then the newest starting, then the least loaded ready ones).

Policies: one variant only, the greedy split (policy/variants.py), the optimised mix
(policy/mix.py, re-balanced every ``rebalance_s`` with the greedy rule reacting upward in
between) and the offline optimum (the mix program solved with hindsight per window, its
replicas ready at each window's start).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.policy.mix import MixVariant, optimal_mix
from autoscaler.policy.variants import LengthDemand, Variant, VariantState, split
from autoscaler.sim.replica import HardwareProfile, Replica, get_profile
from autoscaler.sim.traces import Trace

TICK_S = 1.0
# size buckets by prompt + output tokens (upper bounds); a variant serves a bucket when
# the bound fits its max_model_len
BUCKETS: tuple[int, ...] = (1024, 2048, 4096, 8192, 32_768, 131_072)

# Llama-3-8B-Instruct-FP8 on an H100 MIG 2g.20gb slice (docs/simulator.md: 2/8 of the
# memory bandwidth, 2/7 of the SMs, FP8 weights halve the bytes read per step).
MIG_2G20GB = HardwareProfile(
    "8b-fp8-h100-mig-2g20gb",
    t0_ms=12.0,
    alpha_ms_per_seq=0.06,
    beta_ms_per_1k_ctx=0.19,
    gamma_ms_per_prefill_token=0.10,
    max_num_seqs=32,
    max_num_batched_tokens=2048,
    kv_capacity_tokens=65_000,
    gpus_billed=1.0 / 3.0,  # 3 slices per GPU (gpu-operator-mig-config.yaml)
    gpu_resource="nvidia.com/mig-2g.20gb",
    max_model_len=8192,
)
# Llama-3-8B-Instruct-FP8 on an L4 (24 GB GDDR6, 300 GB/s, 121 TFLOPS dense BF16).
L4 = HardwareProfile(
    "8b-fp8-l4",
    t0_ms=30.0,
    alpha_ms_per_seq=0.17,
    beta_ms_per_1k_ctx=0.53,
    gamma_ms_per_prefill_token=0.24,
    max_num_seqs=256,
    max_num_batched_tokens=2048,
    kv_capacity_tokens=80_000,
    gpus_billed=1.0,
    gpu_resource="nvidia.com/gpu",
    max_model_len=32_768,
)
VARIANT_PROFILES: dict[str, HardwareProfile] = {p.name: p for p in (MIG_2G20GB, L4)}
# USD per GPU-hour (calibration.md section 4: H100 on-demand hyperscaler default, L4 GCP g2)
PRICE_PER_GPU_HOUR = {"h100": 4.0, "l4": 0.75}


@dataclass(frozen=True, slots=True)
class VariantSetup:
    """One Deployment of the model in the simulation."""

    name: str
    profile: HardwareProfile
    price_per_gpu_hour: float
    cold_start_s: float = 60.0
    slots: int | None = None  # capacity book: pods placeable at once (None: unlimited)
    min_replicas: int = 0

    def __post_init__(self) -> None:
        if not (self.price_per_gpu_hour > 0 and self.cold_start_s >= 0):
            raise ConfigError(
                f"variant {self.name}: price_per_gpu_hour {self.price_per_gpu_hour} must be"
                f" > 0 and cold_start_s {self.cold_start_s} >= 0"
            )

    @property
    def price_per_replica_hour(self) -> float:
        return self.price_per_gpu_hour * self.profile.gpus_billed


def standard_setups(
    long_context: bool = False, h100_price: float | None = None
) -> dict[str, VariantSetup]:
    """The three variants of the benchmark: full H100, MIG 2g.20gb slice, L4."""
    h100 = get_profile("8b-h100-128k" if long_context else "8b-h100")
    price = PRICE_PER_GPU_HOUR["h100"] if h100_price is None else h100_price
    return {
        "h100": VariantSetup("h100", h100, price),
        "mig-2g.20gb": VariantSetup("mig-2g.20gb", MIG_2G20GB, price),
        "l4": VariantSetup("l4", L4, PRICE_PER_GPU_HOUR["l4"]),
    }


def bucket_of(total_tokens: np.ndarray) -> np.ndarray:
    """Index into BUCKETS of each request's prompt + output (the last bucket past it)."""
    return np.minimum(
        np.searchsorted(np.array(BUCKETS), total_tokens, side="left"), len(BUCKETS) - 1
    )


# ------------------------------------------------------------------ profiling


def _attainment(
    profile: HardwareProfile,
    rate: float,
    prompts: np.ndarray,
    outputs: np.ndarray,
    slo_ttft_s: float,
    duration_s: float,
    rng: np.random.Generator,
) -> float:
    """Fraction of idle-feasible requests under the SLO on one replica at ``rate``."""
    n = max(1, int(rng.poisson(rate * duration_s)))
    arrival = np.sort(rng.uniform(0.0, duration_s, size=n))
    pick = rng.integers(0, len(prompts), size=n)
    rep = Replica(profile)
    ttft = np.full(n, np.inf)
    counted = np.zeros(n, dtype=bool)
    for i in range(n):
        p, o = int(prompts[pick[i]]), int(outputs[pick[i]])
        rep.run_until(float(arrival[i]))
        if rep.add_request(i, p, o, float(arrival[i])):
            counted[i] = profile.idle_ttft_s(p) <= slo_ttft_s
        ev = rep.drain_events()
        for rid, t in ev.first_tokens:
            ttft[rid] = t - arrival[rid]
    rep.run_until(duration_s + 600.0)
    for rid, t in rep.drain_events().first_tokens:
        ttft[rid] = t - arrival[rid]
    warm = arrival >= min(30.0, duration_s / 4)  # skip the empty-engine start
    keep = counted & warm
    if not keep.any():
        return 0.0
    return float(np.mean(ttft[keep] <= slo_ttft_s))


def profile_capacity(
    profile: HardwareProfile,
    prompts: np.ndarray,
    outputs: np.ndarray,
    slo_ttft_s: float,
    *,
    target: float = 0.99,
    duration_s: float = 240.0,
    seed: int = 0,
    iterations: int = 9,
) -> float:
    """Requests/s of this size mix one replica serves with ``target`` of the idle-feasible
    requests under the SLO (bisection on the Poisson rate; 0 when the profile refuses
    them or misses the target even at a trickle)."""
    ok = (prompts + outputs <= profile.max_model_len) & (
        prompts + outputs <= profile.kv_capacity_tokens
    )
    if not ok.any() or ok.mean() < 0.999:
        return 0.0
    feasible = np.array([profile.idle_ttft_s(int(p)) <= slo_ttft_s for p in prompts[:200]])
    if not feasible.any():
        return 0.0
    rng = np.random.default_rng(seed)
    lo, hi = 0.0, 1.0
    while _attainment(profile, hi, prompts, outputs, slo_ttft_s, duration_s, rng) >= target:
        lo, hi = hi, hi * 2.0
        if hi > 4096:
            break
    if lo == 0.0:
        lo = hi / 64.0
        if _attainment(profile, lo, prompts, outputs, slo_ttft_s, duration_s, rng) < target:
            return 0.0
    for _ in range(iterations):
        mid = math.sqrt(lo * hi)
        if _attainment(profile, mid, prompts, outputs, slo_ttft_s, duration_s, rng) >= target:
            lo = mid
        else:
            hi = mid
    return lo


def capacity_table(
    setups: Mapping[str, VariantSetup],
    trace: Trace,
    slo_ttft_s: float,
    *,
    seed: int = 0,
    duration_s: float = 240.0,
    iterations: int = 9,
) -> dict[str, dict[int, float]]:
    """variant -> bucket index -> requests/s per replica, profiled on the trace's own
    requests of each bucket (buckets with fewer than 20 requests: none profiled)."""
    b = bucket_of(trace.prompt_tokens + trace.output_tokens)
    out: dict[str, dict[int, float]] = {}
    for name, s in setups.items():
        caps: dict[int, float] = {}
        for k in range(len(BUCKETS)):
            m = b == k
            if m.sum() < 20:
                continue
            caps[k] = profile_capacity(
                s.profile,
                trace.prompt_tokens[m],
                trace.output_tokens[m],
                slo_ttft_s,
                seed=seed + k,
                duration_s=duration_s,
                iterations=iterations,
            )
        out[name] = caps
    return out


# ------------------------------------------------------------------ pods and the run


@dataclass(slots=True)
class _Pod:
    variant: str
    created_t: float
    placed_t: float | None = None
    ready_t: float = math.inf
    replica: Replica | None = None
    draining: bool = False
    deleted_t: float | None = None


@dataclass(frozen=True, slots=True)
class Observation:
    """What a policy sees each poll: arrivals per bucket over the last ``window_s``
    (requests/s), and per variant its replicas and Pending pods."""

    now_s: float
    rate_by_bucket: Mapping[int, float]
    replicas: Mapping[str, int]
    pending: Mapping[str, int]
    free_slots: Mapping[str, int | None]


class VariantPolicy(Protocol):
    name: str

    def desired(self, obs: Observation) -> dict[str, int]: ...


@dataclass
class VariantResult:
    policy: str
    trace: str
    gpu_dollars: float
    gpu_hours: float
    attainment: float  # of requests some variant can serve within the SLO when idle
    counted: int
    dropped: int
    replica_seconds: dict[str, float] = field(default_factory=dict)
    max_replicas: dict[str, int] = field(default_factory=dict)
    end_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "policy": self.policy,
            "gpu_dollars": round(self.gpu_dollars, 3),
            "gpu_hours": round(self.gpu_hours, 3),
            "ttft_slo_attainment": round(self.attainment, 5),
            "counted_requests": self.counted,
            "dropped": self.dropped,
            "mean_replicas": {
                k: round(v / max(self.end_s, 1.0), 2) for k, v in self.replica_seconds.items()
            },
            "max_replicas": self.max_replicas,
        }


def servable_mask(
    setups: Mapping[str, VariantSetup], trace: Trace, slo_ttft_s: float
) -> np.ndarray:
    """Requests at least one variant accepts and serves within the SLO alone on an idle
    replica: the attainment denominator, the same for every policy of a study."""
    total = trace.prompt_tokens + trace.output_tokens
    ok = np.zeros(len(trace), dtype=bool)
    uniq, inv = np.unique(trace.prompt_tokens, return_inverse=True)
    for s in setups.values():
        p = s.profile
        idle = np.array([p.idle_ttft_s(int(x)) for x in uniq])[inv]
        ok |= (total <= p.max_model_len) & (total <= p.kv_capacity_tokens) & (idle <= slo_ttft_s)
    return ok


def run_variants(
    trace: Trace,
    setups: Mapping[str, VariantSetup],
    policy: VariantPolicy,
    caps: Mapping[str, Mapping[int, float]],
    *,
    slo_ttft_s: float,
    initial: Mapping[str, int],
    poll_s: float = 15.0,
    window_s: float = 60.0,
    router_timeout_s: float = 600.0,
    counted: np.ndarray | None = None,
) -> VariantResult:
    """Replay ``trace`` on the variants sized by ``policy``; deterministic."""
    names = list(setups)
    n = len(trace)
    arrival = trace.arrival_s.tolist()
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    bucket = bucket_of(trace.prompt_tokens + trace.output_tokens).tolist()
    ttft = np.full(n, np.inf)
    pods: dict[str, list[_Pod]] = {v: [] for v in names}
    retired: list[_Pod] = []
    max_rep = dict.fromkeys(names, 0)
    rep_s = dict.fromkeys(names, 0.0)

    def placed(v: str) -> int:
        return sum(1 for p in pods[v] if p.placed_t is not None)

    def place(now: float) -> None:
        for v in names:
            s = setups[v]
            for p in pods[v]:
                if p.placed_t is None and (s.slots is None or placed(v) < s.slots):
                    p.placed_t = now
                    p.ready_t = now + s.cold_start_s
                    p.replica = Replica(s.profile, start_s=p.ready_t)

    def live(v: str) -> list[_Pod]:
        return [p for p in pods[v] if not p.draining]

    def scale(v: str, want: int, now: float) -> None:
        cur = live(v)
        if want > len(cur):
            for _ in range(want - len(cur)):
                pods[v].append(_Pod(v, now))
        elif want < len(cur):
            # pending first, then the newest starting, then the least loaded ready
            order = sorted(
                cur,
                key=lambda p: (
                    p.placed_t is not None,
                    p.ready_t <= now,
                    -p.created_t if p.ready_t > now else (p.replica.load if p.replica else 0),
                ),
            )
            for p in order[: len(cur) - want]:
                if p.placed_t is None or p.ready_t > now:
                    p.deleted_t = now
                    pods[v].remove(p)
                    retired.append(p)
                else:
                    p.draining = True
        max_rep[v] = max(max_rep[v], len(live(v)))

    for v in names:
        scale(v, initial.get(v, 0), 0.0)
    place(0.0)
    for v in names:
        for p in pods[v]:
            p.ready_t = 0.0
            if p.replica is not None:
                p.replica.clock_s = 0.0

    def collect(rep: Replica) -> None:
        ev = rep.events
        if not ev.first_tokens:
            return
        for rid, t in rep.drain_events().first_tokens:
            ttft[rid] = t - arrival[rid]

    def route(rid: int, now: float) -> bool:
        b = bucket[rid]
        # a bucket no variant was profiled for (too few requests): any variant that
        # accepts the request, least loaded
        nobody = all(caps[v].get(b, 0.0) <= 0 for v in names)
        best: Replica | None = None
        best_score = math.inf
        for v in names:
            c = 1.0 if nobody else caps[v].get(b, 0.0)
            if c <= 0:
                continue
            prof = setups[v].profile
            if prompt[rid] + output[rid] > min(prof.max_model_len, prof.kv_capacity_tokens):
                continue
            for p in pods[v]:
                if p.draining or p.ready_t > now or p.replica is None:
                    continue
                score = (p.replica.load + 1) / c
                if score < best_score:
                    best, best_score = p.replica, score
        if best is None:
            return False
        best.run_until(now)
        best.add_request(rid, prompt[rid], output[rid], now)
        return True

    queue: deque[int] = deque()
    recent: deque[tuple[float, int]] = deque()
    dropped = 0
    i = 0
    k = 0
    poll = max(1, round(poll_s / TICK_S))
    end_cap = (arrival[-1] if n else 0.0) + 1800.0
    now = 0.0
    while True:
        k += 1
        now = k * TICK_S
        while i < n and arrival[i] < now:
            recent.append((arrival[i], bucket[i]))
            if not route(i, arrival[i]):
                queue.append(i)  # no ready replica able to serve it yet
            i += 1
        if queue:
            # every queued request is retried (FIFO): one nobody can serve must not
            # block the others behind it
            keep: deque[int] = deque()
            for rid in queue:
                if now - arrival[rid] > router_timeout_s:
                    dropped += 1
                elif not route(rid, now):
                    keep.append(rid)
            queue = keep
        for v in names:
            for p in list(pods[v]):
                if p.replica is None:
                    continue
                p.replica.run_until(now)
                collect(p.replica)
                if p.draining and p.replica.idle:
                    p.deleted_t = now
                    pods[v].remove(p)
                    retired.append(p)
            rep_s[v] += TICK_S * sum(1 for p in pods[v] if p.placed_t is not None)
        place(now)
        if k % poll == 0:
            while recent and recent[0][0] < now - window_s:
                recent.popleft()
            rates: dict[int, float] = {}
            for _t, b in recent:
                rates[b] = rates.get(b, 0.0) + 1.0 / window_s
            obs = Observation(
                now_s=now,
                rate_by_bucket=rates,
                replicas={v: len(live(v)) for v in names},
                pending={v: sum(1 for p in live(v) if p.placed_t is None) for v in names},
                free_slots={
                    v: None if setups[v].slots is None else max(0, setups[v].slots - placed(v))  # type: ignore[operator]
                    for v in names
                },
            )
            for v, want in policy.desired(obs).items():
                scale(v, max(0, want), now)
            place(now)
        # done: every request arrived, every placed replica idle and ready, none Pending
        # (what is still queued then has no replica that could ever take it: dropped)
        if i >= n and all(
            p.placed_t is not None and (p.replica is None or (p.replica.idle and p.ready_t <= now))
            for v in names
            for p in pods[v]
        ):
            break
        if now >= end_cap:
            break
    dropped += len(queue)
    hours = {v: rep_s[v] / 3600.0 for v in names}
    dollars = sum(hours[v] * setups[v].price_per_replica_hour for v in names)
    gpu_hours = sum(hours[v] * setups[v].profile.gpus_billed for v in names)
    mask = counted if counted is not None else np.ones(n, dtype=bool)
    att = float(np.mean(ttft[mask] <= slo_ttft_s)) if mask.any() else float("nan")
    return VariantResult(
        policy=policy.name,
        trace=trace.name,
        gpu_dollars=dollars,
        gpu_hours=gpu_hours,
        attainment=att,
        counted=int(mask.sum()),
        dropped=dropped,
        replica_seconds=rep_s,
        max_replicas=max_rep,
        end_s=now,
    )


# ------------------------------------------------------------------ policies


class _Stabilised:
    """HPA-style scale-down stabilisation per variant: apply the highest recommendation
    of the last ``window_s``; scale-up at once."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._hist: dict[str, deque[tuple[float, int]]] = {}

    def apply(self, now: float, want: Mapping[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for v, n in want.items():
            h = self._hist.setdefault(v, deque())
            h.append((now, n))
            while h and h[0][0] < now - self.window_s:
                h.popleft()
            out[v] = max(x for _t, x in h)
        return out


class GreedyPolicy:
    """The greedy split (policy/variants.py) over the given variants (one: single type)."""

    def __init__(
        self,
        name: str,
        setups: Mapping[str, VariantSetup],
        caps: Mapping[str, Mapping[int, float]],
        *,
        headroom: float = 1.15,
        scale_down_window_s: float = 300.0,
        gap_aware: bool = False,
    ) -> None:
        self.name = name
        self.gap_aware = gap_aware
        self.setups = setups
        self.caps = caps
        self.headroom = headroom
        self.stab = _Stabilised(scale_down_window_s)

    def recommend(self, obs: Observation, names: Sequence[str]) -> dict[str, int]:
        """The split in one unit comparable across variants: "best replicas", each
        bucket's rate over the highest per-replica capacity any variant has for it. A
        variant's capacity in that unit is its relative speed on the traffic it can
        serve (1 for the best variant of every bucket). Requests/s would not do: a
        variant serving only short requests shows more of them per second than one
        serving every size, and would look cheaper than it is."""
        best = {b: max(self.caps[w].get(b, 0.0) for w in names) for b in obs.rate_by_bucket}
        work = {b: r / best[b] for b, r in obs.rate_by_bucket.items() if best[b] > 0}
        variants = []
        for v in names:
            mine = {b: w for b, w in work.items() if self.caps[v].get(b, 0.0) > 0}
            if mine:
                cap = sum(mine.values()) / sum(
                    obs.rate_by_bucket[b] / self.caps[v][b] for b in mine
                )
            else:  # no traffic it can take now: its mean relative speed
                rel = [
                    c / m
                    for b, c in self.caps[v].items()
                    if c > 0 and (m := max(self.caps[w].get(b, 0.0) for w in names)) > 0
                ]
                cap = sum(rel) / len(rel) if rel else 0.0
            if cap <= 0:
                continue
            usable = [b for b, c in self.caps[v].items() if c > 0]
            mml = BUCKETS[max(usable)] if usable else 1
            variants.append(
                Variant(
                    v,
                    self.setups[v].price_per_replica_hour,
                    cap,
                    min_replicas=max(1, self.setups[v].min_replicas)
                    if len(names) == 1
                    else self.setups[v].min_replicas,
                    max_replicas=None,
                    max_model_len=mml,
                )
            )
        demand = [LengthDemand(BUCKETS[b], w * self.headroom) for b, w in work.items()]
        states = {
            v.name: VariantState(obs.replicas[v.name], obs.pending[v.name], obs.free_slots[v.name])
            for v in variants
        }
        out = (
            dict(split(variants, states, demand, gap_aware=self.gap_aware).replicas)
            if variants
            else {}
        )
        for v in names:
            out.setdefault(v, obs.replicas.get(v, 0))
        return out

    def desired(self, obs: Observation) -> dict[str, int]:
        return self.stab.apply(obs.now_s, self.recommend(obs, list(self.setups)))


def mix_variants(
    setups: Mapping[str, VariantSetup], caps: Mapping[str, Mapping[int, float]]
) -> list[MixVariant]:
    return [
        MixVariant(
            v,
            setups[v].price_per_replica_hour,
            {str(b): c for b, c in caps[v].items() if c > 0},
            min_replicas=setups[v].min_replicas,
        )
        for v in setups
    ]


class MixPolicy:
    """The optimised mix, re-balanced every ``rebalance_s`` on the peak per-bucket rate of
    the last ``rebalance_s`` (the peak is its headroom); the greedy rule only adds in
    between."""

    def __init__(
        self,
        setups: Mapping[str, VariantSetup],
        caps: Mapping[str, Mapping[int, float]],
        *,
        headroom: float = 1.0,
        rebalance_s: float = 600.0,
        react_headroom: float = 1.0,
    ) -> None:
        self.name = "optimised mix"
        self.setups = setups
        self.caps = caps
        self.headroom = headroom
        self.rebalance_s = rebalance_s
        # top-ups between re-balances are short-lived: close them at the least cost
        self.greedy = GreedyPolicy("greedy", setups, caps, headroom=react_headroom, gap_aware=True)
        self.target: dict[str, int] | None = None
        self.next_rebalance_s = 0.0
        self.peak: dict[int, float] = {}
        self.mvs = mix_variants(setups, caps)
        self.served = {b for c in caps.values() for b, x in c.items() if x > 0}

    def desired(self, obs: Observation) -> dict[str, int]:
        for b, r in obs.rate_by_bucket.items():
            self.peak[b] = max(self.peak.get(b, 0.0), r)
        if self.target is None or obs.now_s >= self.next_rebalance_s:
            load = {str(b): r * self.headroom for b, r in self.peak.items() if b in self.served}
            mix = optimal_mix(self.mvs, load)
            if mix is not None:
                self.target = dict(mix.replicas)
            elif self.target is None:
                self.target = dict(obs.replicas)
            self.peak = dict(obs.rate_by_bucket)
            self.next_rebalance_s = obs.now_s + self.rebalance_s
            return dict(self.target)
        # between re-balances: the greedy split reacts, upward only
        states = Observation(
            obs.now_s, obs.rate_by_bucket, self.target, obs.pending, obs.free_slots
        )
        grow = self.greedy.recommend(states, list(self.setups))
        self.target = {v: max(self.target[v], grow.get(v, 0)) for v in self.target}
        return dict(self.target)


def window_loads(trace: Trace, window_s: float, peak_bin_s: float = 60.0) -> list[dict[int, float]]:
    """Per window, each bucket's peak rate over ``peak_bin_s`` bins (hindsight)."""
    b = bucket_of(trace.prompt_tokens + trace.output_tokens)
    nwin = max(1, math.ceil((trace.duration_s + 1e-9) / window_s))
    bins_per = max(1, round(window_s / peak_bin_s))
    nbins = nwin * bins_per
    idx = np.minimum((trace.arrival_s // peak_bin_s).astype(np.int64), nbins - 1)
    out: list[dict[int, float]] = [{} for _ in range(nwin)]
    for k in np.unique(b):
        counts = np.bincount(idx[b == k], minlength=nbins).reshape(nwin, bins_per)
        peak = counts.max(axis=1) / peak_bin_s
        for w in range(nwin):
            if peak[w] > 0:
                out[w][int(k)] = float(peak[w])
    return out


class OfflineOptimum:
    """The mix program solved with hindsight per window on each bucket's peak rate in it;
    the replicas for a window are started ``cold_start_s`` ahead so they are ready at its
    start, and kept until it ends."""

    def __init__(
        self,
        trace: Trace,
        setups: Mapping[str, VariantSetup],
        caps: Mapping[str, Mapping[int, float]],
        *,
        window_s: float = 600.0,
        headroom: float = 1.0,
    ) -> None:
        self.name = "offline optimum"
        self.window_s = window_s
        mvs = mix_variants(setups, caps)
        served = {b for c in caps.values() for b, x in c.items() if x > 0}
        self.plan: list[dict[str, int]] = []
        for load in window_loads(trace, window_s):
            mix = optimal_mix(mvs, {str(b): r * headroom for b, r in load.items() if b in served})
            self.plan.append(dict(mix.replicas) if mix else {v: 0 for v in setups})
        self.lead_s = max(s.cold_start_s for s in setups.values())

    def counts_at(self, t: float) -> dict[str, int]:
        w = min(len(self.plan) - 1, max(0, int(t // self.window_s)))
        return self.plan[w]

    def desired(self, obs: Observation) -> dict[str, int]:
        now_c = self.counts_at(obs.now_s)
        ahead = self.counts_at(obs.now_s + self.lead_s)
        return {v: max(now_c.get(v, 0), ahead.get(v, 0)) for v in set(now_c) | set(ahead)}


def single(
    name: str, setups: Mapping[str, VariantSetup], caps: Mapping[str, Mapping[int, float]]
) -> GreedyPolicy:
    return GreedyPolicy(f"only {name}", {name: setups[name]}, caps)


PolicyFactory = Callable[[], VariantPolicy]
