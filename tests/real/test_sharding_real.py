"""Sharded leadership against a real kube-apiserver 1.24, as the controller's
ServiceAccount under the shipped Role: two replicas split the shard Leases (the real
Lease list+watch, replace with resourceVersion, delete with a precondition), and one
stopping hands its shards to the other at once; two `llm-autoscaler run` processes split
40 targets, and one killed with SIGKILL hands its targets over without two writers.
Real time, short Leases."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.sharding import ShardConfig, ShardManager, assign, shard_of
from tests.real.conftest import CONTROLLER_NS, CONTROLLER_USER, vllm_deployment
from tests.real.controlplane import ControlPlane, free_port
from tests.real.kubectl import Kube
from tests.real.test_crd_real import llmas
from tests.support.waiting import until

SHARDS = 8
CFG = ShardConfig(
    namespace=CONTROLLER_NS,
    shards=SHARDS,
    prefix="real-shards",  # not the shipped prefix: no other test's Leases in the way
    lease_duration_s=3.0,
    renew_deadline_s=2.0,
    retry_period_s=0.4,
)


def split(managers: list[ShardManager]) -> bool:
    share = assign(SHARDS, [m.identity for m in managers])
    return all(m.status().writable == tuple(share[m.identity]) for m in managers)


async def test_two_replicas_split_the_shards_and_a_stopping_one_hands_them_over(
    kube: Kube, controller_api: ApiClient
) -> None:
    a = ShardManager(controller_api, CFG, "real-a")
    b = ShardManager(controller_api, CFG, "real-b")
    tasks = []
    try:
        for m in (a, b):
            m.start()
            tasks.append(asyncio.get_running_loop().create_task(m.run()))
        await until(lambda: split([a, b]), 30, "a and b to split the 8 shards")
        assert a.held and b.held and not set(a.held) & set(b.held)
        lease = await kube.get(
            f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NS}/leases/real-shards-shard-0"
        )
        assert lease["spec"]["holderIdentity"] in ("real-a", "real-b")
        assert lease["metadata"]["labels"]["autoscaler.llmscaler.io/lease-role"] == "shard"
        tasks[0].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await tasks[0]
        started = time.monotonic()
        await a.release_all()
        assert time.monotonic() - started < 5  # inside the shutdown budget
        await until(lambda: split([b]), 10, "b to take a's released shards")
        leases = await kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{CONTROLLER_NS}/leases")
        names = {item["metadata"]["name"] for item in leases["items"]}
        assert a.member_lease not in names and b.member_lease in names
    finally:
        for t in tasks:
            t.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await t
        await b.release_all()
        for m in (a, b):
            await m.stop()


# ------------------------------------------------- two controller processes, one SIGKILLed
TARGETS = 40
PROC_SHARDS = 4
LEASE_S, RETRY_S, TICK_S = 3.0, 0.4, 0.5  # retry = lease / 7.5, as the controller derives


def _controller(
    ident: str, namespace: str, kubeconfig: str, port: int, log: Path
) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "POD_NAME": ident,
        "AUTOSCALER_LEASE_NAMESPACE": CONTROLLER_NS,
        "AUTOSCALER_LEASE_NAME": "real-kill-leader",
        "AUTOSCALER_SHARD_LEASE_PREFIX": "real-kill",
        "AUTOSCALER_LEASE_DURATION_S": str(LEASE_S),
        "AUTOSCALER_TICK_INTERVAL_S": str(TICK_S),
        "AUTOSCALER_HTTP__HOST": "127.0.0.1",
        "AUTOSCALER_HTTP__PORT": str(port),
        "AUTOSCALER_GRPC__HOST": "127.0.0.1",
        "AUTOSCALER_GRPC__PORT": "0",
    }
    args = [sys.executable, "-m", "autoscaler", "--log-format", "json", "--log-level", "info"]
    args += ["run", "--kubeconfig", kubeconfig, "--mode", "direct", "--namespace", namespace]
    args += ["--shards", str(PROC_SHARDS), "--shard-scope", "held"]
    with log.open("wb") as out:
        return subprocess.Popen(args, stdout=out, stderr=subprocess.STDOUT, env=env)


def _events(log: Path) -> list[dict[str, Any]]:
    """A process's JSON log lines."""
    out = []
    for line in log.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _at(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()


async def _held(http: aiohttp.ClientSession, port: int) -> tuple[int, ...] | None:
    try:
        async with http.get(f"http://127.0.0.1:{port}/readyz") as resp:
            body = await resp.json()
    except (aiohttp.ClientError, ValueError):
        return None
    leadership = body.get("leadership") or {}
    return tuple(leadership.get("writable") or ())


async def test_two_processes_split_the_targets_and_a_killed_ones_move_without_two_writers(
    kube: Kube, namespace: str, control_plane: ControlPlane, tmp_path: Path
) -> None:
    """`llm-autoscaler run --shards 4 --shard-scope held` twice, as the ServiceAccount: each
    process decides and writes only its shards' targets; after a SIGKILL the other decides
    the dead one's targets within leaseDuration + retryPeriod (+ one tick), and the scale
    writes, audited per target from both processes' logs, never have two writers."""
    names = [f"m{i}" for i in range(TARGETS)]
    fallback = {"failureThreshold": 1, "replicas": 2}  # blind (no Ready pod): hold 2
    for name in names:
        dep = vllm_deployment(name, namespace, replicas=1)
        del dep["spec"]["template"]["spec"]["containers"][0]["resources"]  # no GPU cap
        await kube.apply(dep)
        await kube.create(llmas(name, namespace, maxReplicaCount=3, fallback=fallback))
    kubeconfig = str(control_plane.kubeconfig_for(CONTROLLER_USER))
    ports = {"ctrl-a": free_port(), "ctrl-b": free_port()}
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = {ident: tmp_path / f"{ident}.log" for ident in ports}
    for ident, port in ports.items():
        procs[ident] = _controller(ident, namespace, kubeconfig, port, logs[ident])
    share = assign(PROC_SHARDS, list(ports))
    owner = {
        n: next(i for i, ks in share.items() if shard_of(namespace, n, PROC_SHARDS) in ks)
        for n in names
    }
    assert set(owner.values()) == set(ports), "both processes own targets (pick other names)"
    stop = asyncio.Event()

    async def disturb() -> None:
        """Someone keeps setting every Deployment back to 1: its writer sets 2 again."""
        while not stop.is_set():
            for name in names:
                path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"
                with contextlib.suppress(Exception):
                    await kube.request(
                        "PATCH",
                        path,
                        {"spec": {"replicas": 1}},
                        content_type="application/merge-patch+json",
                    )
            await asyncio.sleep(0.5)

    disturber = asyncio.get_running_loop().create_task(disturb())
    try:
        async with aiohttp.ClientSession() as http:

            async def split() -> bool:
                for ident, port in ports.items():
                    if await _held(http, port) != tuple(share[ident]):
                        return False
                return True

            end = time.monotonic() + 60
            while not await split():
                assert time.monotonic() < end, "the two processes never split the shards"
                await asyncio.sleep(0.2)
            audit_from = time.time()
            await asyncio.sleep(4)  # steady: each writes its own targets
            killed_at = time.time()
            procs["ctrl-a"].send_signal(signal.SIGKILL)
            procs["ctrl-a"].wait()
            end = time.monotonic() + 30
            while await _held(http, ports["ctrl-b"]) != tuple(range(PROC_SHARDS)):
                assert time.monotonic() < end, "ctrl-b never took the dead one's shards"
                await asyncio.sleep(0.1)
            await asyncio.sleep(3)  # ctrl-b writes the dead one's targets
    finally:
        stop.set()
        await disturber
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                p.wait(15)
    writes: dict[str, list[tuple[float, str]]] = {n: [] for n in names}
    decided: dict[str, list[tuple[float, str]]] = {n: [] for n in names}
    for ident, log in logs.items():
        for e in _events(log):
            if e.get("event") != "decision" or "target" not in e:
                continue
            name = e["target"].split("/", 1)[1]
            decided[name].append((_at(e), ident))
            if e.get("applied"):
                writes[name].append((_at(e), ident))
    for name in names:
        steady = [who for t, who in writes[name] if audit_from <= t <= killed_at]
        assert steady and set(steady) == {owner[name]}, (name, owner[name], writes[name])
        after = {who for t, who in writes[name] if t > killed_at}
        assert after == {"ctrl-b"}, (name, writes[name])
        if owner[name] == "ctrl-a":
            first = min(t for t, who in decided[name] if who == "ctrl-b" and t > killed_at)
            assert first - killed_at <= LEASE_S + RETRY_S + TICK_S + 0.5, (name, first - killed_at)
            early = [t for t, who in decided[name] if who == "ctrl-b" and t <= killed_at]
            assert not early, (name, "decided by ctrl-b before the kill (scope held)")
