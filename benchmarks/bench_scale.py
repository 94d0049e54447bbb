"""The controller at fleet scale: N targets x 8 pods, one process, pollingInterval 1 s.

Run: nice -n 10 .venv/bin/python benchmarks/bench_scale.py --targets 10 100 [--duration 60]
(writes benchmarks/results/scale.json; one row per N, merged with the rows already there)

The measured process runs the same composition as ``llm-autoscaler run`` (the
`Controller`: CRD policy store + watch, leader election, informers, pod scraping, the
control loop, REST and gRPC servers, JSON logs at INFO to a file). Another process serves
the cluster: the local Kubernetes API endpoint (N Deployments, N x 8 Ready pods, N
LLMAutoscalers) and every pod's /metrics on its own loopback IP (127.x.y.z, one listening
socket per pod; a minimal asyncio responder with the vLLM V1 fixture page whose counters
and buckets advance every scrape, from bench_scrape.py). The policy keeps the fleet
steady (running 42 per pod, target 42 per replica: desired = current = 8), with the
forecast planner on, so steady state is what is measured: no scale writes.

After ``--warmup`` seconds it measures for ``--duration`` seconds: tick duration p50/p99
(the loop's own observation), decisions per target per second, CPU (cores and CPU-seconds
per tick per target: the machine is shared, so the CPU figure is the one to compare),
RSS over time, API requests/s as counted by the endpoint, and log lines/s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_scrape import _Pod, variants

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "scale.json"
NAMESPACE = "fleet"
POLICY = {
    "maxReplicaCount": 16,
    "metrics": [{"signal": "running", "target": 42}],
    "prediction": {"enabled": True},
}


def pod_ip(g: int) -> str:
    """Pod ``g``'s own loopback address (127.1.0.1, 127.1.0.2, ...)."""
    return f"127.{1 + g // 62500}.{(g // 250) % 250}.{g % 250 + 1}"


# ----------------------------------------------------------------------------- cluster
def serve_cluster(targets: int, pods: int, ready_file: str, stats_file: str) -> None:
    """The other process: the local API endpoint and every pod's metrics server."""
    asyncio.run(_serve_cluster(targets, pods, Path(ready_file), Path(stats_file)))


