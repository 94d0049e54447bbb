"""Many low-traffic models with scale to zero: cold starts, a warm floor, or sleepers.

Each model is simulated on its own fleet (models share no GPU time here; what a shared
GPU changes is the price of a sleeper, `ServerlessRow.sleep_gpu_share`). A model's
replicas run the simulator's exact step model (`Replica`); what this module adds is the
lifecycle around them:

- **Held requests.** With no Ready awake replica, a request waits in the activator's FIFO.
  The first one pokes the controller (``poke_s`` later the scale-up is decided), and the
  queue is forwarded in arrival order when a replica turns Ready. Its TTFT therefore
  includes the cold start, or the wake. A request held over ``hold_timeout_s`` is dropped
  (the activator's 503).
- **Sizing.** Every second ``ceil((in flight + held) / target_in_flight)`` replicas are
  wanted (at least 1 while a request arrived that second); scale-up is at once, and
  scale-down takes the highest want of the last ``idle_s`` (KEDA's 300 s cooldown by
  default), never below ``min_awake``. Only idle Ready replicas are removed.
- **Sleeping tier.** A removed replica is put to sleep (vLLM sleep level 1) instead of
  deleted while fewer than ``sleep_budget`` sleep; a sleeper older than ``sleep_ttl_s`` is
  deleted. A scale-up wakes sleepers first (`SleepModel.wake`, seconds) and cold-starts
  only the rest (`ColdStartModel`, about a minute on a warm node).
- **Cost.** GPU-hours from pod creation to deletion, as `cluster.Cluster` bills them: a
  starting, Ready or waking replica is billed its GPUs; a sleeper ``sleep_gpu_share`` of
  them. A sleeper still holds its GPU memory reservation unless the GPU is shared, so the
  default share is 1.0 (calibration.md section 6: "GPU stays billed while asleep").
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field
from enum import Enum

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.policy import sleepers
from autoscaler.policy.sleepers import Fleet
from autoscaler.sim.cluster import ColdStartModel, Phase
from autoscaler.sim.replica import HardwareProfile, Replica
from autoscaler.sim.traces import Trace, _make, scale_rate, speed_up

TAIL_S = 1800.0  # after the last arrival, in-flight requests get this long


@dataclass(frozen=True, slots=True)
class SleepModel:
    """How long a Level-1 wake takes (log-normal median / p90 seconds).

    calibration.md section 6 ("sleep-mode wake" row): 0.5 / 3 s for an 8B model, 3 / 6 s
    for 70B TP4; section 3 cites the vLLM blog (_posts/2025-10-26-sleep-mode.md: 0.1-0.8 s
    small models, 3-6 s large) and llm-d PR #2492 (4.0 s "hot" vs 85.3 s cold, Qwen3-32B)."""

    wake: Phase = field(default_factory=lambda: Phase(0.5, 3.0))


SLEEP_PRESETS: dict[str, SleepModel] = {
    "8b": SleepModel(),
    "70b": SleepModel(Phase(3.0, 6.0)),
}


@dataclass(frozen=True, slots=True)
class ServerlessRow:
    """One way to run the idle models (a row of the comparison)."""

    name: str
    min_awake: int = 0
    idle_s: float = 300.0
    sleep_budget: int = 0
    sleep_ttl_s: float | None = None  # None: a sleeper is kept until woken
    sleep_gpu_share: float = 1.0  # GPU fraction billed per sleeper (1/k: k sleepers a GPU)
    new_node: bool = False  # cold starts also provision a node and pull the image
    max_replicas: int = 8
    target_in_flight: int = 64
    hold_timeout_s: float = 600.0
    poke_s: float = 0.1  # held request -> scale decision (the activator's poke)

    def __post_init__(self) -> None:
        if self.min_awake < 0 or self.sleep_budget < 0:
            raise ConfigError(
                f"{self.name}: min_awake {self.min_awake} and sleep_budget "
                f"{self.sleep_budget} must be >= 0"
            )
        if not 0 <= self.sleep_gpu_share <= 1:
            raise ConfigError(
                f"{self.name}: sleep_gpu_share value {self.sleep_gpu_share} must be in [0, 1]"
            )
        if not (self.idle_s >= 1 and self.max_replicas >= max(1, self.min_awake)):
            raise ConfigError(
                f"{self.name}: idle_s {self.idle_s} must be >= 1 and max_replicas "
                f"{self.max_replicas} >= max(1, min_awake)"
            )
        if self.target_in_flight < 1 or self.hold_timeout_s <= 0 or self.poke_s < 0:
            raise ConfigError(
                f"{self.name}: target_in_flight must be >= 1, hold_timeout_s > 0, poke_s >= 0"
            )
        if self.sleep_ttl_s is not None and self.sleep_ttl_s <= 0:
            raise ConfigError(f"{self.name}: sleep_ttl_s value {self.sleep_ttl_s} must be > 0")


