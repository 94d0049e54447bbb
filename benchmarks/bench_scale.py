"""The controller at fleet scale: N targets x 8 pods, one process, pollingInterval 1 s.

Run: nice -n 10 .venv/bin/python benchmarks/bench_scale.py --targets 10 100 [--duration 60]
     [--scrape-workers K] [--cluster-loop uvloop|asyncio]
(writes benchmarks/results/scale.json; one row per N and K, merged with the rows there)
Scrape workers side by side: --compare-workers 0 2 [--rounds 2] runs this tree with K=0
and K=2 alternately in fresh processes (writes results/scale_workers_k0_vs_k2.json).
Tick phases side by side: --compare-phases 1 10 --scrape-workers 2 (writes
results/scale_phases_p1_vs_p10.json); each run reports the decision lag (from when each
target was due to its decision) beside the tick duration.
Before/after: --baseline REV [--rounds 2] measures that git revision's code (extracted
with ``git archive``) and this tree alternately in fresh processes, the median of each
side by side (writes benchmarks/results/scale_vs_baseline.json). The controller runs on
the event loop and GC settings of `llm-autoscaler run` (`autoscaler.commands.run`:
``run_loop``, ``tune_gc``) when the code measured has them, else on the defaults.

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
RSS over time, API requests/s as counted by the endpoint, and log lines/s. CPU is the
controller's own (``RUSAGE_SELF``) plus its scrape workers' (utime + stime of each
worker pid in /proc/<pid>/stat, over the same window; a worker restart fails the run),
each also reported alone, and the cluster process's own (/proc, reported apart, never in
the controller's figure). Memory: the controller's RSS as before, and RSS and PSS summed
over the controller and its workers (/proc/<pid>/smaps_rollup). The cluster process runs
on uvloop by default (``--cluster-loop``), recorded in each row.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import inspect
import json
import math
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if "--variant" in sys.argv and "no-lazy-kube" in sys.argv:
    # the ablation's variant (e): the real kubernetes_asyncio.client imported before any
    # autoscaler module, so `autoscaler._lazy_kube.install` leaves it alone
    import kubernetes_asyncio.client  # noqa: F401

sys.path.insert(0, str(Path(__file__).parent))

from bench_scrape import Responses, _Pod
from fleet import pod_ip, populate
from revisions import compared_table, extract, short_rev, tree_rev

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "scale.json"
DEFAULT_PHASES = 10  # the tick phases the ablation's "default" runs
POLICY = {
    "maxReplicaCount": 16,
    "metrics": [{"signal": "running", "target": 42}],
    "prediction": {"enabled": True},
}


# ----------------------------------------------------------------------------- cluster
def serve_cluster(
    targets: int,
    pods: int,
    ready_file: str,
    stats_file: str,
    pages: int,
    wrap: bool,
    loop_choice: str = "uvloop",
) -> None:
    """The other process: the local API endpoint and every pod's metrics server, on
    uvloop unless ``loop_choice`` is asyncio (or uvloop is not installed): at 8,000
    pages/s this process takes ~1 core on asyncio's loop, which the controller side of a
    2-core machine then lacks."""
    main = _serve_cluster(targets, pods, Path(ready_file), Path(stats_file), pages, wrap)
    factory = None
    if loop_choice == "uvloop":
        with contextlib.suppress(ImportError):
            import uvloop

            factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


async def _serve_cluster(
    targets: int, pods: int, ready: Path, stats: Path, pages: int, wrap: bool
) -> None:
    from autoscaler.kube.localapi import LocalKubeAPI
    from autoscaler.policy.schema import load_policy

    loop = asyncio.get_running_loop()
    responses = Responses(pages)
    protocols: list[_Pod] = []

    def factory() -> _Pod:
        p = _Pod(responses, wrap)
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
        populate(kube, targets, pods, policy, port)
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


CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of another process (a scrape worker, the cluster), from
    /proc/<pid>/stat (clock ticks, 10 ms)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_pss_mb(pid: int | str = "self") -> tuple[float, float]:
    """RSS and PSS (shared pages divided among the processes sharing them) of a
    process, from /proc/<pid>/smaps_rollup."""
    rss = pss = float("nan")
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Rss:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("Pss:"):
                pss = int(line.split()[1]) / 1024
    return rss, pss


def _worker_pids(ctl: Any, *, reapers: bool = False) -> list[int]:
    """The controller's scrape worker processes (none in-process), then with ``reapers``
    their reapers (none on older code): what the controller's CPU and memory include."""
    source = getattr(getattr(ctl.loop, "signals", None), "source", None)
    pids = getattr(source, "pids", None)
    if not callable(pids):
        return []
    extra = getattr(source, "reaper_pids", list)() if reapers else []
    return [*(p for p in pids() if p is not None), *extra]


