"""The chains compared (metrics source, tick, scrape interval) and one timed burst each."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from autoscaler.control.signals import SourceSignals
from autoscaler.control.state import ControllerState
from autoscaler.emulator.fleet import QueueJump
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.prometheus import VLLM_QUERIES, PrometheusSource
from autoscaler.metrics.source import MetricSource
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import StoredTarget
from autoscaler.target import ScaleTargetRef, TargetSpec
from reaction.world import (
    JUMP_OUTPUT_TOKENS,
    JUMP_PROMPT_TOKENS,
    JUMP_REQUESTS,
    KEDA_QUERIES,
    REF,
    SELECTOR,
    WAITING_TARGET,
    BenchError,
    ScaleWrite,
    TimedLoop,
    World,
    until,
)


def policy(tick_s: float) -> dict[str, Any]:
    """The seeds' ScaledObject behaviour (scale-up: 100 % per 15 s, no stabilisation) with
    one queue metric; ``pollingInterval`` = the chain's tick, so every tick reconciles."""
    return {
        "minReplicaCount": 1,
        "maxReplicaCount": 3,
        "pollingInterval": tick_s,
        "metrics": [{"signal": "waiting", "type": "AverageValue", "target": WAITING_TARGET}],
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": 300,
                "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
            },
        },
    }


@dataclass(frozen=True, slots=True)
class Chain:
    key: str
    name: str
    source: str  # "pod-scrape" | "prometheus"
    tick_s: float
    bursts: int
    scrape_interval_s: float | None = None  # Prometheus only
    keda_query: bool = False
    # Ticks before the interval the jump falls in: a running controller is many ticks in
    # (a loop that skips ticks only shows it from the second interval on).
    warmup_ticks: int = 3


def chains(fast_bursts: int, slow_bursts: int) -> list[Chain]:
    """The first chain is the base of the ratios."""
    return [
        Chain("pod-1s", "ours/pod-scrape tick 1s", "pod-scrape", 1.0, fast_bursts),
        Chain("pod-0.5s", "ours/pod-scrape tick 0.5s", "pod-scrape", 0.5, fast_bursts),
        Chain("prom-1s", "ours/prometheus scrape 1s tick 1s", "prometheus", 1.0, fast_bursts, 1.0),
        Chain(
            "prom-15s", "ours/prometheus scrape 15s tick 1s", "prometheus", 1.0, slow_bursts, 15.0
        ),
        Chain(
            "keda",
            "keda-like scrape 15s poll 15s",
            "prometheus",
            15.0,
            slow_bursts,
            15.0,
            keda_query=True,
            warmup_ticks=0,  # the loop start is already at a random point of the scrape
        ),
    ]


# Groups run concurrently, one process each: every chain is idle most of the time (about
# 3 % of a core in total), and a process per group keeps the slow chains' event loops and
# emulators away from the sub-second chains'.
GROUPS = ("pod-1s,pod-0.5s,prom-1s", "prom-15s", "keda")


@dataclass(frozen=True, slots=True)
class Burst:
    index: int
    phase: float  # where in the tick interval the jump fell, 0..1
    latency_s: float  # jump -> scale write applied
    wait_s: float  # jump -> start of the tick that acted
    tick_work_s: float  # that tick's start -> scale write applied
    waiting_at_jump: int
    waiting_at_write: int
    replicas_from: int
    replicas_to: int
    ticks: int = 0  # ticks the loop ran, up to the write
    reconciles: int = 0  # of which reconciled the target (fewer: skipped ticks)


@dataclass(frozen=True, slots=True)
class ChainRun:
    chain: Chain
    bursts: list[Burst]
    truncated: bool  # --max-minutes stopped it early
    elapsed_s: float

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(raw: dict[str, Any]) -> ChainRun:
        return ChainRun(
            Chain(**raw["chain"]),
            [Burst(**b) for b in raw["bursts"]],
            bool(raw["truncated"]),
            float(raw["elapsed_s"]),
        )


def make_source(chain: Chain, world: World) -> MetricSource:
    if chain.source == "pod-scrape":
        return PodScrapeSource(ScrapeConfig(timeout_s=2.0))
    assert chain.scrape_interval_s is not None
    prom = world.proms[chain.scrape_interval_s]
    queries = KEDA_QUERIES if chain.keda_query else VLLM_QUERIES
    return PrometheusSource(prom.url, {str(REF): SELECTOR}, queries)