class _State(Enum):
    STARTING = "starting"
    WAKING = "waking"
    READY = "ready"
    ASLEEP = "asleep"


class _Pod:
    __slots__ = ("asleep_since", "bill_from", "replica", "state", "up_at")

    def __init__(self, state: _State, now: float, up_at: float) -> None:
        self.state = state
        self.bill_from = now
        self.up_at = up_at  # when STARTING/WAKING ends
        self.asleep_since = now
        self.replica: Replica | None = None


@dataclass(slots=True)
class ModelResult:
    """One model's outcome under one row."""

    ttft_s: np.ndarray  # inf: dropped (held too long) or never answered; nan: refused
    held: np.ndarray  # arrived with no Ready awake replica
    after_idle: np.ndarray  # the previous arrival was >= idle_s earlier (or none)
    rejected: int
    awake_gpu_s: float
    asleep_gpu_s: float
    cold_starts: int
    wakes: int
    end_s: float


def after_idle_mask(arrival_s: np.ndarray, idle_s: float) -> np.ndarray:
    """Requests that find a model idle for ``idle_s`` at least (the first one too): the
    same requests for every row, so first-request TTFTs compare like with like."""
    gaps = np.diff(arrival_s, prepend=-np.inf)
    return np.asarray(gaps >= idle_s)


