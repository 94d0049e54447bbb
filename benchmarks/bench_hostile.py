"""Hostile clients against `llm-autoscaler run`: many half-open HTTP connections.

The controller runs as users run it (``python -m autoscaler run`` against the local
Kubernetes API endpoint, a fleet of targets whose pods serve vLLM pages on loopback
addresses of their own: benchmarks/fleet.py, bench_scale's cluster process). Attacker
processes then open ``--connections`` connections to its HTTP port, each sending a
partial header (``GET /healthz HTTP/1.1``, ``Host: x``, ``X-A: `` and nothing more), and
hold them for ``--hold`` seconds, reopening any the server closes one second later.

Measured side by side, before and during the attack: each target's decisions per second
(``llm_autoscaler_decisions_total`` from /metrics), /healthz latency (polled every
0.25 s on a fresh connection, as a kubelet probes), the controller's open descriptors
and the failures it logged (reconcile, status write, scale). ``--unbounded`` also runs
the listener without its limits (header deadline 300 s, 1,000,000 connections) as the
reference the bounds are measured against.

    .venv/bin/python benchmarks/bench_hostile.py                # 12 targets, 20,000 x 60 s
    .venv/bin/python benchmarks/bench_hostile.py --unbounded    # and the reference run

Writes benchmarks/results/hostile.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import re
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_scale import serve_cluster

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "hostile.json"
NAMESPACE = "fleet"
PARTIAL = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: "
FAILURES = {
    "reconcile": "reconcile failed",
    "status_write": "status write failed",
    "scale": "scale failed",
    "record": "recording decision failed",
    "loop": "control loop failed",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: bench\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user:\n    token: bench\n"
        "contexts:\n- name: bench\n  context:\n    cluster: bench\n    user: u\n"
        "current-context: bench\n"
    )
    return path


# ----------------------------------------------------------------------------- attacker


def attacker(port: int, connections: int, hold_s: float, out: str, reopen_s: float) -> None:
    """Hold ``connections`` half-open connections for ``hold_s`` seconds (own process)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        stats = runner.run(_attack(port, connections, hold_s, reopen_s))
    usage = resource.getrusage(resource.RUSAGE_SELF)
    stats["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 1)
    Path(out).write_text(json.dumps(stats))


async def _attack(port: int, connections: int, hold_s: float, reopen_s: float) -> dict[str, Any]:
    stats: dict[str, Any] = dict.fromkeys(
        ("opened", "connect_failed", "closed_by_server", "peak_open"), 0
    )
    open_now = 0
    end = time.monotonic() + hold_s
    opening = asyncio.Semaphore(256)  # connects in flight (the kernel's backlog is bounded)

    async def hold_one() -> None:
        nonlocal open_now
        while time.monotonic() < end:
            try:
                async with opening:
                    reader, writer = await asyncio.wait_for(
                        asyncio.open_connection("127.0.0.1", port), 5.0
                    )
            except (OSError, TimeoutError):
                stats["connect_failed"] += 1
                await asyncio.sleep(1.0)
                continue
            stats["opened"] += 1
            open_now += 1
            stats["peak_open"] = max(stats["peak_open"], open_now)
            try:
                writer.write(PARTIAL)
                left = end - time.monotonic()
                with contextlib.suppress(TimeoutError, OSError):
                    if await asyncio.wait_for(reader.read(), max(left, 0.0)) is not None:
                        stats["closed_by_server"] += 1
            finally:
                open_now -= 1
                writer.close()
            await asyncio.sleep(reopen_s)  # then reopen: the pressure lasts the whole hold

    await asyncio.gather(*(hold_one() for _ in range(connections)))
    return stats


# ----------------------------------------------------------------------------- probes


async def probe(port: int, path: str = "/healthz", timeout_s: float = 5.0) -> float | None:
    """Seconds for one GET on a fresh connection (None: failed or over ``timeout_s``)."""
    start = time.perf_counter()
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout_s
        )
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        data = await asyncio.wait_for(reader.read(), timeout_s)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
    if not data.startswith(b"HTTP/1.1 200 "):
        return None
    return time.perf_counter() - start