async def measure(
    url: str, targets: int, pods: int, stats: Path, args: argparse.Namespace, cluster_pid: int
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
            self.lag_log: list[tuple[float, float]] = []  # (time, decision lag)
            self.decided = 0
            self.by_target: dict[TargetRef, int] = {}

        def observe_decision_lag(self, lag_s: float) -> None:  # code since tick phases
            super().observe_decision_lag(lag_s)
            self.lag_log.append((time.monotonic(), lag_s))

        def observe_tick(self, duration_s: float) -> None:
            super().observe_tick(duration_s)
            self.tick_log.append((time.monotonic(), duration_s))

        def observe_decision(self, ref: TargetRef, decision: Decision) -> None:
            super().observe_decision(ref, decision)
            self.decided += 1
            self.by_target[ref] = self.by_target.get(ref, 0) + 1

    def api_calls() -> dict[str, Any]:
        return dict(json.loads(stats.read_text()))

    extra: dict[str, Any] = {}
    if args.scrape_workers:  # code before scrape workers ignores the setting
        extra["scrape_workers"] = args.scrape_workers
    # --tick-phases P: as the flag (code before tick phases has no such setting);
    # unset: the code's own default
    if args.tick_phases is not None and "tick_phases" in Settings.model_fields:
        extra["tick_phases"] = args.tick_phases
    settings = Settings(
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=1.0,
        leader_election=True,
        scrape_concurrency=args.scrape_concurrency,
        **extra,
    )
    metrics = Recording()
    if args.trace_memory:
        import tracemalloc

        tracemalloc.start()
    gc_time = [0.0, 0.0, 0.0]
    gc_count = [0, 0, 0]
    gc_start = [0.0]
    gc_found = [0, 0, 0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            gc_start[0] = time.perf_counter()
        else:
            gc_time[info["generation"]] += time.perf_counter() - gc_start[0]
            gc_count[info["generation"]] += 1
            gc_found[info["generation"]] += info["collected"]

    gc.callbacks.append(on_gc)
    if args.variant == "aiohttp":  # (b): the pods' pages over aiohttp
        import autoscaler.metrics.pod_scrape as pod_scrape

        setattr(pod_scrape, "PageClient", AiohttpPageClient)  # noqa: B010
    api = api_client_for(url)
    ctl = Controller(settings, api, identity="bench", metrics=metrics)
    t0 = time.monotonic()
    await ctl.start()
    phases = getattr(ctl.loop, "tick_phases", 1)  # what the loop runs
    if os.environ.get("BENCH_NO_STRAGGLER") and ctl.loop is not None:
        ctl.loop.straggler_wait_s = None
    # what `llm-autoscaler run` does once started, as far as the code measured has it
    tune = _run_module_attr("tune_gc")
    pacer = None
    if tune is not None:
        # between the GC pacer's commit and its removal, tune_gc took the controller
        pacer = tune(ctl) if inspect.signature(tune).parameters else tune()
    trimmer = None
    every = _run_module_attr("release_free_memory_every")  # as `llm-autoscaler run` did
    if every is not None:
        trimmer = asyncio.create_task(every())
    samples: list[dict[str, float]] = []

    def sample(now: float) -> dict[str, float]:
        rss, pss = rss_pss_mb()
        for pid in _worker_pids(ctl, reapers=True):
            w_rss, w_pss = rss_pss_mb(pid)
            rss, pss = rss + w_rss, pss + w_pss
        return {
            "t_s": round(now - t0, 1),
            "rss_mb": round(rss_mb(), 1),
            "rss_mb_sum": round(rss, 1),
            "pss_mb_sum": round(pss, 1),
            "cpu_s": round(cpu_s(), 2),
        }

    try:
        await asyncio.sleep(args.warmup)
        workers = _worker_pids(ctl)
        if len(workers) != args.scrape_workers:
            raise RuntimeError(f"{len(workers)} scrape workers up, {args.scrape_workers} asked")
        helpers = _worker_pids(ctl, reapers=True)  # the workers and their reapers
        start_workers = sum(proc_cpu_s(p) for p in helpers)
        start_cluster = proc_cpu_s(cluster_pid)
        start_t, start_cpu, start_dec = time.monotonic(), cpu_s(), metrics.decided
        start_by_target = dict(metrics.by_target)
        start_gc, start_gc_n = list(gc_time), list(gc_count)
        start_faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start_calls = api_calls()
        end_t = start_t + args.duration
        while (now := time.monotonic()) < end_t:
            samples.append(sample(now))
            await asyncio.sleep(min(10.0, end_t - now))
        wall = time.monotonic() - start_t
        own_cpu = cpu_s() - start_cpu
        if _worker_pids(ctl) != workers:
            raise RuntimeError(f"scrape workers restarted: {workers} -> {_worker_pids(ctl)}")
        workers_cpu = sum(proc_cpu_s(p) for p in helpers) - start_workers
        cluster_cpu = proc_cpu_s(cluster_pid) - start_cluster
        cpu = own_cpu + workers_cpu
        decisions = metrics.decided - start_dec
        per_target = [
            metrics.by_target.get(ref, 0) - start_by_target.get(ref, 0) for ref in ctl.state.targets
        ]
        end_calls = api_calls()
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - start_faults
        gc_s = [b - a for a, b in zip(start_gc, gc_time, strict=True)]
        gc_n = [b - a for a, b in zip(start_gc_n, gc_count, strict=True)]
        samples.append(sample(time.monotonic()))
        worker_mem = [rss_pss_mb(p) for p in workers]
        leader = ctl.state.is_leader
        if args.trace_memory:
            import tracemalloc

            top = tracemalloc.take_snapshot().statistics("lineno")[:25]
            print("\n".join(str(x) for x in top), file=sys.__stdout__, flush=True)
    finally:
        gc.callbacks.remove(on_gc)
        if trimmer is not None:
            trimmer.cancel()
        await ctl.stop()
        await api.close()
    window = [d for end, d in metrics.tick_log if start_t <= end <= start_t + wall]
    q = statistics.quantiles(window, n=100) if len(window) >= 2 else [float("nan")] * 99
    lags = [lag for t, lag in metrics.lag_log if start_t <= t <= start_t + wall]
    lag_q = statistics.quantiles(lags, n=100) if len(lags) >= 2 else [float("nan")] * 99
    # ticks of the whole interval: a phased loop's ticks are phases (some skipped when
    # one runs long), so there a tick is one decision per target
    n_ticks = max(len(window) if phases <= 1 else decisions / targets, 1)
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
        "tick_phases": phases,
        # from when each target was due to its decision (code before tick phases: nan)
        "decision_lag_p50_ms": round(lag_q[49] * 1000, 1),
        "decision_lag_p99_ms": round(lag_q[98] * 1000, 1),
        "decision_lag_max_ms": round(max(lags) * 1000, 1) if lags else float("nan"),
        "decisions_per_target_s": round(decisions / targets / wall, 3),
        # the least-decided target's rate (a target never decided counts as 0)
        "min_decisions_per_target_s": round(
            min(per_target + [0] * (targets - len(per_target))) / wall, 3
        ),
        "variant": args.variant,
        "scrape_workers": args.scrape_workers,
        "cluster_loop": args.cluster_loop,
        # CPU: the controller's own (RUSAGE_SELF) + its scrape workers' (/proc/<pid>/stat)
        "cpu_cores": round(cpu / wall, 3),
        "cpu_cores_controller": round(own_cpu / wall, 3),
        "cpu_cores_workers": round(workers_cpu / wall, 3),
        "cluster_cpu_cores": round(cluster_cpu / wall, 3),
        "cpu_ms_per_tick_per_target": round(1000 * cpu / n_ticks / targets, 3),
        "cpu_ms_per_tick_per_target_controller": round(1000 * own_cpu / n_ticks / targets, 3),
        "cpu_ms_per_decision": round(1000 * cpu / max(decisions, 1), 3),
        "gc_ms_per_s": round(1000 * sum(gc_s) / wall, 1),
        "minor_faults_per_s": round(faults / wall),
        "gc_collections_by_generation": gc_n,
        "gc_paced_collections": getattr(pacer, "collections", None),  # of those, since start
        "gc_ms_by_generation": [round(1000 * x, 1) for x in gc_s],
        "gc_collected_by_generation": list(gc_found),
        "rss_mb_end": samples[-1]["rss_mb"],
        # the controller + its scrape workers, /proc/<pid>/smaps_rollup
        "rss_mb_sum_end": samples[-1]["rss_mb_sum"],
        "pss_mb_sum_end": samples[-1]["pss_mb_sum"],
        "worker_rss_pss_mb": [[round(r, 1), round(p, 1)] for r, p in worker_mem],
        "rss_mb_peak": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "api_requests_per_s": round(calls / wall, 3),
        "api_requests_per_target_s": round(calls / wall / targets, 5),
        "api_requests_by_verb": verbs,
        "pod_scrapes_per_s": round((end_calls["scrapes"] - start_calls["scrapes"]) / wall, 1),
        "leader": leader,
        "event_loop": type(asyncio.get_running_loop()).__module__,
        "rss_over_time": samples,
    }


class AiohttpPageClient:
    """`PageClient`'s interface on aiohttp (the ablation's variant (b)): one
    ``ClientSession`` with a keep-alive connector, ``ClientTimeout(total=timeout_s)`` for
    the whole request (connect, headers and body), the body bounded while it arrives."""

    def __init__(self, *, timeout_s: float, max_body_bytes: int, keepalive_s: float = 30.0) -> None:
        import aiohttp

        self.timeout_s = timeout_s
        self.max_body_bytes = max_body_bytes
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=keepalive_s),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers={"Accept": "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"},
        )
        self._urls: dict[tuple[str, bytes], Any] = {}
        self.connects = 0

    async def get(self, url: str, query: bytes = b"") -> bytes:
        import yarl

        from autoscaler.metrics.page_client import PageFetchError

        key = (url, query)
        target = self._urls.get(key)
        if target is None:
            sep = "&" if "?" in url else "?"
            full = f"{url}{sep}{query.decode('ascii')}" if query else url
            target = self._urls[key] = yarl.URL(full, encoded=True)
        async with self._session.get(target, allow_redirects=False) as resp:
            if resp.status != 200:
                raise PageFetchError(f"HTTP {resp.status}")
            if (resp.content_length or 0) > self.max_body_bytes:
                raise PageFetchError(f"body over {self.max_body_bytes} bytes")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_any():
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise PageFetchError(f"body over {self.max_body_bytes} bytes")
                chunks.append(chunk)
            return b"".join(chunks)

    def release_buffers(self) -> int:
        return 0

    def idle_connections(self) -> int:
        return 0

    async def close(self) -> None:
        await self._session.close()