async def one_burst(
    world: World,
    chain: Chain,
    signals: SourceSignals,
    spec: TargetSpec,
    index: int,
    *,
    u: float,
    offset_s: float,
) -> Burst:
    """``u``: the jump's phase in its tick interval; ``offset_s``: delay before the loop
    starts."""
    loop = TimedLoop(
        ControllerState(),
        world.cluster,
        signals,
        tick_interval_s=chain.tick_s,
    )
    loop.set_targets([StoredTarget(spec, "1")])
    writes_before = len(world.kube.scale_writes)
    landed = asyncio.Event()
    seen: dict[str, int] = {}
    jump: QueueJump | None = None

    def on_write(write: ScaleWrite) -> None:
        if jump is not None and write.t_monotonic >= jump.t_monotonic and not landed.is_set():
            seen["waiting"] = world.fleet.get(jump.replica).engine.replica.num_waiting
            landed.set()

    world.kube.on_scale_write = on_write
    # The reset ended just after a scrape: start the loop at a random point of the scrape
    # interval, so the tick grid, the scrape grid and the jump are mutually independent.
    await asyncio.sleep(offset_s)
    task = asyncio.create_task(loop.run(), name=f"bench-loop-{index}")
    try:
        await until(lambda: bool(loop.tick_starts), 10, "the first tick")
        jump_at = loop.tick_starts[0] + (chain.warmup_ticks + u) * chain.tick_s
        await asyncio.sleep(max(0.0, jump_at - time.monotonic()))
        if len(world.kube.scale_writes) != writes_before:
            raise BenchError(f"{chain.name}: a scale write before the jump (not steady)")
        pod = world.ready_pod()
        jump = world.fleet.jump_queue(pod, JUMP_REQUESTS, JUMP_PROMPT_TOKENS, JUMP_OUTPUT_TOKENS)
        scrape = chain.scrape_interval_s or 0.0
        timeout_s = 2 * chain.tick_s + 2 * scrape + 20
        try:
            await asyncio.wait_for(landed.wait(), timeout_s)
        except TimeoutError:
            raise BenchError(
                f"{chain.name}: no scale write {timeout_s:.0f}s after the jump"
            ) from None
    finally:
        world.kube.on_scale_write = None
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    write = next(
        w for w in world.kube.scale_writes[writes_before:] if w.t_monotonic >= jump.t_monotonic
    )
    acting = max(t for t in loop.tick_starts if t <= write.t_monotonic)
    status = loop.state.status(REF)
    reconciles = len(status.history) if status is not None else 0
    before = max((t for t in loop.tick_starts if t <= jump.t_monotonic), default=acting)
    return Burst(
        index=index,
        phase=(jump.t_monotonic - before) / chain.tick_s,
        latency_s=write.t_monotonic - jump.t_monotonic,
        wait_s=acting - jump.t_monotonic,
        tick_work_s=write.t_monotonic - acting,
        waiting_at_jump=jump.waiting_after,
        waiting_at_write=seen.get("waiting", -1),
        replicas_from=write.replicas_from,
        replicas_to=write.replicas_to,
        ticks=sum(1 for t in loop.tick_starts if t <= write.t_monotonic),
        reconciles=reconciles,
    )


def strata(rng: random.Random, n: int) -> list[float]:
    """``n`` draws in [0, 1), one per stratum ``[i/n, (i+1)/n)``, in random order: a few
    bursts still cover every phase (two such lists, shuffled apart, stay independent)."""
    order = list(range(n))
    rng.shuffle(order)
    return [(i + rng.random()) / n for i in order]


async def run_chain(
    world: World, chain: Chain, rng: random.Random, deadline: float, log: Callable[[str], None]
) -> ChainRun:
    spec = TargetSpec(
        ref=REF,
        policy=load_policy(policy(chain.tick_s)),
        scale_target_ref=ScaleTargetRef(kind="Deployment", name=REF.name),
    )
    prom = world.proms[chain.scrape_interval_s] if chain.scrape_interval_s else None
    signals = SourceSignals(make_source(chain, world))
    bursts: list[Burst] = []
    truncated = False
    started = time.monotonic()
    phases, offsets = strata(rng, chain.bursts), strata(rng, chain.bursts)
    try:
        # A running controller has warm connections: one untimed read opens them.
        await world.reset(spec, prom)
        await signals.read(spec, await world.cluster.observe(spec), time.monotonic())
        for i in range(chain.bursts):
            # worst case of one more burst: reset + warm-up + jump phase + two scrapes/ticks
            need = 3 * (chain.scrape_interval_s or 1) + (chain.warmup_ticks + 3) * chain.tick_s
            if time.monotonic() + need > deadline:
                truncated = True
                break
            await world.reset(spec, prom)
            offset_s = offsets[i] * (chain.scrape_interval_s or 0.0)
            burst = await one_burst(world, chain, signals, spec, i, u=phases[i], offset_s=offset_s)
            bursts.append(burst)
            log(
                f"  {chain.name} #{i:02d}: {burst.latency_s * 1000:8.1f} ms "
                f"(phase {burst.phase:.2f}, waited {burst.wait_s * 1000:.0f} ms, "
                f"tick work {burst.tick_work_s * 1000:.1f} ms, "
                f"skipped {burst.ticks - burst.reconciles} of {burst.ticks} ticks)"
            )
    finally:
        await signals.close()
    return ChainRun(chain, bursts, truncated, time.monotonic() - started)
