"""Smoke run of the reaction-latency benchmark's code path: one burst per chain.

Asserts behaviour (a scale write lands after the jump, caused by the queue still being
there), never timings: those are measured by `benchmarks/bench_reaction.py`.
"""

from __future__ import annotations

import contextlib
import math
import random
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tests.bench.scripts import load_bench

bench = load_bench("bench_reaction")


@contextlib.asynccontextmanager
async def world(tmp_path: Path, scrape_intervals: set[float]) -> AsyncIterator[Any]:
    w = bench.World(tmp_path)
    try:
        await w.start(scrape_intervals)
        yield w
    finally:
        await w.close()


def _chain(key: str) -> Any:
    matches = [c for c in bench.chains(1, 1) if c.key == key]
    assert len(matches) == 1, key
    return matches[0]


async def _one_burst(w: Any, key: str) -> Any:
    chain = _chain(key)
    logged: list[str] = []
    run = await bench.run_chain(w, chain, random.Random(3), time.monotonic() + 120, logged.append)
    assert not run.truncated and len(run.bursts) == 1
    assert chain.name in logged[0]
    burst = run.bursts[0]
    summary = bench.summarize(run.bursts)
    assert summary["n"] == 1 and summary["p99_s"] == burst.latency_s
    return burst


def _assert_reacted(burst: Any) -> None:
    assert burst.latency_s > 0 and math.isfinite(burst.latency_s)
    assert burst.wait_s >= 0 and burst.tick_work_s >= 0
    assert burst.replicas_from == 1 and burst.replicas_to > 1
    # the write answered a queue still there, above the policy's per-replica target
    assert burst.waiting_at_write > bench.WAITING_TARGET
    # the jump fell at or after the last tick start before it (the phase is < 1 only while
    # ticks are on time: a tick started late on a loaded machine stretches the interval,
    # as in one clean-clone run at 1.03, so no upper bound here: that would time the host)
    assert burst.phase >= 0
    # every tick up to the write reconciled the target (pollingInterval == tick)
    assert burst.ticks >= 4 and burst.reconciles == burst.ticks


async def test_pod_scrape_chains_scale_after_the_jump_and_reset_to_one_replica(
    tmp_path: Path,
) -> None:
    async with world(tmp_path, set()) as w:
        for key in ("pod-1s", "pod-0.5s"):
            _assert_reacted(await _one_burst(w, key))
        dep = w.kube.get("deployments", bench.REF.namespace, bench.REF.name, group="apps")
        assert dep["spec"]["replicas"] > 1  # the last burst left it scaled up
        spec = bench.TargetSpec(
            ref=bench.REF,
            policy=bench.load_policy(bench.policy(1.0)),
            scale_target_ref=bench.ScaleTargetRef(kind="Deployment", name=bench.REF.name),
        )
        await w.reset(spec, None)
        assert w.fleet.get(w.ready_pod()).engine.replica.num_waiting == 0
        dep = w.kube.get("deployments", bench.REF.namespace, bench.REF.name, group="apps")
        assert dep["spec"]["replicas"] == 1


async def test_prometheus_chain_scales_after_the_jump(tmp_path: Path) -> None:
    async with world(tmp_path, {1.0}) as w:
        _assert_reacted(await _one_burst(w, "prom-1s"))
