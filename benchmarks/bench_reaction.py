"""Reaction latency: an emulated pod's queue jumps -> the scale patch lands at the API.

Run: .venv/bin/python benchmarks/bench_reaction.py [--bursts 20] [--slow-bursts 8] [--seed 1]
Writes benchmarks/results/reaction.json (docs/reaction-latency.md explains the numbers).

Each chain group (`GROUPS`) runs in its own process, concurrently (``--sequential``: one
process, one chain after the other; ``--chains k1,k2``: only those). A group's world:
emulated vLLM pods behind the local Kubernetes API (its deployment controller turns pods
into emulators), a real Prometheus scraping them (file discovery) when a chain needs it,
and the real control loop patching the Deployment's scale subresource through
kubernetes-asyncio. The chains differ only in the metrics source, tick and scrape interval:

- ``ours/pod-scrape``: the loop scrapes the pods' /metrics itself (tick 1 s and 0.5 s);
- ``ours/prometheus``: the loop runs PromQL against Prometheus (tick 1 s; scrape 1 s, 15 s);
- ``keda-like``: scrape 15 s + the loop polling every 15 s with KEDA's one query
  (``pollingInterval: 15`` as in the seeds' ScaledObjects).

Each burst: reset to one Ready replica with an empty queue (for Prometheus chains, until
Prometheus itself shows the empty queue), wait a random part of the scrape interval,
start a fresh control loop (fresh decision state), jump the pod's queue at a random phase
of a tick interval three ticks in (seeded, stratified), and time from the jump
(`QueueJump.t_monotonic`, once the requests are in the engine) to the moment the local
API applies the scale write (a subclass hook; same process, same monotonic clock). The
queue is held (long outputs, KV-bound) so it is still there when the slowest chain looks,
and the reset aborts it as a pod restart would: the emulator's speed factor shortens
nothing that is measured, and every latency is in real seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import platform
import random
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # tests.support.prometheus: the real-server helper

from aiohttp import web  # noqa: E402

from autoscaler.control.adapters import KubeCluster  # noqa: E402
from autoscaler.control.loop import ControlLoop  # noqa: E402
from autoscaler.control.signals import SourceSignals  # noqa: E402
from autoscaler.control.state import ControllerState  # noqa: E402
from autoscaler.demo.app import DemoOptions, _deployment, _node  # noqa: E402
from autoscaler.demo.runtime import EmulatorRuntime  # noqa: E402
from autoscaler.domain import Decision, TargetRef  # noqa: E402
from autoscaler.emulator.fleet import EmulatorFleet, QueueJump  # noqa: E402
from autoscaler.kube.config import api_client_for  # noqa: E402
from autoscaler.kube.localapi.server import LocalKubeAPI  # noqa: E402
from autoscaler.logging import configure_logging  # noqa: E402
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig  # noqa: E402
from autoscaler.metrics.prometheus import VLLM_QUERIES, PrometheusSource  # noqa: E402
from autoscaler.metrics.source import MetricSource  # noqa: E402
from autoscaler.policy.schema import load_policy  # noqa: E402
from autoscaler.store.base import ScaleTargetRef, StoredTarget, TargetSpec  # noqa: E402
from tests.support.prometheus import FileSdPrometheus, write_sd  # noqa: E402

REF = TargetRef("demo", "llama-3-8b")
SELECTOR = 'job="vllm"'
# KEDA's Prometheus trigger sends exactly one query (the seeds' ScaledObject).
KEDA_QUERIES: Mapping[str, str] = {"waiting": 'sum(vllm:num_requests_waiting{job="vllm"})'}
WAITING_TARGET = 8
# A held queue: 300 requests x (2048 prompt + 2048 output) keep >90 waiting for >40 s of
# emulated time at speed 1 (KV-bound), longer than the slowest chain's worst case.
JUMP_REQUESTS = 300
JUMP_PROMPT_TOKENS = 2048
JUMP_OUTPUT_TOKENS = 2048
EMULATOR_SPEED = 1.0
COLD_START_S = 2.0  # emulated; pods added by a scale-up are deleted again by the reset


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
class ScaleWrite:
    t_monotonic: float
    replicas_from: int
    replicas_to: int


class TimedKubeAPI(LocalKubeAPI):
    """The local API, plus the monotonic time at which each scale write is applied."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scale_writes: list[ScaleWrite] = []
        self.on_scale_write: Callable[[ScaleWrite], None] | None = None

    def _scale(
        self, request: web.Request, rt: Any, current: dict[str, Any], body: Any
    ) -> tuple[dict[str, Any], int]:
        before = int((current.get("spec") or {}).get("replicas", 0))
        t = time.monotonic()  # the request is parsed; applying it takes microseconds
        scale, status = super()._scale(request, rt, current, body)
        after = int(scale["spec"]["replicas"])
        if request.method != "GET" and status == 200 and after != before:
            write = ScaleWrite(t, before, after)
            self.scale_writes.append(write)
            if self.on_scale_write is not None:
                self.on_scale_write(write)
        return scale, status


