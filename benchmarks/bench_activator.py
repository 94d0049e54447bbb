"""The activator's cost and reach (issue 38): what it adds when warm, what it can hold when
cold, and how fast a held request reaches the controller's scale patch.

Run: .venv/bin/python benchmarks/bench_activator.py [--requests 2000] [--held 10000]
(writes benchmarks/results/activator.json)

Processes: a fake vLLM pod (aiohttp: a small JSON answer, or ``--tokens`` SSE tokens
``--token-interval-ms`` apart) and the activator each run in their own process, so the
activator's CPU and RSS are its own (read from /proc); the load generator is this process.

1. Added latency, side by side: the same requests, alternately direct to the pod and
   through the activator, one in flight (pure added latency) and ``--concurrency`` in
   flight; p50/p99 of the request latency and of the streamed tokens' inter-arrival gap,
   and time to the first token.
2. CPU per 1,000 requests/s: the activator's CPU seconds over a closed-loop run of
   ``--requests`` at ``--concurrency``, as cores needed at 1,000 requests/s.
3. Held requests: ``--held`` concurrent clients held by one activator process whose model
   has no Ready endpoint; its RSS before and while holding them (goal: 10,000 within
   512 MB), then how many were answered 503 at shutdown (none may hang).
4. Poke -> decision: in one process, the controller (local Kubernetes API, a 600 s polling
   interval so only the poke can act), an activator pushing to it, ``--pokes`` targets at
   zero, one request each, in turn; from sending the request to its Deployment's
   ``spec.replicas`` >= 1 in the API (goal p99 <= 100 ms). The first request after start
   (connections still to open) is reported apart.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import multiprocessing
import os
import resource
import socket
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.percentiles import nearest_rank  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "activator.json"
MODEL = "bench-model"
TICKS = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------------------- processes
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _pin(core: int) -> None:
    with contextlib.suppress(AttributeError, OSError):
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(0, {core})


def _pod_main(port: int, tokens: int, interval_s: float) -> None:
    _pin(1)

    async def complete(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if not body.get("stream"):
            return web.json_response(
                {"id": "x", "object": "text_completion", "model": MODEL,
                 "choices": [{"index": 0, "text": " hi", "finish_reason": "stop"}]}
            )  # fmt: skip
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(tokens):
            chunk = {"id": "x", "choices": [{"index": 0, "text": f" t{i}"}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
            await asyncio.sleep(interval_s)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def health(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/v1/completions", complete)
    app.router.add_get("/health", health)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


def _activator_main(port: int, config: dict[str, Any]) -> None:
    _pin(0)
    _raise_fd_limit()
    from autoscaler.activator.config import parse_config
    from autoscaler.activator.runtime import ActivatorProcess
    from autoscaler.logging import configure_logging

    configure_logging(fmt="console", level="WARNING")

    async def main() -> None:
        proc = ActivatorProcess(parse_config(config), host="127.0.0.1", port=port, grace_s=1.0)
        await proc.start()
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(15, stop.set)
        await stop.wait()
        await proc.stop()

    asyncio.run(main())


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _wait_port(port: int, timeout_s: float = 20.0) -> None:
    end = time.monotonic() + timeout_s
    while True:
        try:
            _, w = await asyncio.open_connection("127.0.0.1", port)
            w.close()
            return
        except OSError:
            if time.monotonic() > end:
                raise
            await asyncio.sleep(0.05)


# ---------------------------------------------------------------------------- 1 + 2
async def _one(http: aiohttp.ClientSession, url: str, stream: bool) -> tuple[float, list[float]]:
    """(latency to the last byte, token arrival times relative to the start)."""
    body = {"model": MODEL, "prompt": "x", "stream": stream}
    t0 = time.perf_counter()
    arrivals: list[float] = []
    async with http.post(url + "/v1/completions", json=body) as r:
        if stream:
            async for line in r.content:
                if line.startswith(b"data: {"):
                    arrivals.append(time.perf_counter() - t0)
        else:
            await r.read()
        assert r.status == 200, r.status
    return time.perf_counter() - t0, arrivals


async def _round(
    http: aiohttp.ClientSession, url: str, n: int, concurrency: int, stream: bool
) -> tuple[list[float], list[float], list[float]]:
    lat: list[float] = []
    gaps: list[float] = []
    ttft: list[float] = []
    queue = iter(range(n))

    async def worker() -> None:
        for _ in queue:
            total, arrivals = await _one(http, url, stream)
            lat.append(total)
            if arrivals:
                ttft.append(arrivals[0])
                gaps.extend(b - a for a, b in itertools.pairwise(arrivals))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return lat, gaps, ttft


def _ms(values: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(nearest_rank(values, 0.5) * 1000, 3),
        "p99_ms": round(nearest_rank(values, 0.99) * 1000, 3),
        "n": len(values),
    }


async def bench_warm(args: argparse.Namespace) -> dict[str, Any]:
    pod_port, act_port = _free_port(), _free_port()
    pod = multiprocessing.Process(
        target=_pod_main, args=(pod_port, args.tokens, args.token_interval_ms / 1000), daemon=True
    )
    pod.start()
    config = {"targets": [{"model": MODEL, "endpoints": [f"127.0.0.1:{pod_port}"]}],
              "defaults": {"maxConcurrencyPerReplica": 10_000}}  # fmt: skip
    act = multiprocessing.Process(target=_activator_main, args=(act_port, config), daemon=True)
    act.start()
    direct, via = f"http://127.0.0.1:{pod_port}", f"http://127.0.0.1:{act_port}"
    out: dict[str, Any] = {}
    try:
        await _wait_port(pod_port)
        await _wait_port(act_port)
        conn = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=conn) as http:
            for _ in range(50):  # the activator's first probe, then warm both paths
                with contextlib.suppress(AssertionError, aiohttp.ClientError):
                    await _one(http, via, False)
                    break
                await asyncio.sleep(0.05)
            await _round(http, direct, 50, 4, False)
            await _round(http, via, 50, 4, False)
            rows: dict[str, dict[str, Any]] = {}
            # Interleaved slices so machine noise hits both paths alike.
            for case, conc, stream, n in (
                ("sequential", 1, False, args.requests // 4),
                ("concurrent", args.concurrency, False, args.requests),
                ("streaming", args.concurrency, True, max(args.requests // 10, 50)),
            ):
                acc: dict[str, list[list[float]]] = {
                    "direct": [[], [], []], "activator": [[], [], []]
                }  # fmt: skip
                slices = 5
                for _ in range(slices):
                    for name, url in (("direct", direct), ("activator", via)):
                        res = await _round(http, url, n // slices, conc, stream)
                        for i in range(3):
                            acc[name][i].extend(res[i])
                rows[case] = {}
                for name in ("direct", "activator"):
                    lat, gaps, ttft = acc[name]
                    entry: dict[str, Any] = {"latency": _ms(lat)}
                    if stream:
                        entry["token_gap"] = _ms(gaps)
                        entry["ttft"] = _ms(ttft)
                    rows[case][name] = entry
                out[case] = {"concurrency": conc, **rows[case]}
            # CPU: the activator process's CPU over one closed-loop run.
            n = args.requests
            cpu0, t0 = _cpu_s(act.pid or 0), time.perf_counter()
            await _round(http, via, n, args.concurrency, False)
            cpu1, t1 = _cpu_s(act.pid or 0), time.perf_counter()
            rate = n / (t1 - t0)
            out["cpu"] = {
                "requests": n,
                "requests_per_s": round(rate, 1),
                "activator_cpu_s": round(cpu1 - cpu0, 3),
                "cores_per_1000_rps": round((cpu1 - cpu0) / n * 1000, 3),
                "activator_rss_mb": round(_rss_mb(act.pid or 0), 1),
            }
    finally:
        for p in (act, pod):
            p.terminate()
            p.join(5)
    return out


# ---------------------------------------------------------------------------- 3
async def bench_held(args: argparse.Namespace) -> dict[str, Any]:
    _raise_fd_limit()
    act_port = _free_port()
    config = {
        "targets": [{"model": MODEL, "endpoints": [f"127.0.0.1:{_free_port()}"]}],
        "defaults": {"holdCap": args.held + 100, "holdTimeoutS": 3600, "heartbeatS": 300},
    }
    act = multiprocessing.Process(target=_activator_main, args=(act_port, config), daemon=True)
    act.start()
    url = f"http://127.0.0.1:{act_port}/v1/completions"
    try:
        await _wait_port(act_port)
        await asyncio.sleep(0.5)
        rss0 = _rss_mb(act.pid or 0)
        conn = aiohttp.TCPConnector(limit=0, force_close=True)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=60)
        async with aiohttp.ClientSession(connector=conn, timeout=timeout) as http:
            statuses: list[int] = []

            async def client() -> None:
                try:
                    async with http.post(url, json={"model": MODEL, "prompt": "x"}) as r:
                        await r.read()
                        statuses.append(r.status)
                except aiohttp.ClientError:
                    statuses.append(-1)

            t0 = time.perf_counter()
            tasks = []
            for i in range(args.held):
                tasks.append(asyncio.create_task(client()))
                if i % 500 == 499:
                    await asyncio.sleep(0.05)  # let the connections open
            held = await _held_count(act_port)
            while held < args.held and time.perf_counter() - t0 < 120:
                await asyncio.sleep(0.5)
                held = await _held_count(act_port)
            opened_s = time.perf_counter() - t0
            await asyncio.sleep(1.0)
            rss1 = _rss_mb(act.pid or 0)
            held = await _held_count(act_port)
            t_stop = time.perf_counter()
            act.terminate()  # SIGTERM: every held request gets a retryable 503
            await asyncio.wait_for(asyncio.gather(*tasks), 60)
            answered_s = time.perf_counter() - t_stop
    finally:
        act.terminate()
        act.join(5)
    return {
        "held": held,
        "rss_idle_mb": round(rss0, 1),
        "rss_holding_mb": round(rss1, 1),
        "kb_per_held_request": round((rss1 - rss0) * 1024 / max(held, 1), 2),
        "seconds_to_open": round(opened_s, 1),
        "shutdown_503": statuses.count(503),
        "shutdown_other": len(statuses) - statuses.count(503),
        "shutdown_all_answered_s": round(answered_s, 2),
    }


async def _held_count(port: int) -> int:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics") as r:
        text = await r.text()
    total = 0.0
    for line in text.splitlines():
        if line.startswith("llm_activator_held_requests{"):
            total += float(line.rsplit(" ", 1)[1])
    return int(total)


# ---------------------------------------------------------------------------- 4
async def bench_poke(args: argparse.Namespace) -> dict[str, Any]:
    from autoscaler.activator.config import parse_config
    from autoscaler.activator.runtime import ActivatorProcess
    from autoscaler.app import Controller
    from autoscaler.domain import TargetRef
    from autoscaler.kube.config import api_client_for
    from autoscaler.kube.localapi.server import LocalKubeAPI
    from autoscaler.logging import configure_logging
    from autoscaler.names import CRD_GROUP, CRD_PLURAL
    from autoscaler.policy.schema import load_policy
    from autoscaler.settings import GrpcSettings, HttpSettings, Settings
    from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object

    configure_logging(fmt="console", level="WARNING")
    policy = load_policy(
        {"minReplicaCount": 0, "maxReplicaCount": 8, "pollingInterval": 600,
         "cooldownPeriod": 600, "metrics": [{"signal": "waiting", "target": 4}]}
    )  # fmt: skip
    # model-0 is the warm-up: its poke opens the activator's and the client's connections
    # (reported apart as the first request after start); the others are the samples.
    names = [f"model-{i}" for i in range(args.pokes + 1)]
    samples: list[float] = []
    async with LocalKubeAPI() as kube:
        for name in names:
            dep = {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "namespace": "llm"},
                "spec": {
                    "replicas": 0,
                    "selector": {"matchLabels": {"app": name}},
                    "template": {
                        "metadata": {"labels": {"app": name}},
                        "spec": {"containers": [{"name": "v", "image": "v"}]},
                    },
                },
            }
            kube.create("deployments", dep, group="apps")
            spec = TargetSpec(TargetRef("llm", name), policy, ScaleTargetRef(name=name))
            kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
        settings = Settings(
            http=HttpSettings(host="127.0.0.1", port=0),
            grpc=GrpcSettings(host="127.0.0.1", port=0),
            namespace="llm",
            leader_election=False,
        )
        api = api_client_for(kube.url)
        ctl = Controller(settings, api, identity="bench")
        await ctl.start()
        while any(
            (st := ctl.state.status(TargetRef("llm", n))) is None or st.last_decision is None
            for n in names
        ):
            await ctl.state.wait_for_change(1.0)  # the first tick decides every target
        assert ctl.http is not None
        cfg = {
            "controller": {"url": ctl.http.url},
            "targets": [{"model": n, "namespace": "llm", "autoscaler": n,
                         "endpoints": [f"127.0.0.1:{_free_port()}"]} for n in names],
            "defaults": {"holdTimeoutS": 3600},
        }  # fmt: skip
        act = ActivatorProcess(parse_config(cfg), host="127.0.0.1", port=0, probe_interval_s=60)
        await act.start()
        # limit=0: every held request keeps its connection open
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
            tasks = []
            for n in names:
                t0 = time.perf_counter()
                tasks.append(
                    asyncio.create_task(
                        http.post(act.url + "/v1/completions", json={"model": n, "prompt": "x"})
                    )
                )
                while True:
                    obj = kube.get("deployments", "llm", n, group="apps")
                    if obj is not None and obj["spec"]["replicas"] >= 1:
                        break
                    await asyncio.sleep(0.0005)
                samples.append(time.perf_counter() - t0)
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        await act.stop()
        await ctl.stop()
        await api.close()
    return {
        "targets": args.pokes,
        "first_after_start_ms": round(samples[0] * 1000, 2),
        "request_to_scale_patch": {**_ms(samples[1:]), "max_ms": round(max(samples[1:]) * 1000, 2)},
    }


# ---------------------------------------------------------------------------- main
def _table(results: dict[str, Any]) -> None:
    warm = results["warm"]
    print("\nAdded latency (ms), direct to the pod vs through the activator, side by side")
    print(f"{'case':<24}{'direct p50':>12}{'p99':>10}{'activator p50':>16}{'p99':>10}")
    for case in ("sequential", "concurrent", "streaming"):
        row = warm[case]
        metrics = ["latency"] + (["ttft", "token_gap"] if case == "streaming" else [])
        for m in metrics:
            d, a = row["direct"][m], row["activator"][m]
            label = f"{case} x{row['concurrency']} {m}"
            print(
                f"{label:<24}{d['p50_ms']:>12.2f}{d['p99_ms']:>10.2f}"
                f"{a['p50_ms']:>16.2f}{a['p99_ms']:>10.2f}"
            )
    cpu = warm["cpu"]
    print(
        f"\nCPU: {cpu['cores_per_1000_rps']:.3f} cores per 1,000 requests/s "
        f"({cpu['requests']} requests at {cpu['requests_per_s']:.0f}/s, "
        f"{cpu['activator_cpu_s']:.2f} CPU s; RSS {cpu['activator_rss_mb']} MB)"
    )
    if "held" in results:
        h = results["held"]
        print(
            f"Held: {h['held']} requests in one activator process, RSS {h['rss_idle_mb']} -> "
            f"{h['rss_holding_mb']} MB ({h['kb_per_held_request']} KB each); on SIGTERM "
            f"{h['shutdown_503']} answered 503 (others {h['shutdown_other']}) in "
            f"{h['shutdown_all_answered_s']} s"
        )
    if "poke" in results:
        p = results["poke"]["request_to_scale_patch"]
        print(
            f"Poke: request -> scale patch visible in the API: p50 {p['p50_ms']:.1f} ms, "
            f"p99 {p['p99_ms']:.1f} ms, max {p['max_ms']:.1f} ms over {p['n']} targets "
            f"(first after start: {results['poke']['first_after_start_ms']} ms)"
        )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"args": vars(args), "cpus": os.cpu_count()}
    results["warm"] = await bench_warm(args)
    if args.held:
        results["held"] = await bench_held(args)
    if args.pokes:
        results["poke"] = await bench_poke(args)
    return results


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--token-interval-ms", type=float, default=10.0)
    ap.add_argument("--held", type=int, default=10_000)
    ap.add_argument("--pokes", type=int, default=200)
    ap.add_argument("--no-write", action="store_true", help="print only")
    ns = ap.parse_args()
    res = asyncio.run(main(ns))
    _table(res)
    if not ns.no_write:
        RESULTS.write_text(json.dumps(res, indent=2) + "\n")
        print(f"\nwrote {RESULTS.relative_to(ROOT)}")