async def scrape(port: int) -> str | None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 5.0)
    except (OSError, TimeoutError):
        return None
    try:
        writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        data = await asyncio.wait_for(reader.read(), 10.0)
    except (OSError, TimeoutError):
        return None
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return body.decode() if head.startswith(b"HTTP/1.1 200 ") else None


_DECISION = re.compile(r"^llm_autoscaler_decisions_total\{([^}]*)\} ([0-9.e+]+)$", re.M)


def decisions(page: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for labels, value in _DECISION.findall(page):
        name = re.search(r'name="([^"]+)"', labels)
        if name:
            out[name.group(1)] = out.get(name.group(1), 0.0) + float(value)
    return out


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def listen_overflows() -> int:
    """The kernel's count of connections dropped because a listen queue was full (all
    sockets: SYNs dropped there are retried by the client after 1 s, then 3 s)."""
    lines = Path("/proc/net/netstat").read_text().splitlines()
    for names, values in zip(lines[::2], lines[1::2], strict=False):
        if names.startswith("TcpExt:"):
            row = dict(zip(names.split()[1:], values.split()[1:], strict=False))
            return int(row.get("ListenOverflows", -1))
    return -1


def open_fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


async def window(port: int, pid: int, seconds: float) -> dict[str, Any]:
    """Probe /healthz every 0.25 s and sample descriptors for ``seconds``; decisions per
    target from /metrics at both ends (retried until it answers)."""

    async def page() -> str:
        for _ in range(240):
            text = await scrape(port)
            if text is not None:
                return text
            await asyncio.sleep(0.25)
        raise RuntimeError("/metrics did not answer for 60 s")

    first, t0, cpu0 = decisions(await page()), time.monotonic(), proc_cpu_s(pid)
    overflows0 = listen_overflows()
    latencies: list[float | None] = []
    fds: list[int] = []
    end = t0 + seconds
    while time.monotonic() < end:
        latencies.append(await probe(port))
        fds.append(open_fds(pid))
        await asyncio.sleep(0.25)
    last, t1, cpu1 = decisions(await page()), time.monotonic(), proc_cpu_s(pid)
    rates = {k: (last.get(k, 0.0) - first.get(k, 0.0)) / (t1 - t0) for k in last}
    ok = sorted(x for x in latencies if x is not None)
    return {
        "seconds": round(t1 - t0, 1),
        "decisions_per_s_min": round(min(rates.values(), default=0.0), 3),
        "decisions_per_s_mean": round(statistics.fmean(rates.values()), 3) if rates else 0.0,
        "targets": len(rates),
        "healthz_probes": len(latencies),
        "healthz_failed": sum(1 for x in latencies if x is None),
        "healthz_max_ms": round(1000 * ok[-1], 1) if ok else None,
        "healthz_p99_ms": round(1000 * ok[int(0.99 * (len(ok) - 1))], 1) if ok else None,
        "fds_max": max(fds, default=-1),
        "controller_cores": round((cpu1 - cpu0) / (t1 - t0), 2),
        "listen_overflows": listen_overflows() - overflows0,
    }


# ----------------------------------------------------------------------------- run


def failures(log: Path) -> dict[str, int]:
    text = log.read_text(errors="replace")
    return {k: text.count(needle) for k, needle in FAILURES.items()}


def run_one(kube_url: str, tmp: Path, args: argparse.Namespace, bounded: bool) -> dict[str, Any]:
    label = "bounded" if bounded else "unbounded"
    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    env["AUTOSCALER_LOG_FORMAT"] = "json"
    env["AUTOSCALER_NAMESPACE"] = NAMESPACE
    if not bounded:
        env["AUTOSCALER_HTTP__HEADER_TIMEOUT_S"] = "300"
        env["AUTOSCALER_HTTP__MAX_CONNECTIONS"] = "1000000"
    http_port = free_port()
    kubeconfig = write_kubeconfig(tmp / "kubeconfig", kube_url)
    cmd = [sys.executable, "-m", "autoscaler", "run", "--kubeconfig", str(kubeconfig)]
    cmd += ["--http-port", str(http_port), "--grpc-port", str(free_port())]
    cmd += ["--lease-namespace", NAMESPACE]
    log_path = tmp / f"controller-{label}.log"
    with open(log_path, "wb") as log:
        ctl = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
    try:
        result = asyncio.run(_measure(ctl.pid, http_port, tmp, args, label))
    finally:
        ctl.terminate()
        try:
            ctl.wait(timeout=20)
        except subprocess.TimeoutExpired:
            ctl.kill()
            ctl.wait()
    return {"listener": label, **result, "failures_logged": failures(log_path)}


async def _measure(
    pid: int, port: int, tmp: Path, args: argparse.Namespace, label: str
) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while await probe(port, "/readyz", 1.0) is None:
        if time.monotonic() > deadline:
            raise RuntimeError("the controller did not become ready in 60 s")
        await asyncio.sleep(0.25)
    await asyncio.sleep(args.warmup)
    before = await window(port, pid, args.baseline)
    fails_before = failures(tmp / f"controller-{label}.log")
    procs = []
    per_process = -(-args.connections // args.attackers)
    outs = [tmp / f"attack-{label}-{i}.json" for i in range(args.attackers)]
    for out in outs:
        p = multiprocessing.Process(
            target=attacker,
            args=(port, per_process, args.hold, str(out), args.reopen),
            daemon=True,
        )
        p.start()
        procs.append(p)
    await asyncio.sleep(args.ramp)  # the connections are opened
    during = await window(port, pid, args.hold - args.ramp)
    for p in procs:
        p.join(timeout=args.hold + 60)
    attack: dict[str, int] = {}
    for out in outs:
        if out.exists():
            for k, v in json.loads(out.read_text()).items():
                attack[k] = attack.get(k, 0) + int(v)
    return {
        "before": before,
        "during": during,
        "attack": attack,
        "failures_before_attack": fails_before,
    }


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| listener | window | decisions/s min (mean) | /healthz max ms (p99) | failed probes "
        "| fds max | controller cores |\n|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        for name in ("before", "during"):
            w = r[name]
            lines.append(
                f"| {r['listener']} | {name} | {w['decisions_per_s_min']} "
                f"({w['decisions_per_s_mean']}) | {w['healthz_max_ms']} ({w['healthz_p99_ms']}) "
                f"| {w['healthz_failed']}/{w['healthz_probes']} | {w['fds_max']} "
                f"| {w['controller_cores']} |"
            )
    return head + "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--targets", type=int, default=12)
    p.add_argument("--pods", type=int, default=2)
    p.add_argument("--connections", type=int, default=20_000)
    p.add_argument("--attackers", type=int, default=2, help="processes sharing the connections")
    p.add_argument("--hold", type=float, default=60.0, help="seconds the attack lasts")
    p.add_argument(
        "--reopen", type=float, default=1.0, help="seconds before reopening a closed one"
    )
    p.add_argument("--ramp", type=float, default=10.0, help="seconds to open them all")
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--baseline", type=float, default=20.0)
    p.add_argument("--unbounded", action="store_true", help="also the unbounded reference")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        ready, stats = tmp / "ready.json", tmp / "stats.json"
        pages = int(args.warmup + args.baseline + 2 * args.hold) + 600
        cluster = multiprocessing.Process(
            target=serve_cluster,
            args=(args.targets, args.pods, str(ready), str(stats), pages, False),
            daemon=True,
        )
        cluster.start()
        try:
            deadline = time.monotonic() + 120
            while not ready.exists():
                if time.monotonic() > deadline or not cluster.is_alive():
                    raise RuntimeError("the cluster process did not come up")
                time.sleep(0.2)
            kube_url = json.loads(ready.read_text())["url"]
            for bounded in (True, False) if args.unbounded else (True,):
                rows.append(run_one(kube_url, tmp, args, bounded))
                print(json.dumps(rows[-1]), flush=True)
        finally:
            cluster.terminate()
            cluster.join(timeout=10)
    print(table(rows))
    RESULTS.write_text(
        json.dumps({"args": vars(args), "rows": rows}, indent=2, sort_keys=True) + "\n"
    )
    print(f"wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