def simulate_model(
    trace: Trace,
    row: ServerlessRow,
    profile: HardwareProfile,
    *,
    cold_start: ColdStartModel | None = None,
    sleep: SleepModel | None = None,
    seed: int = 0,
    horizon_s: float = 0.0,
) -> ModelResult:
    """Replay one model's trace under ``row``; deterministic under ``seed``. The fleet is
    billed until ``horizon_s`` at least (the scenario's span, the same for every row),
    and until the last request is answered."""
    cold = cold_start or ColdStartModel()
    wake = (sleep or SleepModel()).wake
    rng = np.random.default_rng(seed)
    n = len(trace)
    arr = trace.arrival_s.tolist()
    prompt = trace.prompt_tokens.tolist()
    output = trace.output_tokens.tolist()
    ttft = np.full(n, np.inf)
    held_mask = np.zeros(n, dtype=bool)
    gpus = profile.gpus_billed
    rate = {
        _State.STARTING: gpus,
        _State.WAKING: gpus,
        _State.READY: gpus,
        _State.ASLEEP: gpus * row.sleep_gpu_share,
    }
    bill = {"awake": 0.0, "asleep": 0.0}
    counts = {"cold": 0, "wake": 0, "rejected": 0}
    pods: list[_Pod] = []
    held: deque[int] = deque()
    wants: deque[tuple[float, int]] = deque()  # (t, want > 0) within the last idle_s

    def settle(pod: _Pod, now: float) -> None:
        key = "asleep" if pod.state is _State.ASLEEP else "awake"
        bill[key] += (now - pod.bill_from) * rate[pod.state]
        pod.bill_from = now

    def set_state(pod: _Pod, state: _State, now: float) -> None:
        settle(pod, now)
        pod.state = state

    def cold_start_s() -> float:
        phases = cold.sample(rng, new_node=row.new_node, image_cached=not row.new_node)
        return sum(phases.values())

    def idle_ready() -> list[_Pod]:
        return [
            p for p in pods if p.state is _State.READY and (p.replica is None or p.replica.idle)
        ]

    def resize(desired: int, now: float) -> None:
        """Act on `sleepers.plan`: the same choice a controller with sleepers makes."""
        removable = idle_ready()
        fleet = Fleet(
            awake=awake_count(),
            idle_ready=len(removable),
            asleep=sum(1 for p in pods if p.state is _State.ASLEEP),
        )
        todo = sleepers.plan(desired, fleet, row.sleep_budget)
        to_wake = [p for p in pods if p.state is _State.ASLEEP][: todo.wake]
        for pod in to_wake:
            set_state(pod, _State.WAKING, now)
            pod.up_at = now + wake.sample(rng)
            counts["wake"] += 1
        for _ in range(todo.start):
            pods.append(_Pod(_State.STARTING, now, now + cold_start_s()))
            counts["cold"] += 1
        for pod in removable[: todo.sleep]:
            set_state(pod, _State.ASLEEP, now)
            pod.asleep_since = now
        for pod in removable[todo.sleep : todo.sleep + todo.delete]:
            settle(pod, now)
            pods.remove(pod)

    def ready_pods() -> list[_Pod]:
        return [p for p in pods if p.state is _State.READY]

    def awake_count() -> int:
        return sum(1 for p in pods if p.state is not _State.ASLEEP)

    def route(rid: int, t: float, ready: list[_Pod]) -> None:
        best = min(ready, key=lambda p: p.replica.load if p.replica else 0)
        rep = best.replica
        assert rep is not None
        rep.run_until(t)
        if not rep.add_request(rid, prompt[rid], output[rid], t):
            counts["rejected"] += 1
            ttft[rid] = np.nan  # vLLM's 400: not a latency

    def collect(rep: Replica) -> None:
        ev = rep.drain_events()
        for rid, t in ev.first_tokens:
            ttft[rid] = t - arr[rid]

    def come_up(pod: _Pod, t: float) -> None:
        set_state(pod, _State.READY, t)
        if pod.replica is None:
            pod.replica = Replica(profile, start_s=t)
        elif pod.replica.clock_s < t:
            pod.replica.clock_s = t
        ready = ready_pods()
        while held:
            route(held.popleft(), t, ready)

    # the rows' floors, already up at t=0: awake replicas, then the sleepers
    for _ in range(row.min_awake):
        pod = _Pod(_State.READY, 0.0, 0.0)
        pod.replica = Replica(profile, start_s=0.0)
        pods.append(pod)
    for _ in range(row.sleep_budget):
        pods.append(_Pod(_State.ASLEEP, 0.0, 0.0))

    i = 0
    now = 0.0
    end_cap = max(horizon_s, arr[-1] if n else 0.0) + TAIL_S
    while True:
        now += 1.0
        # transitions and arrivals of (now - 1, now], in time order
        events: list[tuple[float, int, int]] = []  # (t, kind 0 up / 1 arrival, index)
        for j, pod in enumerate(pods):
            if pod.state in (_State.STARTING, _State.WAKING) and pod.up_at <= now:
                events.append((pod.up_at, 0, j))
        arrivals = 0
        while i < n and arr[i] < now:
            events.append((arr[i], 1, i))
            i += 1
            arrivals += 1
        heapq.heapify(events)
        while events:
            t, kind, idx = heapq.heappop(events)
            if kind == 0:
                come_up(pods[idx], t)
                continue
            ready = ready_pods()
            if ready and not held:
                route(idx, t, ready)
                continue
            held.append(idx)
            held_mask[idx] = True
            if awake_count() == 0:  # the poke: 0 -> 1 without waiting for the poll
                resize(1, t + row.poke_s)
                for j, pod in enumerate(pods):  # none was coming up before the poke
                    if pod.state in (_State.STARTING, _State.WAKING) and pod.up_at <= now:
                        heapq.heappush(events, (pod.up_at, 0, j))
        for pod in pods:
            if pod.replica is not None and pod.state is _State.READY:
                pod.replica.run_until(now)
                collect(pod.replica)
        while held and now - arr[held[0]] > row.hold_timeout_s:
            held.popleft()  # the activator's 503; TTFT stays inf
        # sizing, every second
        load = sum(p.replica.load for p in pods if p.replica is not None)
        want = math.ceil((load + len(held)) / row.target_in_flight)
        if arrivals:
            want = max(want, 1)
        if want:
            wants.append((now, want))
        while wants and wants[0][0] <= now - row.idle_s:
            wants.popleft()
        window = max((w for _, w in wants), default=0)
        desired = min(row.max_replicas, max(row.min_awake, want, window))
        if desired != awake_count():
            resize(desired, now)
        if row.sleep_ttl_s is not None:
            asleep = [p for p in pods if p.state is _State.ASLEEP]
            for k in sleepers.expired([p.asleep_since for p in asleep], now, row.sleep_ttl_s):
                settle(asleep[k], now)
                pods.remove(asleep[k])
        busy = held or any(
            p.state in (_State.STARTING, _State.WAKING) or (p.replica and not p.replica.idle)
            for p in pods
            if p.state is not _State.ASLEEP
        )
        if i >= n and not busy and now >= horizon_s:
            break  # every row is billed over the same horizon
        if now >= end_cap:
            break
        if not busy:
            # nothing in flight: jump to the next second something can change
            nxt = arr[i] if i < n else horizon_s
            if wants:
                nxt = min(nxt, wants[-1][0] + row.idle_s)
            if row.sleep_ttl_s is not None:
                for p in pods:
                    if p.state is _State.ASLEEP:
                        nxt = min(nxt, p.asleep_since + row.sleep_ttl_s)
            if math.isfinite(nxt):
                now = max(now, math.floor(nxt) - 1.0)
    for pod in pods:
        settle(pod, now)
    # still in flight at the end of the tail: dropped
    return ModelResult(
        ttft_s=ttft,
        held=held_mask,
        after_idle=after_idle_mask(trace.arrival_s, row.idle_s),
        rejected=counts["rejected"],
        awake_gpu_s=bill["awake"],
        asleep_gpu_s=bill["asleep"],
        cold_starts=counts["cold"],
        wakes=counts["wake"],
        end_s=now,
    )