class TimedLoop(ControlLoop):
    """The control loop, plus the monotonic start time of each tick."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tick_starts: list[float] = []

    async def tick(self) -> list[Decision]:
        self.tick_starts.append(self.clock.now())
        return await super().tick()


class BenchError(RuntimeError):
    pass


async def until(pred: Callable[[], bool], deadline_s: float, what: str) -> None:
    end = time.monotonic() + deadline_s
    while not pred():
        if time.monotonic() > end:
            raise BenchError(f"timed out after {deadline_s:.0f}s waiting for {what}")
        await asyncio.sleep(0.02)


@dataclass
class World:
    """Everything the chains share; `start` builds it, `close` tears it all down."""

    tmp: Path
    fleet: EmulatorFleet = field(init=False)
    kube: TimedKubeAPI = field(init=False)
    cluster: KubeCluster = field(init=False)
    proms: dict[float, FileSdPrometheus] = field(default_factory=dict)
    _api: Any = None
    _sd_task: asyncio.Task[None] | None = None

    async def start(self, scrape_intervals: set[float]) -> None:
        sd = self.tmp / "targets.json"
        write_sd(sd, [])
        self.fleet = EmulatorFleet(speed=EMULATOR_SPEED)
        runtime = EmulatorRuntime(self.fleet, cold_start_s=COLD_START_S)
        self.kube = TimedKubeAPI(controller=True, runtime=runtime)
        await self.kube.start()
        self.kube.create("nodes", _node("gpu-node-1", 8))
        self.kube.create("deployments", _deployment(DemoOptions()), group="apps")
        for interval in sorted(scrape_intervals):
            prom = FileSdPrometheus(sd, interval)
            prom.start()
            self.proms[interval] = prom
        self._sd_task = asyncio.create_task(self._follow_pods(sd))
        self._api = api_client_for(self.kube.url)
        self.cluster = KubeCluster(self._api)
        await until(lambda: bool(self.fleet.ready_urls()), 30, "the first pod to be Ready")
        for prom in self.proms.values():
            await prom.wait_for(f"vllm:num_requests_waiting{{{SELECTOR}}}", deadline_s=60)

    async def _follow_pods(self, sd: Path) -> None:
        while True:
            write_sd(sd, self.fleet.ready_urls())
            await asyncio.sleep(0.2)

    async def close(self) -> None:
        if self._sd_task is not None:
            self._sd_task.cancel()
            await asyncio.gather(self._sd_task, return_exceptions=True)
        await self.cluster.close()
        if self._api is not None:
            await self._api.close()
        for prom in self.proms.values():
            prom.stop()
        await self.kube.close()
        await self.fleet.stop_all()

    def pods(self) -> list[dict[str, Any]]:
        return self.kube.list_objects("pods", REF.namespace)

    def ready_pod(self) -> str:
        names = [r.name for r in self.fleet.replicas.values() if r.ready]
        if len(names) != 1:
            raise BenchError(f"expected one Ready replica, found {names}")
        return names[0]

    async def reset(self, spec: TargetSpec, prom: FileSdPrometheus | None) -> None:
        """One Ready replica, no queue anywhere, and every reader seeing exactly that."""
        for rep in self.fleet.replicas.values():
            rep.engine.abort_all()  # a pod restart: the held queue is gone
        dep = self.kube.get("deployments", REF.namespace, REF.name, group="apps")
        assert dep is not None
        if int(dep["spec"]["replicas"]) != 1:
            dep["spec"]["replicas"] = 1
            self.kube.update("deployments", dep, group="apps")
        await until(
            lambda: (
                len(self.pods()) == 1
                and len(self.fleet.replicas) == 1
                and next(iter(self.fleet.replicas.values())).ready
            ),
            30,
            "one Ready pod (and one emulator) after the reset",
        )
        end = time.monotonic() + 30
        while True:  # the loop's own view: the pod watcher has caught up
            view = await self.cluster.observe(spec)
            if view.spec_replicas == 1 and len(view.pods) == 1 and view.pending_replicas == 0:
                break
            if time.monotonic() > end:
                raise BenchError(f"the cluster view did not settle: {view}")
            await asyncio.sleep(0.05)
        if prom is not None:  # Prometheus must have scraped the empty queue
            end = time.monotonic() + 3 * prom.scrape_interval_s + 30
            while True:
                res = await asyncio.to_thread(prom.query, KEDA_QUERIES["waiting"])
                if res and float(res[0]["value"][1]) == 0.0:
                    break
                if time.monotonic() > end:
                    raise BenchError(f"Prometheus still shows a queue: {res}")
                await asyncio.sleep(0.1)


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


def quantile(values: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    pos = (len(xs) - 1) * q
    lo, hi = math.floor(pos), math.ceil(pos)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summarize(bursts: list[Burst]) -> dict[str, float | int]:
    lat = [b.latency_s for b in bursts]
    return {
        "n": len(lat),
        "p50_s": quantile(lat, 0.5),
        "p99_s": quantile(lat, 0.99),
        "max_s": max(lat),
        "min_s": min(lat),
        "mean_s": sum(lat) / len(lat),
        "tick_work_p50_s": quantile([b.tick_work_s for b in bursts], 0.5),
        "tick_work_max_s": max(b.tick_work_s for b in bursts),
        "ticks": sum(b.ticks for b in bursts),
        "skipped_ticks": sum(b.ticks - b.reconciles for b in bursts),
    }


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


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'chain':44} {'n':>3} {'p50 s':>7} {'p99 s':>7} {'max s':>7} {'p99/ours':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['chain']:44} {r['n']:3d} {r['p50_s']:7.3f} {r['p99_s']:7.3f} "
            f"{r['max_s']:7.3f} "
            + (f"{r['p99_ratio']:8.1f}x" if r["p99_ratio"] is not None else f"{'-':>9}")
        )
    return "\n".join(lines)


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


async def run_group(keys: list[str], args: argparse.Namespace) -> list[ChainRun]:
    """Run the chains named by ``keys`` in order, in one world, in this process."""
    import tempfile

    configure_logging("json", "warning")
    by_key = {c.key: c for c in chains(args.bursts, args.slow_bursts)}
    selected = [by_key[k] for k in keys]
    deadline = time.monotonic() + args.max_minutes * 60
    runs: list[ChainRun] = []
    with tempfile.TemporaryDirectory(prefix="bench-reaction-") as tmp:
        world = World(Path(tmp))
        try:
            await world.start({c.scrape_interval_s for c in selected if c.scrape_interval_s})
            for chain in selected:
                log(f"{chain.name}: {chain.bursts} bursts")
                rng = random.Random(f"{args.seed}:{chain.key}")
                chain_run = await run_chain(world, chain, rng, deadline, log)
                if not chain_run.bursts:
                    raise BenchError(f"{chain.name}: no burst fitted in --max-minutes")
                runs.append(chain_run)
        finally:
            await world.close()
    return runs


def run_groups(groups: list[str], args: argparse.Namespace) -> list[ChainRun]:
    """One child process per group, concurrently; each writes its raw runs to a file."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory(prefix="bench-reaction-parts-") as tmp:
        procs = []
        for i, group in enumerate(groups):
            part = Path(tmp) / f"part{i}.json"
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                f"--bursts={args.bursts}",
                f"--slow-bursts={args.slow_bursts}",
                f"--seed={args.seed}",
                f"--max-minutes={args.max_minutes}",
                f"--chains={group}",
                f"--part-out={part}",
            ]
            procs.append((subprocess.Popen(cmd, cwd=ROOT), part, group))
        failed = []
        for proc, _, group in procs:
            try:
                code = proc.wait(timeout=args.max_minutes * 60 + 120)
            except subprocess.TimeoutExpired:
                proc.kill()
                code = proc.wait()
            if code != 0:
                failed.append(f"{group} (exit {code})")
        if failed:
            raise BenchError(f"chain groups failed: {', '.join(failed)}")
        runs: list[ChainRun] = []
        for _, part, _ in procs:
            runs.extend(ChainRun.from_json(r) for r in json.loads(part.read_text()))
    return runs