def _run_module_attr(name: str) -> Any:
    """``autoscaler.commands.run.<name>`` if the code measured has it (a baseline may not)."""
    from autoscaler.commands import run

    return getattr(run, name, None)


def page_variants(args: argparse.Namespace) -> tuple[int, bool]:
    """How many page variants each pod serves and whether they wrap. By default enough
    for the whole run at one scrape per second, never wrapping: every pod's counters grow
    on every scrape and never go back, as on a live vLLM pod. ``--page-variants K`` is
    the harness before 2026-12-02: K variants cycled, so every pod looked restarted every
    K scrapes and its window took the counter-reset path."""
    if args.page_variants:
        return args.page_variants, True
    return math.ceil(args.warmup + args.duration) + 120, False


def run_one(targets: int, args: argparse.Namespace) -> dict[str, Any]:
    from autoscaler.logging import configure_logging

    with tempfile.TemporaryDirectory() as tmp:
        ready, stats = Path(tmp) / "ready.json", Path(tmp) / "stats.json"
        # spawned, not forked: it shares no pages with the measured process, whose PSS
        # is then its own
        proc = multiprocessing.get_context("spawn").Process(
            target=serve_cluster,
            args=(
                targets,
                args.pods,
                str(ready),
                str(stats),
                *page_variants(args),
                args.cluster_loop,
            ),
            daemon=True,
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
                    run_loop = _run_module_attr("run_loop")
                    assert proc.pid is not None
                    main = measure(url, targets, args.pods, stats, args, proc.pid)
                    if args.profile:
                        import cProfile

                        with cProfile.Profile() as prof:
                            result = asyncio.run(main)
                        prof.dump_stats(args.profile)
                    elif run_loop is not None:  # the event loop `llm-autoscaler run` runs on
                        result = run_loop(main, args.event_loop)
                    else:  # code from before run_loop: asyncio's loop
                        result = asyncio.run(main)
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
        "| targets | pods | scrape workers | tick p50 / p99 (ms) | decisions/target/s | "
        "CPU cores (controller + workers) | CPU ms/tick/target | RSS / PSS sum (MB) | "
        "cluster cores | API req/s (per target) | log lines/s |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['targets']} | {r['pods']} | {r.get('scrape_workers', 0)} | "
        f"{r['tick_p50_ms']} / {r['tick_p99_ms']} | {r['decisions_per_target_s']} | "
        f"{r['cpu_cores']} ({r.get('cpu_cores_controller', r['cpu_cores'])} + "
        f"{r.get('cpu_cores_workers', 0.0)}) | {r['cpu_ms_per_tick_per_target']} | "
        f"{r.get('rss_mb_sum_end', r['rss_mb_end'])} / {r.get('pss_mb_sum_end', '-')} | "
        f"{r.get('cluster_cpu_cores', '-')} ({r.get('cluster_loop', 'asyncio')}) | "
        f"{r['api_requests_per_s']} ({r['api_requests_per_target_s']}) | "
        f"{r['log_lines_per_s']} |\n"
        for r in rows
    )
    return head + body