def many_models(
    base: Trace,
    n_models: int,
    *,
    span_s: float,
    keep: tuple[float, float],
    seed: int = 0,
) -> list[Trace]:
    """``n_models`` low-traffic models from one trace: the trace stretched to ``span_s``,
    then per model thinned to a share drawn log-uniformly from ``keep`` and shifted by a
    uniform offset (wrapping around), all seeded. Bursts keep the source's shape."""
    lo, hi = keep
    if n_models < 1 or not 0 < lo <= hi <= 1 or not span_s > 0:
        raise ConfigError(
            f"many_models: n_models {n_models} must be >= 1, keep {keep} within (0, 1] and "
            f"span_s {span_s} > 0"
        )
    if len(base) < 2:
        raise ConfigError(f"many_models: trace {base.name!r} needs at least 2 requests")
    stretched = speed_up(base, base.duration_s / span_s)
    rng = np.random.default_rng(seed)
    out: list[Trace] = []
    for m in range(n_models):
        share = float(math.exp(rng.uniform(math.log(lo), math.log(hi))))
        offset = float(rng.uniform(0.0, span_s))
        thin = scale_rate(stretched, share, seed=seed * 1000 + m)
        t = np.mod(thin.arrival_s + offset, span_s)
        order = np.argsort(t, kind="stable")
        out.append(
            _make(
                f"{base.name}/model-{m}",
                t[order],
                thin.prompt_tokens[order],
                thin.output_tokens[order],
            )
        )
    return out