def report(runs: list[ChainRun], args: argparse.Namespace, elapsed_s: float) -> dict[str, Any]:
    order = [c.key for c in chains(1, 1)]
    runs = sorted(runs, key=lambda r: order.index(r.chain.key))
    base = next((r for r in runs if r.chain.source == "pod-scrape"), None)
    base_sum = summarize(base.bursts) if base else None
    rows: list[dict[str, Any]] = []
    for r in runs:
        s = summarize(r.bursts)
        rows.append(
            {
                "chain": r.chain.name,
                **s,
                "p50_ratio": s["p50_s"] / base_sum["p50_s"] if base_sum else None,
                "p99_ratio": s["p99_s"] / base_sum["p99_s"] if base_sum else None,
                "truncated": r.truncated,
                "elapsed_s": r.elapsed_s,
                "config": asdict(r.chain),
                "bursts": [asdict(b) for b in r.bursts],
            }
        )
    return {
        "command": "python benchmarks/bench_reaction.py " + " ".join(sys.argv[1:]),
        "seed": args.seed,
        "elapsed_s": elapsed_s,
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "setup": {
            "emulator_speed": EMULATOR_SPEED,
            "jump": {
                "requests": JUMP_REQUESTS,
                "prompt_tokens": JUMP_PROMPT_TOKENS,
                "output_tokens": JUMP_OUTPUT_TOKENS,
            },
            "policy": policy(1.0) | {"pollingInterval": "= tick"},
            "ratio_base": base.chain.name if base else None,
            "concurrent_groups": None if args.sequential else list(GROUPS),
        },
        "chains": rows,
    }


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    parser.add_argument("--bursts", type=int, default=20, help="bursts per sub-second chain")
    parser.add_argument("--slow-bursts", type=int, default=8, help="bursts per 15 s chain")
    parser.add_argument("--seed", type=int, default=1, help="seeds the phases")
    parser.add_argument("--max-minutes", type=float, default=10.0, help="bound per process")
    parser.add_argument("--chains", default="", help="comma-separated keys: one process")
    parser.add_argument(
        "--sequential", action="store_true", help="all chains in one process, one by one"
    )
    parser.add_argument("--part-out", type=Path, help=argparse.SUPPRESS)
    parser.add_argument(
        "--out", type=Path, default=ROOT / "benchmarks" / "results" / "reaction.json"
    )
    args = parser.parse_args()
    if args.bursts < 1 or args.slow_bursts < 1:
        parser.error("--bursts and --slow-bursts: must be >= 1")
    known = [c.key for c in chains(1, 1)]
    keys = [k for k in args.chains.split(",") if k] if args.chains else []
    for k in keys:
        if k not in known:
            parser.error(f"--chains: value {k!r} is not one of {', '.join(known)}")
    started = time.monotonic()
    if args.part_out is not None:  # a child of run_groups
        runs = asyncio.run(run_group(keys, args))
        args.part_out.write_text(json.dumps([r.to_json() for r in runs]))
        return
    if keys or args.sequential:
        runs = asyncio.run(run_group(keys or known, args))
    else:
        runs = run_groups(list(GROUPS), args)
    result = report(runs, args, time.monotonic() - started)
    print(table(result["chains"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out}")


if __name__ == "__main__":
    main()