def _run_worker(
    code: Path | None,
    targets: int,
    args: argparse.Namespace,
    workers: int | None = None,
    phases: int | None = None,
    variant: str = "default",
) -> dict[str, Any]:
    """One measurement in a fresh process, of the code under ``code`` (else this tree),
    with ``workers`` scrape workers (default: ``--scrape-workers``) and ``phases`` tick
    phases (default: ``--tick-phases``)."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    cmd = [sys.executable, __file__, "--worker", "--targets", str(targets), "--pods"]
    cmd += [str(args.pods), "--warmup", str(args.warmup), "--duration", str(args.duration)]
    cmd += ["--scrape-concurrency", str(args.scrape_concurrency)]
    cmd += ["--event-loop", args.event_loop, "--page-variants", str(args.page_variants)]
    cmd += ["--cluster-loop", args.cluster_loop]
    cmd += ["--scrape-workers", str(args.scrape_workers if workers is None else workers)]
    tick_phases = args.tick_phases if phases is None else phases
    if tick_phases is not None:
        cmd += ["--tick-phases", str(tick_phases)]
    cmd += ["--variant", variant]
    # run in the measured tree: its scrape workers (python -m) import from the working
    # directory first (code before 61a04f9 does not choose their directory itself)
    cwd = str(code or ROOT)
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=cwd).stdout
    row: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    expected = str((code or ROOT) / "autoscaler")
    if row["code"] != expected:
        raise RuntimeError(f"worker imported {row['code']}, expected {expected}")
    return row


COMPARED = (
    ("CPU ms/tick/target", "cpu_ms_per_tick_per_target"),
    ("CPU cores (controller + workers)", "cpu_cores"),
    ("CPU cores, controller", "cpu_cores_controller"),
    ("CPU cores, workers", "cpu_cores_workers"),
    ("cluster process cores", "cluster_cpu_cores"),
    ("tick p50 (ms)", "tick_p50_ms"),
    ("tick p99 (ms)", "tick_p99_ms"),
    ("decision lag p50 (ms)", "decision_lag_p50_ms"),
    ("decision lag p99 (ms)", "decision_lag_p99_ms"),
    ("decision lag max (ms)", "decision_lag_max_ms"),
    ("decisions/target/s", "decisions_per_target_s"),
    ("GC ms/s", "gc_ms_per_s"),
    ("minor page faults/s", "minor_faults_per_s"),
    ("RSS end (MB)", "rss_mb_end"),
)
WORKERS_COMPARED = (
    *COMPARED,
    ("RSS sum, controller + workers (MB)", "rss_mb_sum_end"),
    ("PSS sum, controller + workers (MB)", "pss_mb_sum_end"),
)


def compare_workers(args: argparse.Namespace) -> None:
    """``--compare-workers K1 K2``: this tree with K1 then K2 scrape workers, alternately
    in fresh processes, ``--rounds`` times each per N; medians side by side."""
    k1, k2 = args.compare_workers
    _compare_tree(
        args,
        "--compare-workers",
        (f"K={k1}", {"workers": k1}),
        (f"K={k2}", {"workers": k2}),
        f"scale_workers_k{k1}_vs_k{k2}.json",
    )


def compare_phases(args: argparse.Namespace) -> None:
    """``--compare-phases P1 P2``: this tree with P1 then P2 tick phases (and
    ``--scrape-workers``), alternately in fresh processes, ``--rounds`` times each per N."""
    p1, p2 = args.compare_phases
    _compare_tree(
        args,
        "--compare-phases",
        (f"P={p1}", {"phases": p1}),
        (f"P={p2}", {"phases": p2}),
        f"scale_phases_p{p1}_vs_p{p2}.json",
    )


def _compare_tree(
    args: argparse.Namespace,
    option: str,
    first: tuple[str, dict[str, Any]],
    second: tuple[str, dict[str, Any]],
    default_name: str,
) -> None:
    """This tree with two settings (a label and `_run_worker`'s keywords each),
    alternately in fresh processes."""
    (l1, kw1), (l2, kw2) = first, second
    head = tree_rev()
    document: dict[str, Any] = {
        "benchmark": f"bench_scale {option}",
        "command": " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]]),
        "code": head,
        "machine": {"cpus": os.cpu_count(), "load_before": os.getloadavg()},
        "by_targets": {},
    }
    markdown = ""
    for n in args.targets:
        before: list[dict[str, Any]] = []
        after: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            before.append(_run_worker(None, n, args, **kw1))
            print(table([before[-1]]), flush=True)
            after.append(_run_worker(None, n, args, **kw2))
            print(table([after[-1]]), flush=True)
        table_rows, part = compared_table(
            f"N={n} targets x {args.pods} pods on {head}, median of {args.rounds} alternating "
            f"runs (cluster on {args.cluster_loop})",
            before,
            after,
            WORKERS_COMPARED,
            l1,
            l2,
        )
        print(part, flush=True)
        markdown += part + "\n"
        document["by_targets"][str(n)] = {
            "rows": table_rows,
            "raw": {l1: before, l2: after},
        }
    document["machine"]["load_after"] = os.getloadavg()
    document["markdown"] = markdown
    name = args.out or default_name
    out = Path(name) if os.sep in name else RESULTS.with_name(name)  # a path, or a name there
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


# The ablation (``--ablation``): each variant in a fresh process, (name, scrape workers,
# tick phases); "default" is the configuration with every mechanism on and no flags.
ABLATION_VARIANTS: tuple[tuple[str, int, int], ...] = (
    ("default", 0, DEFAULT_PHASES),
    ("workers", 2, DEFAULT_PHASES),
    ("aiohttp", 0, DEFAULT_PHASES),
    ("no-lazy-kube", 0, DEFAULT_PHASES),
    ("no-phases", 0, 1),
)
# (mechanism, the variant with it, the variant without it)
MECHANISMS: tuple[tuple[str, str, str], ...] = (
    ("(a) scrape worker pool (K=2 vs in-process)", "workers", "default"),
    ("(b) hand-written HTTP/epoll client (vs aiohttp)", "default", "aiohttp"),
    ("(e) lazy kubernetes_asyncio (sys.modules)", "default", "no-lazy-kube"),
    (f"(f) tick phases (P={DEFAULT_PHASES} vs 1)", "default", "no-phases"),
)
# (label, key, True when higher is better): the figures the 20% rule reads
ABLATION_FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("CPU ms/tick/target", "cpu_ms_per_tick_per_target", False),
    ("PSS MB (group)", "pss_mb_sum_end", False),
    ("decision lag p99 ms", "decision_lag_p99_ms", False),
    ("decisions/target/s", "decisions_per_target_s", True),
    ("min decisions/target/s", "min_decisions_per_target_s", True),
)
RULE = 0.20  # a mechanism stays only if removing it costs more than this on one figure


def removal_cost(with_: float, without: float, higher_is_better: bool) -> float:
    """What removing a mechanism costs on one figure, as a fraction of the figure with
    it (positive: worse without it)."""
    if not with_ or math.isnan(with_) or math.isnan(without):
        return float("nan")
    return (with_ - without) / with_ if higher_is_better else (without - with_) / with_


def ablation(args: argparse.Namespace) -> None:
    """``--ablation``: every `ABLATION_VARIANTS` entry in a fresh process, one after the
    other, ``--rounds`` rounds (the machine is shared: a round sees the same load for
    every variant); the median of each figure, and each mechanism's removal cost."""
    head = tree_rev()
    n = args.targets[0]
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name, _, _ in ABLATION_VARIANTS}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        # the tree as it is now, for every run: edits made while it runs are not measured
        code = Path(tmp)
        shutil.copytree(ROOT / "autoscaler", code / "autoscaler")
        # the worker pool was removed by the ablation's verdict: its variant runs the
        # revision given by --workers-rev (extracted with git archive), else is skipped
        pool = code
        if not (code / "autoscaler/metrics/scrape_workers.py").exists():
            pool = (
                extract(args.workers_rev, code.with_name(code.name + "-w"))
                if args.workers_rev
                else None
            )
        for r in range(args.rounds):
            for name, workers, phases in ABLATION_VARIANTS:
                if name == "workers" and pool is None:
                    continue
                tree = pool if name == "workers" else code
                assert tree is not None
                row = _run_worker(tree, n, args, workers=workers, phases=phases, variant=name)
                raw[name].append(row)
                print(f"round {r + 1} {name}:\n{table([row])}", flush=True)
    raw = {name: rows for name, rows in raw.items() if rows}
    medians = {
        name: {key: _median([row[key] for row in rows]) for _, key, _ in ABLATION_FIGURES}
        | {"rss_mb_sum_end": _median([row["rss_mb_sum_end"] for row in rows])}
        | {"cpu_cores": _median([row["cpu_cores"] for row in rows])}
        for name, rows in raw.items()
    }
    verdicts = []
    for mechanism, with_, without in MECHANISMS:
        if with_ not in medians or without not in medians:
            continue
        costs = {
            key: removal_cost(medians[with_][key], medians[without][key], better)
            for _, key, better in ABLATION_FIGURES
        }
        worst = max((c for c in costs.values() if not math.isnan(c)), default=float("nan"))
        verdicts.append(
            {
                "mechanism": mechanism,
                "with": with_,
                "without": without,
                "removal_cost": {k: round(v, 3) for k, v in costs.items()},
                "verdict": "stays" if worst > RULE else "goes",
            }
        )
    markdown = ablation_table(n, args, medians, verdicts)
    print(markdown, flush=True)
    document = {
        "benchmark": "bench_scale --ablation",
        "command": " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]]),
        "code": head,
        "targets": n,
        "pods_per_target": args.pods,
        "rounds": args.rounds,
        "memory": "PSS summed over the controller and its worker/reaper processes "
        "(/proc/<pid>/smaps_rollup); the cluster process is spawned, sharing no pages",
        "machine": {
            "cpus": os.cpu_count(),
            "load_before": load_before,
            "load_after": os.getloadavg(),
        },
        "variants": {
            name: {"scrape_workers": w, "tick_phases": p} for name, w, p in ABLATION_VARIANTS
        },
        "medians": medians,
        "mechanisms": verdicts,
        "markdown": markdown,
        "raw": raw,
    }
    name = args.out or "ablation.json"
    out = Path(name) if os.sep in name else RESULTS.with_name(name)
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return round(statistics.median(finite), 3) if finite else float("nan")