async def _serve_cluster(targets: int, pods: int, ready: Path, stats: Path) -> None:
    from autoscaler.domain import TargetRef
    from autoscaler.kube.crd import spec_to_object
    from autoscaler.kube.localapi import LocalKubeAPI
    from autoscaler.kube.names import CRD_GROUP, CRD_PLURAL
    from autoscaler.policy.schema import load_policy
    from autoscaler.store.base import ScaleTargetRef, TargetSpec

    loop = asyncio.get_running_loop()
    responses = variants()
    protocols: list[_Pod] = []

    def factory() -> _Pod:
        p = _Pod(responses)
        protocols.append(p)
        return p

    servers = []
    port = 0
    for g in range(targets * pods):
        server = await loop.create_server(factory, pod_ip(g), port)
        port = server.sockets[0].getsockname()[1]  # the same port on every pod IP
        servers.append(server)
    policy = load_policy(POLICY)
    async with LocalKubeAPI(port=0) as kube:
        for t in range(targets):
            name = f"m{t:04d}"
            labels = {"app": name}
            kube.create(
                "deployments",
                {
                    "metadata": {"name": name, "namespace": NAMESPACE},
                    "spec": {
                        "replicas": pods,
                        "selector": {"matchLabels": labels},
                        "template": {
                            "metadata": {"labels": labels},
                            "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                        },
                    },
                },
                group="apps",
            )
            for p in range(pods):
                pod = f"{name}-{p}"
                kube.create(
                    "pods",
                    {
                        "metadata": {"name": pod, "namespace": NAMESPACE, "labels": labels},
                        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                    },
                )
                kube.mark_pod_ready(NAMESPACE, pod, ip=pod_ip(t * pods + p))
            spec = TargetSpec(
                ref=TargetRef(NAMESPACE, name),
                policy=policy,
                scale_target_ref=ScaleTargetRef(name=name),
                metrics_port=port,
            )
            kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
        kube.calls.clear()
        _write(ready, json.dumps({"url": kube.url}))
        while True:
            verbs: dict[str, int] = {}
            for c in kube.calls:
                key = f"{c.verb} {c.resource}"
                verbs[key] = verbs.get(key, 0) + 1
            scrapes = sum(p.sent for p in protocols)
            tmp = stats.with_suffix(".tmp")
            tmp.write_text(
                json.dumps({"calls": len(kube.calls), "verbs": verbs, "scrapes": scrapes})
            )
            tmp.replace(stats)
            await asyncio.sleep(1.0)


def _write(path: Path, text: str) -> None:
    """Atomically (the other process reads it while we write)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# -------------------------------------------------------------------------- controller
def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def measure(
    url: str, targets: int, pods: int, stats: Path, args: argparse.Namespace
) -> dict[str, Any]:
    from autoscaler.api.metrics import ControllerMetrics
    from autoscaler.app import Controller
    from autoscaler.domain import Decision, TargetRef
    from autoscaler.kube.config import api_client_for
    from autoscaler.settings import GrpcSettings, HttpSettings, Settings

    class Recording(ControllerMetrics):
        def __init__(self) -> None:
            super().__init__()
            self.tick_log: list[tuple[float, float]] = []  # (end time, duration)
            self.decided = 0

        def observe_tick(self, duration_s: float) -> None:
            super().observe_tick(duration_s)
            self.tick_log.append((time.monotonic(), duration_s))

        def observe_decision(self, ref: TargetRef, decision: Decision) -> None:
            super().observe_decision(ref, decision)
            self.decided += 1

    def api_calls() -> dict[str, Any]:
        return dict(json.loads(stats.read_text()))

    settings = Settings(
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=1.0,
        leader_election=True,
        scrape_concurrency=args.scrape_concurrency,
    )
    metrics = Recording()
    if args.trace_memory:
        import tracemalloc

        tracemalloc.start()
    api = api_client_for(url)
    ctl = Controller(settings, api, identity="bench", metrics=metrics)
    t0 = time.monotonic()
    await ctl.start()
    samples: list[dict[str, float]] = []
    try:
        await asyncio.sleep(args.warmup)
        start_t, start_cpu, start_dec = time.monotonic(), cpu_s(), metrics.decided
        start_calls = api_calls()
        end_t = start_t + args.duration
        while (now := time.monotonic()) < end_t:
            samples.append(
                {
                    "t_s": round(now - t0, 1),
                    "rss_mb": round(rss_mb(), 1),
                    "cpu_s": round(cpu_s(), 2),
                }
            )
            await asyncio.sleep(min(10.0, end_t - now))
        wall = time.monotonic() - start_t
        cpu = cpu_s() - start_cpu
        decisions = metrics.decided - start_dec
        end_calls = api_calls()
        samples.append(
            {
                "t_s": round(time.monotonic() - t0, 1),
                "rss_mb": round(rss_mb(), 1),
                "cpu_s": round(cpu_s(), 2),
            }
        )
        leader = ctl.state.is_leader
        if args.trace_memory:
            import tracemalloc

            top = tracemalloc.take_snapshot().statistics("lineno")[:25]
            print("\n".join(str(x) for x in top), file=sys.__stdout__, flush=True)
    finally:
        await ctl.stop()
        await api.close()
    window = [d for end, d in metrics.tick_log if start_t <= end <= start_t + wall]
    q = statistics.quantiles(window, n=100) if len(window) >= 2 else [float("nan")] * 99
    calls = end_calls["calls"] - start_calls["calls"]
    verbs = {
        k: v - start_calls["verbs"].get(k, 0)
        for k, v in end_calls["verbs"].items()
        if v - start_calls["verbs"].get(k, 0)
    }
    return {
        "targets": targets,
        "pods": targets * pods,
        "measured_s": round(wall, 1),
        "ticks": len(window),
        "tick_p50_ms": round(q[49] * 1000, 1),
        "tick_p99_ms": round(q[98] * 1000, 1),
        "decisions_per_target_s": round(decisions / targets / wall, 3),
        "cpu_cores": round(cpu / wall, 3),
        "cpu_ms_per_tick_per_target": round(1000 * cpu / max(len(window), 1) / targets, 3),
        "cpu_ms_per_decision": round(1000 * cpu / max(decisions, 1), 3),
        "rss_mb_end": samples[-1]["rss_mb"],
        "rss_mb_peak": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "api_requests_per_s": round(calls / wall, 3),
        "api_requests_per_target_s": round(calls / wall / targets, 5),
        "api_requests_by_verb": verbs,
        "pod_scrapes_per_s": round((end_calls["scrapes"] - start_calls["scrapes"]) / wall, 1),
        "leader": leader,
        "rss_over_time": samples,
    }


def run_one(targets: int, args: argparse.Namespace) -> dict[str, Any]:
    from autoscaler.logging import configure_logging

    with tempfile.TemporaryDirectory() as tmp:
        ready, stats = Path(tmp) / "ready.json", Path(tmp) / "stats.json"
        proc = multiprocessing.Process(
            target=serve_cluster, args=(targets, args.pods, str(ready), str(stats)), daemon=True
        )
        proc.start()
        try:
            deadline = time.monotonic() + 600
            while not (ready.exists() and stats.exists()):
                if time.monotonic() > deadline or not proc.is_alive():
                    raise RuntimeError("the cluster process did not come up")
                time.sleep(0.2)
            url = json.loads(ready.read_text())["url"]
            log_path = Path(os.environ.get("BENCH_SCALE_LOG") or Path(tmp) / "controller.log")
            real_stderr = sys.stderr
            with open(log_path, "w") as log:
                sys.stderr = log
                configure_logging("json", "INFO")
                try:
                    if args.profile:
                        import cProfile

                        with cProfile.Profile() as prof:
                            result = asyncio.run(measure(url, targets, args.pods, stats, args))
                        prof.dump_stats(args.profile)
                    else:
                        result = asyncio.run(measure(url, targets, args.pods, stats, args))
                finally:
                    sys.stderr = real_stderr
            with open(log_path) as f:
                lines = sum(1 for _ in f)
            result["log_lines_per_s"] = round(lines / (args.warmup + args.duration), 1)
        finally:
            proc.terminate()
            proc.join(timeout=10)
    return result


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        "| targets | pods | tick p50 / p99 (ms) | decisions/target/s | CPU cores | "
        "CPU ms/tick/target | RSS end / peak (MB) | API req/s (per target) | log lines/s |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['targets']} | {r['pods']} | {r['tick_p50_ms']} / {r['tick_p99_ms']} | "
        f"{r['decisions_per_target_s']} | {r['cpu_cores']} | {r['cpu_ms_per_tick_per_target']} | "
        f"{r['rss_mb_end']} / {r['rss_mb_peak']} | {r['api_requests_per_s']} "
        f"({r['api_requests_per_target_s']}) | {r['log_lines_per_s']} |\n"
        for r in rows
    )
    return head + body


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--scrape-concurrency", type=int, default=64)
    parser.add_argument("--profile", default=None, help="write cProfile stats here")
    parser.add_argument(
        "--trace-memory", action="store_true", help="print the top allocating lines at the end"
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    rows = []
    for n in args.targets:
        row = run_one(n, args)
        row["command"] = " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]])
        rows.append(row)
        print(table([row]), flush=True)
    existing = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}
    keep = [
        r for r in existing.get("rows", []) if r["targets"] not in {r2["targets"] for r2 in rows}
    ]
    merged = sorted(keep + rows, key=lambda r: r["targets"])
    document = {
        "benchmark": "bench_scale",
        "machine": {"cpus": os.cpu_count()},
        "rows": merged,
        "markdown": table(merged),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(document["markdown"])
    print(f"wrote {RESULTS}", file=sys.stderr)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
