"""Leadership Leases: R replicas x S shard Leases x T targets on the local API endpoint.

Run: nice -n 10 .venv/bin/python benchmarks/bench_shards.py [--rows 3x16x200 10x64x10000]
     [--lease-duration 15] [--steady 10] [--overlay-targets 500] [--busy-ms 200]
     [--busy-s 10]
(writes benchmarks/results/shards.json)

Each replica is a `ShardManager` running its production loop (`run`: a step every retry
period and on every Lease change, its own Lease ApiClient with the production pool size
and its own Lease watch), all against one local API endpoint in this process; timings are
the production ratios (renew deadline 2/3 and retry period 1/7.5 of the lease duration, as
`Controller` derives them).

**Overlay** (first table): 2 replicas with the shipped sharded overlay's shard count
(deploy/overlays/sharded/config.yaml) at ``--overlay-targets`` targets, side by side with
the settings before it (64 shards, every take sent at once into the 2-connection Lease
pool) and with 64 shards under the in-flight limit alone. Start-up: both replicas start
together while, for the first ``--busy-s`` seconds, the API server answers every Lease
write in ``--busy-ms`` (as when both replicas list the whole fleet at once); counted
until every shard is held once the API is calm again: Lease writes that failed with an
unknown outcome (``lease write failed``: timeout, connection).
Steady: Lease requests/s over ``--steady`` seconds once every shard is held, per target.

**Rows** (second table), per R x S x T:

- spread: from start until every shard is writable by exactly one replica, each holding its
  bounded-rendezvous share;
- steady Lease requests/s (all replicas, counted by the endpoint, by verb) over ``--steady``
  seconds, and per replica; expected (S + R) / retry period (one replace per held shard and
  per member Lease; no GET);
- lost replica: the one holding the most shards stops dead (no release); time until all its
  shards (and so its targets) are writable by the others, against the bound
  lease_duration + retry_period;
- join: a new replica starts; time until it writes its share;
- clean stop: a replica calls `release_all`; time until its shards are writable elsewhere.

Throughout, every 5 ms, it checks that no shard is writable by two replicas, counting the
dead one as long as its own clock lets it write (a sampled check: the tests check it after
every single step).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).parent))

import fleet

from autoscaler.kube.config import LEASE_POOL, api_client_for
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.sharding import ShardConfig, ShardManager, assign, shard_of
from autoscaler.logging import configure_logging

OVERLAY = fleet.ROOT / "deploy" / "overlays" / "sharded" / "config.yaml"
NS = fleet.LEASE_NAMESPACE


class Fleet:
    def __init__(self, kube: LocalKubeAPI, cfg: ShardConfig) -> None:
        self.kube, self.cfg = kube, cfg
        self.managers: dict[str, ShardManager] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._apis: list[Any] = []
        self.dead: list[ShardManager] = []
        self.double: list[tuple[float, int, list[str]]] = []

    def add(self, who: str) -> ShardManager:
        api = api_client_for(self.kube.url, pool_maxsize=LEASE_POOL)
        self._apis.append(api)
        m = ShardManager(api, self.cfg, who)
        m.start()
        self.managers[who] = m
        self._tasks[who] = asyncio.get_running_loop().create_task(m.run())
        return m

    async def kill(self, who: str) -> ShardManager:
        """Dead: no more steps, no release; its Leases simply expire."""
        m = self.managers.pop(who)
        task = self._tasks.pop(who)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await m.stop()
        self.dead.append(m)
        return m

    async def stop(self, who: str) -> None:
        m = self.managers.pop(who)
        task = self._tasks.pop(who)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await m.release_all()
        await m.stop()

    def writers(self, k: int) -> list[str]:
        return [m.identity for m in (*self.managers.values(), *self.dead) if m.writable(k)]

    def check(self) -> None:
        for k in range(self.cfg.shards):
            w = self.writers(k)
            if len(w) > 1:
                self.double.append((time.monotonic(), k, w))

    def converged(self) -> bool:
        share = assign(self.cfg.shards, self.managers)
        return all(
            m.status().writable == tuple(share[who]) for who, m in self.managers.items()
        ) and all(len(self.writers(k)) == 1 for k in range(self.cfg.shards))

    async def until(self, pred: Callable[[], bool], limit_s: float) -> float:
        start = time.monotonic()
        while not pred():
            if time.monotonic() - start > limit_s:
                raise TimeoutError(f"not converged after {limit_s}s")
            self.check()
            await asyncio.sleep(0.005)
        return time.monotonic() - start

    async def close(self) -> None:
        for who in list(self.managers):
            await self.stop(who)
        for api in self._apis:
            await api.close()


def lease_calls(kube: LocalKubeAPI, since: int) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in kube.calls[since:]:
        if c.resource == "leases":
            out[c.verb] = out.get(c.verb, 0) + 1
    return out


async def run_row(
    replicas: int, shards: int, targets: int, args: argparse.Namespace
) -> dict[str, Any]:
    d = args.lease_duration
    cfg = ShardConfig(namespace=NS, shards=shards, **timings(d))
    per_shard = [0] * shards
    for t in range(targets):
        per_shard[shard_of(f"ns{t % 10}", f"model-{t}", shards)] += 1
    async with LocalKubeAPI() as kube:
        fleet = Fleet(kube, cfg)
        try:
            t0 = time.monotonic()
            for r in range(replicas):
                fleet.add(f"replica-{r}")
            spread_s = await fleet.until(fleet.converged, 10 * d)
            before = len(kube.calls)
            t_steady = time.monotonic()
            await fleet.until(lambda: time.monotonic() - t_steady >= args.steady, 10 * d)
            window = time.monotonic() - t_steady
            steady = lease_calls(kube, before)
            steady_rps = sum(steady.values()) / window

            victim = max(fleet.managers.values(), key=lambda m: len(m.held))
            lost = victim.held
            lost_targets = sum(per_shard[k] for k in lost)
            await fleet.kill(victim.identity)
            t_kill = time.monotonic()
            move_s = await fleet.until(fleet.converged, 4 * d)
            del t_kill

            joiner = fleet.add("replica-new")
            join_s = await fleet.until(fleet.converged, 4 * d)
            joined = len(joiner.held)

            leaving = max(fleet.managers.values(), key=lambda m: len(m.held))
            handed = len(leaving.held)
            t_stop = time.monotonic()
            await fleet.stop(leaving.identity)
            release_s = time.monotonic() - t_stop
            stop_s = release_s + await fleet.until(fleet.converged, 4 * d)
            total_s = time.monotonic() - t0
        finally:
            await fleet.close()
    return {
        "replicas": replicas,
        "shards": shards,
        "targets": targets,
        "lease_duration_s": d,
        "retry_period_s": cfg.retry_period_s,
        "spread_s": round(spread_s, 3),
        "steady_lease_requests_per_s": round(steady_rps, 2),
        "steady_per_replica_per_s": round(steady_rps / replicas, 2),
        "expected_per_s": round((shards + replicas) / cfg.retry_period_s, 2),
        "steady_by_verb": steady,
        "lost_shards": len(lost),
        "lost_targets": lost_targets,
        "lost_move_s": round(move_s, 3),
        "lost_bound_s": d + cfg.retry_period_s,
        "join_shards": joined,
        "join_s": round(join_s, 3),
        "stop_shards": handed,
        "stop_move_s": round(stop_s, 3),
        "two_writers_seen": len(fleet.double),
        "run_s": round(total_s, 1),
    }


def timings(d: float) -> dict[str, float]:
    return {
        "lease_duration_s": d,
        "renew_deadline_s": d * 2 / 3,
        "retry_period_s": max(d / 7.5, 0.1),
    }


def overlay_shards() -> int:
    doc = yaml.safe_load(OVERLAY.read_text())
    return int(doc["data"]["AUTOSCALER_SHARDS"])


async def overlay_row(
    label: str, shards: int, in_flight: int, args: argparse.Namespace
) -> dict[str, Any]:
    """2 replicas start together on a busy API server, then hold their shards."""
    cfg = ShardConfig(
        namespace=NS, shards=shards, max_in_flight=in_flight, **timings(args.lease_duration)
    )
    targets = args.overlay_targets
    async with LocalKubeAPI() as kube:
        fleet = Fleet(kube, cfg)
        busy = [
            kube.inject("/leases", None, method=m, delay_s=args.busy_ms / 1000, times=10**9)
            for m in ("POST", "PUT")
        ]

        async def calm_down() -> None:
            await asyncio.sleep(args.busy_s)
            for f in busy:
                kube.faults.remove(f)

        calm = asyncio.get_running_loop().create_task(calm_down())
        try:
            for r in range(2):
                fleet.add(f"replica-{r}")
            spread_s = await fleet.until(fleet.converged, args.busy_s + 10 * args.lease_duration)
            await calm
            failures = sum(m.write_failures for m in fleet.managers.values())
            before = len(kube.calls)
            t0 = time.monotonic()
            await fleet.until(lambda: time.monotonic() - t0 >= args.steady, 10 * args.steady)
            window = time.monotonic() - t0
            steady = lease_calls(kube, before)
        finally:
            calm.cancel()
            await fleet.close()
    rps = sum(steady.values()) / window
    return {
        "settings": label,
        "replicas": 2,
        "shards": shards,
        "lease_requests_in_flight": in_flight,
        "targets": targets,
        "busy_ms": args.busy_ms,
        "busy_s": args.busy_s,
        "startup_spread_s": round(spread_s, 2),
        "startup_lease_write_failures": failures,
        "steady_lease_requests_per_s": round(rps, 2),
        "steady_by_verb": steady,
        "steady_lease_requests_per_target_s": round(rps / targets, 4),
        "two_writers_seen": len(fleet.double),
    }


def overlay_table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| settings (2 replicas) | shards | Lease requests in flight | start-up: lease write "
        "failures (busy API, spread s) | steady Lease requests/s | per target/s |\n"
        "|---|---|---|---|---|---|\n"
    )
    return head + "".join(
        f"| {r['settings']} | {r['shards']} | {r['lease_requests_in_flight']} "
        f"| {r['startup_lease_write_failures']} ({r['startup_spread_s']} s) "
        f"| {r['steady_lease_requests_per_s']} | {r['steady_lease_requests_per_target_s']} |\n"
        for r in rows
    )


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| R x S x T | spread | Lease req/s (per replica; expected) | lost replica: shards "
        "(targets) moved in (bound) | join: shards in | clean stop: shards in | two writers |\n"
        "|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['replicas']} x {r['shards']} x {r['targets']:,} | {r['spread_s']:.2f} s "
        f"| {r['steady_lease_requests_per_s']} ({r['steady_per_replica_per_s']}; "
        f"{r['expected_per_s']}) | {r['lost_shards']} ({r['lost_targets']:,}) in "
        f"{r['lost_move_s']:.2f} s ({r['lost_bound_s']:g} s) "
        f"| {r['join_shards']} in {r['join_s']:.2f} s | {r['stop_shards']} in "
        f"{r['stop_move_s']:.2f} s | {r['two_writers_seen']} |\n"
        for r in rows
    )
    return head + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", nargs="*", default=["3x16x200", "10x64x10000"])
    parser.add_argument("--lease-duration", type=float, default=15.0)
    parser.add_argument("--steady", type=float, default=10.0)
    parser.add_argument("--overlay-targets", type=int, default=500)
    parser.add_argument(
        "--busy-ms",
        type=float,
        default=200.0,
        help="how long the API server takes to answer each Lease write at start-up",
    )
    parser.add_argument(
        "--busy-s", type=float, default=10.0, help="how long start-up keeps it that busy"
    )
    args = parser.parse_args()
    configure_logging(fmt="console", level="ERROR")
    logging.getLogger("aiohttp.server").setLevel(logging.CRITICAL)  # clients that gave up
    command = fleet.command_line("bench_shards.py")
    overlay = [
        asyncio.run(overlay_row("before: 64 shards, every take sent at once", 64, 10**6, args)),
        asyncio.run(overlay_row("64 shards, in flight <= the Lease pool", 64, LEASE_POOL, args)),
        asyncio.run(overlay_row("shipped overlay", overlay_shards(), LEASE_POOL, args)),
    ]
    print(overlay_table(overlay), flush=True)
    rows = []
    for spec in args.rows:
        r, s, t = (int(x) for x in spec.split("x"))
        row = asyncio.run(run_row(r, s, t, args))
        rows.append(row)
        print(table([row]), flush=True)
    document = {
        "benchmark": "bench_shards",
        "command": command,
        "overlay": overlay,
        "rows": rows,
        "markdown": overlay_table(overlay) + "\n" + table(rows),
    }
    print(document["markdown"])
    fleet.write_results("shards.json", document)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