def ablation_table(
    n: int,
    args: argparse.Namespace,
    medians: dict[str, dict[str, float]],
    verdicts: list[dict[str, Any]],
) -> str:
    head = (
        f"N={n} targets x {args.pods} pods, 1 s polling, one process, median of "
        f"{args.rounds} rounds; each cell: with -> without (removal cost)\n\n"
        "| mechanism | "
        + " | ".join(label for label, _, _ in ABLATION_FIGURES)
        + " | verdict |\n|---|"
        + "---|" * (len(ABLATION_FIGURES) + 1)
        + "\n"
    )
    body = ""
    for v in verdicts:
        cells = [
            f"{medians[v['with']][key]} -> {medians[v['without']][key]} "
            f"({v['removal_cost'][key]:+.0%})"
            for _, key, _ in ABLATION_FIGURES
        ]
        body += f"| {v['mechanism']} | " + " | ".join(cells) + f" | {v['verdict']} |\n"
    return head + body


def compare(args: argparse.Namespace) -> None:
    """``--baseline REV``: that revision's code and this tree, alternately in fresh
    processes, ``--rounds`` times each per N; medians side by side."""
    rev = short_rev(args.baseline)
    head = short_rev(args.current) if args.current else tree_rev()
    document: dict[str, Any] = {
        "benchmark": "bench_scale --baseline",
        "command": " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]]),
        "baseline": rev,
        "current": head,
        "machine": {"cpus": os.cpu_count()},
        "by_targets": {},
    }
    markdown = ""
    with tempfile.TemporaryDirectory() as tmp:
        code = extract(rev, Path(tmp) / "base")
        current = extract(args.current, Path(tmp) / "cur") if args.current else None
        for n in args.targets:
            before: list[dict[str, Any]] = []
            after: list[dict[str, Any]] = []
            for _ in range(args.rounds):
                before.append(_run_worker(code, n, args))
                after.append(_run_worker(current, n, args))
            table_rows, part = compared_table(
                f"N={n} targets x {args.pods} pods, median of {args.rounds} alternating runs "
                f"({before[0]['event_loop']} -> {after[0]['event_loop']})",
                before,
                after,
                COMPARED,
                rev,
                head,
            )
            print(part, flush=True)
            markdown += part + "\n"
            document["by_targets"][str(n)] = {
                "rows": table_rows,
                "raw": {"before": before, "after": after},
            }
    document["markdown"] = markdown
    out = RESULTS.with_name("scale_vs_baseline.json")
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--warmup", type=float, default=20.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--scrape-concurrency", type=int, default=64)
    parser.add_argument(
        "--scrape-workers",
        type=int,
        default=0,
        help="as `llm-autoscaler run --scrape-workers` (0: scraping in the controller)",
    )
    parser.add_argument(
        "--tick-phases",
        type=int,
        default=None,
        help="as `llm-autoscaler run --tick-phases` (1: every target at each tick's start; "
        "default: the measured code's own default, i.e. no flag)",
    )
    parser.add_argument(
        "--compare-phases",
        type=int,
        nargs=2,
        metavar=("P1", "P2"),
        default=None,
        help="this tree with P1 then P2 tick phases (and --scrape-workers), alternately in "
        "fresh processes, --rounds times each (writes "
        "benchmarks/results/scale_phases_p<P1>_vs_p<P2>.json, or --out)",
    )
    parser.add_argument(
        "--compare-workers",
        type=int,
        nargs=2,
        metavar=("K1", "K2"),
        default=None,
        help="this tree with K1 then K2 scrape workers, alternately in fresh processes, "
        "--rounds times each (writes benchmarks/results/scale_workers_k<K1>_vs_k<K2>.json)",
    )
    parser.add_argument(
        "--out",
        default=None,
        help="with --compare-workers: the JSON name in benchmarks/results/, or a path",
    )
    parser.add_argument(
        "--cluster-loop",
        default="uvloop",
        choices=("uvloop", "asyncio"),
        help="the event loop of the cluster process (pods + local API; default uvloop)",
    )
    parser.add_argument(
        "--page-variants",
        type=int,
        default=0,
        help="K > 0: each pod cycles K page variants (counters wrap: the harness before "
        "2026-12-02); 0: counters grow on every scrape and never wrap",
    )
    parser.add_argument(
        "--event-loop",
        default="auto",
        choices=("auto", "uvloop", "asyncio"),
        help="as `llm-autoscaler run --event-loop` (code without that option: asyncio)",
    )
    parser.add_argument(
        "--baseline",
        default=None,
        help="a git revision: measure its code and this tree alternately, side by side "
        "(writes benchmarks/results/scale_vs_baseline.json)",
    )
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side (--baseline)")
    parser.add_argument(
        "--current", default=None, help="with --baseline: a git revision instead of this tree"
    )
    parser.add_argument("--profile", default=None, help="write cProfile stats here")
    parser.add_argument(
        "--trace-memory", action="store_true", help="print the top allocating lines at the end"
    )
    parser.add_argument(
        "--ablation",
        action="store_true",
        help="each performance mechanism side by side with it removed, at --targets "
        "(first N), --rounds rounds (writes benchmarks/results/ablation.json)",
    )
    parser.add_argument(
        "--workers-rev",
        default=None,
        help="with --ablation: the git revision whose scrape worker pool the 'workers' "
        "variant runs (the pool is not in this tree; e.g. 5dfab49)",
    )
    parser.add_argument(
        "--variant",
        default="default",
        choices=[name for name, _, _ in ABLATION_VARIANTS],
        help="one ablation variant (with --scrape-workers/--tick-phases as it needs)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if args.worker:
        import autoscaler

        row = run_one(args.targets[0], args)
        row["code"] = str(Path(autoscaler.__file__).parent)
        print(json.dumps(row), flush=True)
        return
    if args.baseline:
        compare(args)
        return
    if args.ablation:
        ablation(args)
        return
    if args.compare_workers:
        compare_workers(args)
        return
    if args.compare_phases:
        compare_phases(args)
        return
    rows = []
    for n in args.targets:
        row = run_one(n, args)
        row["command"] = " ".join(["benchmarks/bench_scale.py", *sys.argv[1:]])
        rows.append(row)
        print(table([row]), flush=True)
    existing = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}

    def row_key(r: dict[str, Any]) -> tuple[int, int]:  # one row per N and K
        return r["targets"], r.get("scrape_workers", 0)

    keep = [r for r in existing.get("rows", []) if row_key(r) not in {row_key(r2) for r2 in rows}]
    merged = sorted(keep + rows, key=row_key)
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
