"""Prometheus mode end to end: the real `llm-autoscaler run` process, N targets x 8 pods,
a real Prometheus server holding every pod's series, pollingInterval 1 s.

Run: nice -n 10 .venv/bin/python benchmarks/bench_prometheus_scale.py --targets 10 100 1000
(writes benchmarks/results/prometheus_scale.json; one row per N and variant, merged with
the rows already there)
Before/after: --baseline REV [--rounds 2] runs that git revision's controller (its
``autoscaler`` package from ``git archive``, first on PYTHONPATH) and this tree's
alternately against the same cluster and Prometheus, ``--rounds`` times each; medians
side by side (writes benchmarks/results/prometheus_scale_vs_baseline_<real|fake>.json).

Processes, each measured on its own (``/proc/<pid>/stat``):
- the cluster: the local Kubernetes API endpoint (`LocalKubeAPI`) holding N Deployments,
  N x 8 Ready pods and N LLMAutoscalers (benchmarks/fleet.py, as bench_scale), counting
  every API request;
- the exporter: one HTTP server standing in for the 8,000 pods' ``/metrics`` pages. It
  serves every pod's series of the families the controller's queries read (vLLM V1
  names and buckets: waiting, running, KV usage, the TTFT and inter-token histograms,
  prompt/generation tokens, preemptions; ~53 series per pod) with the pod's
  ``namespace`` and ``pod`` labels, split into pages of ``--targets-per-page`` targets
  (``/metrics?page=k``) so one scrape stays a few MB. Counters and buckets advance and
  gauges move on every scrape (running stays 42 per pod on average: the fleet is steady,
  desired = current = 8, so steady state is what is measured; no scale writes);
- Prometheus: the Debian package's ``prometheus`` binary (as tests/support/prometheus.py),
  scraping those pages every ``--scrape-interval`` s with ``honor_labels`` (a pod's own
  labels, as a PodMonitor/Kubernetes SD would give them);
- the controller: ``python -m autoscaler run --kubeconfig ...`` with
  ``AUTOSCALER_PROMETHEUS_URL`` set (Prometheus mode), JSON logs at INFO to a file: the
  product as a user runs it (CRD store and watch, leader election, informers, one grouped
  PromQL query per signal per tick, decide, planner, status writes, REST/gRPC servers).

After Prometheus holds every pod's series (and a rate over them), the controller starts;
after ``--warmup`` s the window of ``--duration`` s is measured: decisions per target per
second and by reason (from the controller's own ``/metrics``, read at the window's two
ends), ticks (count, mean, p50/p99 from the tick-duration histogram's buckets: an upper
bound), PromQL queries per tick (Prometheus' ``prometheus_http_requests_total`` for
``/api/v1/query``), CPU cores and RSS of every process, API requests per target per
second (counted by the endpoint), Prometheus' head series and its query evaluation time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import multiprocessing
import os
import random
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from fleet import NAMESPACE, populate
from revisions import compared_table, extract, short_rev, tree_rev

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "prometheus_scale.json"
POLICY = {
    "maxReplicaCount": 16,
    "metrics": [{"signal": "running", "target": 42}],
    "prediction": {"enabled": True},
}
PODS = 8
CLK = os.sysconf("SC_CLK_TCK")
# vLLM V1's bucket bounds (vllm/v1/metrics/loggers.py)
TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0)
TTFT_LE += (7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_LE = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0)
ITL_LE += (7.5, 10.0, 20.0, 40.0, 80.0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _write(path: Path, text: str) -> None:
    """Atomically (another process reads it while we write)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


# ----------------------------------------------------------------------------- cluster
def serve_cluster(targets: int, ready_file: str, stats_file: str) -> None:
    """The local API endpoint with the fleet (no pod servers: Prometheus mode)."""
    import asyncio

    asyncio.run(_serve_cluster(targets, Path(ready_file), Path(stats_file)))


async def _serve_cluster(targets: int, ready: Path, stats: Path) -> None:
    import asyncio

    from autoscaler.kube.localapi import LocalKubeAPI
    from autoscaler.policy.schema import load_policy

    async with LocalKubeAPI(port=0) as kube:
        populate(kube, targets, PODS, load_policy(POLICY), metrics_port=9)
        kube.calls.clear()
        _write(ready, json.dumps({"url": kube.url}))
        while True:
            verbs: dict[str, int] = {}
            for c in kube.calls:
                key = f"{c.verb} {c.resource}"
                verbs[key] = verbs.get(key, 0) + 1
            _write(stats, json.dumps({"calls": len(kube.calls), "verbs": verbs}))
            await asyncio.sleep(1.0)


# ---------------------------------------------------------------------------- exporter
class Page:
    """One page's pods: a format string with every sample line, family by family (as a
    pod's page is), and per pod the state that advances on every scrape."""

    def __init__(self, first: int, count: int, seed: int) -> None:
        self.rng = random.Random(seed)
        self.pods = [x for t in range(first, first + count) for x in self._pods_of(t)]
        n = len(self.pods)
        self.requests = [self.rng.randrange(1000, 5000) for _ in range(n)]
        self.tokens = [r * 150 for r in self.requests]
        self.prompt = [r * 900 for r in self.requests]
        self.preempt = [0] * n
        # fixed shapes: cumulative fraction of observations at or below each bound
        self.ttft_cdf = [min(1.0, 1 - math.exp(-le / 0.3)) for le in TTFT_LE]
        self.itl_cdf = [min(1.0, 1 - math.exp(-le / 0.04)) for le in ITL_LE]
        lines: list[str] = []

        def family(name: str, kind: str, suffixes: list[tuple[str, str]]) -> None:
            lines.append(f"# HELP {name} vLLM.\n# TYPE {name} {kind}\n")
            for suffix, extra in suffixes:
                for ns_pod in self.labels:
                    lines.append(f"{name}{suffix}{{{ns_pod}{extra}}} %s\n")

        self.labels = [
            f'namespace="{NAMESPACE}",pod="{pod}",model_name="{model}",engine="0"'
            for model, pod in self.pods
        ]
        family("vllm:num_requests_waiting", "gauge", [("", "")])
        family("vllm:num_requests_running", "gauge", [("", "")])
        family("vllm:kv_cache_usage_perc", "gauge", [("", "")])
        for name, bounds in (
            ("vllm:time_to_first_token_seconds", TTFT_LE),
            ("vllm:inter_token_latency_seconds", ITL_LE),
        ):
            buckets = [("_bucket", f',le="{le}"') for le in bounds] + [("_bucket", ',le="+Inf"')]
            family(name, "histogram", [*buckets, ("_count", ""), ("_sum", "")])
        family("vllm:prompt_tokens_total", "counter", [("", "")])
        family("vllm:generation_tokens_total", "counter", [("", "")])
        family("vllm:num_preemptions_total", "counter", [("", "")])
        self.template = "".join(lines)
        self.series = self.template.count("%s")

    @staticmethod
    def _pods_of(t: int) -> list[tuple[str, str]]:
        return [(f"m{t:04d}", f"m{t:04d}-{p}") for p in range(PODS)]

    def render(self) -> bytes:
        rng, n = self.rng, len(self.pods)
        for i in range(n):  # traffic since the last scrape
            new = rng.randrange(20, 60)
            self.requests[i] += new
            self.tokens[i] += new * rng.randrange(100, 200)
            self.prompt[i] += new * rng.randrange(600, 1200)
            if rng.random() < 0.05:
                self.preempt[i] += 1
        waiting = [rng.randrange(0, 4) for _ in range(n)]
        running = []
        for _ in range(0, n, 2):  # a pair moves in opposite directions: sum stays 42/pod
            d = rng.randrange(-3, 4)
            running += [42 + d, 42 - d]
        kv = [f"{rng.uniform(0.3, 0.6):.4f}" for _ in range(n)]
        values: list[Any] = [*waiting, *running[:n], *kv]
        for cdf, count, mean in (
            (self.ttft_cdf, self.requests, 0.3),
            (self.itl_cdf, self.tokens, 0.04),
        ):
            for frac in cdf:
                values += [int(c * frac) for c in count]
            values += count  # +Inf
            values += count  # _count
            values += [f"{c * mean:.3f}" for c in count]  # _sum
        values += [*self.prompt, *self.tokens, *self.preempt]
        return (self.template % tuple(values)).encode()


def serve_exporter(targets: int, per_page: int, port: int, stats_file: str) -> None:
    import asyncio

    asyncio.run(_serve_exporter(targets, per_page, port, Path(stats_file)))


async def _serve_exporter(targets: int, per_page: int, port: int, stats: Path) -> None:
    import asyncio

    from aiohttp import web

    pages = [
        Page(first, min(per_page, targets - first), seed=first)
        for first in range(0, targets, per_page)
    ]
    served = [0]

    async def metrics(request: web.Request) -> web.Response:
        page = pages[int(request.query.get("page", "0"))]
        served[0] += 1
        return web.Response(body=page.render(), content_type="text/plain", charset="utf-8")

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    series = sum(p.series for p in pages)
    while True:
        _write(stats, json.dumps({"pages": len(pages), "series": series, "served": served[0]}))
        await asyncio.sleep(1.0)


# --------------------------------------------------------------------- fake prometheus
_NAMES = r'pod=~"\(?([^")]*)\)?-\.\*"'
# signal (by the metric its query reads) -> answer per target: 8 pods' worth, steady
_FAKE_VALUES = (
    ("num_requests_waiting", lambda r: float(r.randrange(0, 25))),
    ("num_requests_running", lambda r: 336.0),  # 8 x 42: desired = current
    ("kv_cache_usage_perc", lambda r: r.uniform(0.3, 0.6)),
    ("time_to_first_token_seconds_bucket", lambda r: r.uniform(0.1, 0.5)),
    ("inter_token_latency_seconds_bucket", lambda r: r.uniform(0.02, 0.06)),
    ("time_to_first_token_seconds_count", lambda r: r.uniform(15.0, 25.0)),
    ("prompt_tokens_total", lambda r: r.uniform(15000.0, 20000.0)),
    ("generation_tokens_total", lambda r: r.uniform(2500.0, 3500.0)),
    ("num_preemptions_total", lambda r: r.uniform(0.0, 0.1)),
)


def serve_fake_prometheus(port: int) -> None:
    """A FAKE Prometheus (as bench_prometheus_fleet's): answers a grouped query with one
    series per workload its pod regex names, labelled ``namespace`` and ``llm_target``,
    in /api/v1/query's JSON shape, values that keep the fleet steady and change on
    every answer; a bucket query (``sum by (..., le)`` of a ``_bucket`` rate, not inside
    ``histogram_quantile``) with one series per workload per bound of vLLM V1's
    layouts, le-major as Prometheus orders them, printed compactly as Prometheus does
    (no series for the older ``time_per_output_token`` name, as V1 pods); serves its
    query count on /metrics as Prometheus does."""
    import asyncio

    asyncio.run(_serve_fake(port))


async def _serve_fake(port: int) -> None:
    import asyncio
    import re

    from aiohttp import web

    names_re = re.compile(_NAMES)
    ns_re = re.compile(r'namespace=~?"([^"]*)"')
    rng = random.Random(1)
    queries = [0]
    layouts = {  # family -> (le labels in Prometheus' (string) order, cumulative shape)
        "time_to_first_token_seconds_bucket": _fake_layout(TTFT_LE, 0.3),
        "inter_token_latency_seconds_bucket": _fake_layout(ITL_LE, 0.04),
    }

    def buckets(family: str, names: list[str], namespace: str) -> bytes:
        les, cdf = layouts.get(family, ((), {}))
        now = round(time.time(), 3)
        rates = [rng.uniform(15.0, 25.0) for _ in names]
        result = [
            {
                "metric": {"le": le, "llm_target": name, "namespace": namespace},
                "value": [now, repr(round(rate * cdf[le], 9))],
            }
            for le in les
            for name, rate in zip(names, rates, strict=True)
        ]
        doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return json.dumps(doc, separators=(",", ":")).encode()

    async def query(request: web.Request) -> web.Response:
        promql = str((await request.post())["query"])
        queries[0] += 1
        match = names_re.search(promql)
        names = match.group(1).split("|") if match else []
        ns = ns_re.search(promql)
        namespace = ns.group(1) if ns else ""
        if "_bucket" in promql and "histogram_quantile" not in promql:
            family = promql.split("rate(", 1)[1].split("{", 1)[0].split(":", 1)[-1]
            body = buckets(family, names, namespace)
            return web.Response(body=body, content_type="application/json")
        value = next((f for metric, f in _FAKE_VALUES if metric in promql), None)
        now = round(time.time(), 3)
        result = []
        if value is not None:
            result = [
                {
                    "metric": {"llm_target": name, "namespace": namespace},
                    "value": [now, f"{value(rng):.6g}"],
                }
                for name in names
            ]
        doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
        return web.Response(body=json.dumps(doc).encode(), content_type="application/json")

    async def metrics(_: web.Request) -> web.Response:
        text = (
            f'prometheus_http_requests_total{{code="200",handler="/api/v1/query"}} {queries[0]}\n'
            "prometheus_tsdb_head_series 0\n"
        )
        return web.Response(text=text, content_type="text/plain")

    app = web.Application()
    app.router.add_post("/api/v1/query", query)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port, backlog=1024).start()
    await asyncio.Event().wait()


def _fake_layout(bounds: tuple[float, ...], mean: float) -> tuple[list[str], dict[str, float]]:
    """A family's ``le`` labels sorted as strings (Prometheus' series order) and the
    cumulative fraction at each (exponential latencies of ``mean``)."""
    cdf = {f"{le}": 1 - math.exp(-le / mean) for le in bounds}
    cdf["+Inf"] = 1.0
    return sorted(cdf), cdf


# -------------------------------------------------------------------------- prometheus
def prometheus_config(exporter: str, pages: int, interval_s: float) -> str:
    interval = f"{int(interval_s * 1000)}ms"
    timeout = f"{int(min(interval_s, 10.0) * 1000)}ms"
    return json.dumps(
        {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "scrape_configs": [
                {
                    "job_name": "vllm",
                    "honor_labels": True,  # the pod's namespace/pod labels, as a PodMonitor
                    "scrape_timeout": timeout,
                    "static_configs": [
                        {"targets": [exporter], "labels": {"__param_page": str(k)}}
                        for k in range(pages)
                    ],
                }
            ],
        }
    )


def http_get(url: str, timeout: float = 30.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        body: bytes = resp.read()
        return body


def promql(url: str, query: str) -> list[dict[str, Any]]:
    body = http_get(f"{url}/api/v1/query?{urllib.parse.urlencode({'query': query})}")
    result: list[dict[str, Any]] = json.loads(body)["data"]["result"]
    return result


def scalar(url: str, query: str) -> float:
    result = promql(url, query)
    return float(result[0]["value"][1]) if result else math.nan


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """A /metrics page: family sample name -> [(labels, value)]."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def total(page: dict[str, list[tuple[dict[str, str], float]]], name: str, **match: str) -> float:
    return sum(
        v for labels, v in page.get(name, []) if all(labels.get(k) == x for k, x in match.items())
    )


# ------------------------------------------------------------------------------- /proc
def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its reaped children's threads."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def proc_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return math.nan


# ------------------------------------------------------------------------------ the run
class World:
    """The cluster, the exporter and Prometheus for N targets (one per N, shared by the
    variants measured against it)."""

    def __init__(self, targets: int, args: argparse.Namespace, tmp: Path) -> None:
        self.targets, self.args, self.tmp = targets, args, tmp
        self.ready, self.kube_stats = tmp / "ready.json", tmp / "kube_stats.json"
        self.exp_stats = tmp / "exporter_stats.json"
        self.procs: list[Any] = []
        self.prom: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> World:
        ctx = multiprocessing.get_context("spawn")
        kube = ctx.Process(
            target=serve_cluster,
            args=(self.targets, str(self.ready), str(self.kube_stats)),
            daemon=True,
        )
        kube.start()
        self.kube_proc = kube
        self.procs = [kube]
        if self.args.prometheus == "fake":
            self.prom_port = free_port()
            self.prom_url = f"http://127.0.0.1:{self.prom_port}"
            fake = ctx.Process(target=serve_fake_prometheus, args=(self.prom_port,), daemon=True)
            fake.start()
            self.fake_proc = fake
            self.procs.append(fake)
            self._wait_files(self.ready, self.kube_stats)
            self.kube_url = json.loads(self.ready.read_text())["url"]
            while True:
                with contextlib.suppress(OSError):
                    http_get(f"{self.prom_url}/metrics")
                    return self
                time.sleep(0.2)
        exporter_port = free_port()
        exporter = ctx.Process(
            target=serve_exporter,
            args=(self.targets, self.args.targets_per_page, exporter_port, str(self.exp_stats)),
            daemon=True,
        )
        exporter.start()
        self.exporter_proc = exporter
        self.procs.append(exporter)
        self._wait_files(self.ready, self.kube_stats, self.exp_stats)
        self.kube_url = json.loads(self.ready.read_text())["url"]
        pages = json.loads(self.exp_stats.read_text())["pages"]
        binary = shutil.which("prometheus")
        if binary is None:
            raise RuntimeError("prometheus binary not found: run `make system-deps`")
        root = self.tmp / "prometheus"
        root.mkdir()
        (root / "prometheus.yml").write_text(
            prometheus_config(f"127.0.0.1:{exporter_port}", pages, self.args.scrape_interval)
        )
        self.prom_port = free_port()
        self.prom_url = f"http://127.0.0.1:{self.prom_port}"
        self.prom_log = (root / "prometheus.log").open("wb")
        self.prom = subprocess.Popen(
            [
                binary,
                f"--config.file={root / 'prometheus.yml'}",
                f"--storage.tsdb.path={root / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.prom_port}",
                "--storage.tsdb.retention.time=1h",
            ],
            stdout=self.prom_log,
            stderr=subprocess.STDOUT,
        )
        self._wait_for_series()
        return self

    def _wait_files(self, *paths: Path) -> None:
        deadline = time.monotonic() + 600
        while not all(p.exists() for p in paths):
            if time.monotonic() > deadline or not all(p.is_alive() for p in self.procs):
                raise RuntimeError("the cluster, exporter or fake Prometheus did not come up")
            time.sleep(0.2)

    def set_recording_rules(self, on: bool) -> None:
        """Load (or unload) deploy/prometheus/recording-rules.yaml: rewrite the config,
        SIGHUP, and with the rules wait until every pod's recorded TTFT series exist."""
        import yaml

        from autoscaler.metrics.prometheus import RECORDED_RULES

        assert self.prom is not None
        root = self.tmp / "prometheus"
        config = json.loads((root / "prometheus.yml").read_text())
        config.pop("rule_files", None)
        if on:
            rule = yaml.safe_load((ROOT / "deploy/prometheus/recording-rules.yaml").read_text())
            (root / "rules.json").write_text(json.dumps({"groups": rule["spec"]["groups"]}))
            config["rule_files"] = [str(root / "rules.json")]
        _write(root / "prometheus.yml", json.dumps(config))
        self.prom.send_signal(signal.SIGHUP)
        want = self.targets * PODS if on else 0
        query = f"count(count by (pod) ({RECORDED_RULES['vllm:time_to_first_token_seconds']}))"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            time.sleep(2.0)
            groups = json.loads(http_get(f"{self.prom_url}/api/v1/rules"))["data"]["groups"]
            if bool(groups) == on and (not on or scalar(self.prom_url, query) >= want):
                return
        raise RuntimeError(f"recording rules {'on' if on else 'off'}: not in effect in time")

    def _wait_for_series(self) -> None:
        """Every pod's series in Prometheus, and a rate over them (two scrapes each)."""
        want = self.targets * PODS
        deadline = time.monotonic() + 300 + 10 * self.args.scrape_interval
        query = "count(rate(vllm:prompt_tokens_total[1m]))"
        while time.monotonic() < deadline:
            assert self.prom is not None
            if self.prom.poll() is not None:
                raise RuntimeError(f"prometheus exited with {self.prom.returncode}")
            with contextlib.suppress(OSError, KeyError, ValueError):
                if scalar(self.prom_url, query) >= want:
                    return
            time.sleep(1.0)
        raise RuntimeError(f"Prometheus did not get {want} pods' rates in time")

    def __exit__(self, *exc: object) -> None:
        if self.prom is not None:
            self.prom.terminate()
            try:
                self.prom.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.prom.kill()
                self.prom.wait(timeout=5)
            self.prom_log.close()
        for p in self.procs:
            p.terminate()
            p.join(timeout=10)

    def prom_metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        return samples(http_get(f"{self.prom_url}/metrics").decode())

    def kube_calls(self) -> dict[str, Any]:
        return dict(json.loads(self.kube_stats.read_text()))

    def pids(self) -> dict[str, int]:
        if self.prom is None:  # the fake: no exporter
            return {
                "prometheus": int(self.fake_proc.pid or 0),
                "cluster": int(self.kube_proc.pid or 0),
            }
        return {
            "prometheus": self.prom.pid,
            "cluster": int(self.kube_proc.pid or 0),
            "exporter": int(self.exporter_proc.pid or 0),
        }


def write_kubeconfig(path: Path, server: str) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: bench\n  cluster:\n    server: {server}\n"
        "users:\n- name: u\n  user:\n    token: bench\n"
        "contexts:\n- name: bench\n  context:\n    cluster: bench\n    user: u\n"
        "current-context: bench\n"
    )
    return path


def _ticks(page: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, Any]:
    name = "llm_autoscaler_tick_duration_seconds"
    buckets = {labels["le"]: v for labels, v in page.get(f"{name}_bucket", [])}
    return {
        "count": total(page, f"{name}_count"),
        "sum": total(page, f"{name}_sum"),
        "buckets": buckets,
    }


def _bucket_quantile(q: float, before: dict[str, float], after: dict[str, float]) -> str:
    """Upper bound (ms) of the bucket holding quantile ``q`` of the window's ticks;
    above the highest finite bound: ``>`` that bound."""
    bounds = sorted(after, key=lambda le: math.inf if le == "+Inf" else float(le))
    counts = [after[le] - before.get(le, 0.0) for le in bounds]
    if not counts or counts[-1] <= 0:
        return "none"
    for le, c in zip(bounds, counts, strict=True):
        if c >= q * counts[-1]:
            if le == "+Inf":
                break
            return f"{1000 * float(le):g}"
    return f">{1000 * float(bounds[-2]):g}"


def _bound(quantile: str) -> float:
    """`_bucket_quantile`'s text as a number (ms; above the highest bound: +Inf)."""
    return math.inf if quantile.startswith(">") or quantile == "none" else float(quantile)


def run_controller(
    world: World, code: Path | None, label: str, args: argparse.Namespace, recorded: bool = False
) -> dict[str, Any]:
    """One controller process (``code``'s package, else this tree's): warm-up, window."""
    n = world.targets
    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    if code is not None:
        env["PYTHONPATH"] = str(code)
    probe = [sys.executable, "-c", "import autoscaler; print(autoscaler.__file__)"]
    imported = subprocess.run(
        probe, env=env, capture_output=True, text=True, check=True, cwd=world.tmp
    )
    expected = (code or ROOT) / "autoscaler" / "__init__.py"
    if Path(imported.stdout.strip()) != expected:
        raise RuntimeError(f"the controller would import {imported.stdout.strip()}")
    env["AUTOSCALER_PROMETHEUS_URL"] = world.prom_url
    env["AUTOSCALER_LOG_FORMAT"] = "json"
    if recorded:
        env["AUTOSCALER_PROMETHEUS_RECORDED_RULES"] = "true"
    http_port, grpc_port = free_port(), free_port()
    kubeconfig = write_kubeconfig(world.tmp / "kubeconfig", world.kube_url)
    cmd = [sys.executable]
    if args.profile:
        cmd += ["-m", "cProfile", "-o", args.profile]
    cmd += ["-m", "autoscaler", "run", "--kubeconfig", str(kubeconfig)]
    cmd += ["--http-port", str(http_port), "--grpc-port", str(grpc_port)]
    cmd += ["--lease-namespace", NAMESPACE, "--event-loop", args.event_loop]
    log_path = world.tmp / f"controller-{label}.log"
    with open(log_path, "wb") as log:
        ctl = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=world.tmp)
    metrics_url = f"http://127.0.0.1:{http_port}/metrics"
    pids = {"controller": ctl.pid, **world.pids()}
    rss_over_time: list[dict[str, float]] = []
    t_start = time.monotonic()
    try:
        time.sleep(args.warmup)
        if ctl.poll() is not None:
            raise RuntimeError(f"the controller exited with {ctl.returncode}: see {log_path}")
        c0 = samples(http_get(metrics_url).decode())
        p0 = world.prom_metrics()
        k0 = world.kube_calls()
        cpu0 = {name: proc_cpu_s(pid) for name, pid in pids.items()}
        w0 = time.monotonic()
        end = w0 + args.duration
        while (now := time.monotonic()) < end:
            rss_over_time.append(
                {"t_s": round(now - t_start, 1), "rss_mb": round(proc_rss_mb(ctl.pid), 1)}
            )
            time.sleep(min(10.0, end - now))
        cpu1 = {name: proc_cpu_s(pid) for name, pid in pids.items()}
        w1 = time.monotonic()
        rss = {name: round(proc_rss_mb(pid), 1) for name, pid in pids.items()}
        k1 = world.kube_calls()
        p1 = world.prom_metrics()
        c1 = samples(http_get(metrics_url).decode())
        rss_over_time.append({"t_s": round(w1 - t_start, 1), "rss_mb": rss["controller"]})
    finally:
        ctl.send_signal(signal.SIGTERM)
        try:
            ctl.wait(timeout=60)
        except subprocess.TimeoutExpired:
            ctl.kill()
            ctl.wait(timeout=10)
    wall = w1 - w0
    cpu = {name: (cpu1[name] - cpu0[name]) / wall for name in pids}

    def by_reason(page: dict[str, list[tuple[dict[str, str], float]]]) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, v in page.get("llm_autoscaler_decisions_total", []):
            out[labels["reason"]] = out.get(labels["reason"], 0.0) + v
        return out

    r0, r1 = by_reason(c0), by_reason(c1)
    reasons = {k: round(v - r0.get(k, 0.0)) for k, v in r1.items() if v - r0.get(k, 0.0)}
    decisions = sum(reasons.values())
    t0, t1 = _ticks(c0), _ticks(c1)
    ticks = t1["count"] - t0["count"]
    handler = {"handler": "/api/v1/query"}
    queries = total(p1, "prometheus_http_requests_total", **handler) - total(
        p0, "prometheus_http_requests_total", **handler
    )
    calls = k1["calls"] - k0["calls"]
    verbs = {
        k: v - k0["verbs"].get(k, 0) for k, v in k1["verbs"].items() if v - k0["verbs"].get(k, 0)
    }
    inner = {
        labels["quantile"]: round(v, 4)
        for labels, v in p1.get("prometheus_engine_query_duration_seconds", [])
        if labels.get("slice") == "inner_eval"
    }
    errors = total(c1, "llm_autoscaler_scrape_errors_total") - total(
        c0, "llm_autoscaler_scrape_errors_total"
    )
    with open(log_path, "rb") as f:
        log_lines = sum(1 for _ in f)
    leader = total(c1, "llm_autoscaler_is_leader")
    return {
        "targets": n,
        "pods": n * PODS,
        "variant": label,
        "prometheus_kind": args.prometheus,
        "measured_s": round(wall, 1),
        "decisions_per_target_s": round(decisions / n / wall, 3),
        "decisions_by_reason": reasons,
        "ticks": round(ticks),
        "tick_mean_ms": round(1000 * (t1["sum"] - t0["sum"]) / max(ticks, 1), 1),
        "tick_p50_ms_le": _bucket_quantile(0.5, t0["buckets"], t1["buckets"]),
        "tick_p99_ms_le": _bucket_quantile(0.99, t0["buckets"], t1["buckets"]),
        "tick_p50_ms_bound": _bound(_bucket_quantile(0.5, t0["buckets"], t1["buckets"])),
        "tick_p99_ms_bound": _bound(_bucket_quantile(0.99, t0["buckets"], t1["buckets"])),
        "controller_cpu_cores": round(cpu["controller"], 3),
        "controller_cpu_ms_per_tick": round(1000 * cpu["controller"] * wall / max(ticks, 1), 1),
        "controller_rss_mb": rss["controller"],
        "promql_queries_per_tick": round(queries / max(ticks, 1), 2),
        "promql_queries_per_s": round(queries / wall, 2),
        "read_errors_per_s": round(errors / wall, 2),
        "api_requests_per_s": round(calls / wall, 3),
        "api_requests_per_target_s": round(calls / wall / n, 5),
        "api_requests_by_verb": verbs,
        "leader": bool(leader),
        "prometheus_cpu_cores": round(cpu["prometheus"], 3),
        "prometheus_cpu_ms_per_tick": round(1000 * cpu["prometheus"] * wall / max(ticks, 1), 1),
        "prometheus_rss_mb": rss["prometheus"],
        "prometheus_head_series": round(total(p1, "prometheus_tsdb_head_series")),
        "prometheus_query_inner_eval_s": inner,
        "exporter_cpu_cores": round(cpu.get("exporter", 0.0), 3),
        "cluster_cpu_cores": round(cpu["cluster"], 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "controller_log_lines_per_s": round(log_lines / (w1 - t_start), 2),
        "rss_over_time": rss_over_time,
    }


def time_queries(
    world: World, reps: int = 3, recorded: bool = False
) -> dict[str, dict[str, float]]:
    """Each grouped query, for all N targets, alone (no controller running): best wall
    time of ``reps`` and Prometheus' CPU per query (its /proc). Every default template
    as written (what the controller sent before the promq pass: 12 per tick, the
    quantiles as ``histogram_quantile``), then this tree's bucket queries (named
    ``buckets:<family>``; the queries the controller sends now are the 8 non-quantile
    templates plus those)."""
    from autoscaler.metrics.prometheus import (
        RECORDED_QUERIES,
        VLLM_QUERIES,
        PrometheusSource,
        WorkloadPods,
        _family_label,
        render_grouped,
    )

    assert world.prom is not None
    targets = [WorkloadPods(NAMESPACE, f"m{t:04d}") for t in range(world.targets)]
    out: dict[str, dict[str, float]] = {}
    sent = dict(PrometheusSource(world.prom_url, {}).grouped_queries)
    if recorded:  # the rules are loaded (the last variant run): their bucket queries too
        sent.update(PrometheusSource(world.prom_url, {}, RECORDED_QUERIES).grouped_queries)
    families = {
        "buckets:" + _family_label(t): t for t in sent.values() if t not in VLLM_QUERIES.values()
    }
    for name, template in {**VLLM_QUERIES, **families}.items():
        body = urllib.parse.urlencode({"query": render_grouped(template, targets)}).encode()
        walls, size = [], 0
        c0 = proc_cpu_s(world.prom.pid)
        for _ in range(reps):
            t = time.perf_counter()
            with urllib.request.urlopen(f"{world.prom_url}/api/v1/query", body, 120) as r:
                size = len(r.read())
            walls.append(time.perf_counter() - t)
        cpu = (proc_cpu_s(world.prom.pid) - c0) / reps
        out[name] = {
            "wall_ms": round(1000 * min(walls), 1),
            "prometheus_cpu_ms": round(1000 * cpu, 1),
            "answer_kb": round(size / 1000, 1),
        }
    return out


def query_table(n: int, costs: dict[str, dict[str, float]]) -> str:
    from autoscaler.metrics.prometheus import VLLM_QUERIES

    text = (
        f"N={n}: each grouped query alone\n\n| signal | wall ms | Prometheus CPU ms | answer kB |\n"
    )
    text += "|---|---|---|---|\n"
    for name, c in costs.items():
        text += f"| {name} | {c['wall_ms']} | {c['prometheus_cpu_ms']} | {c['answer_kb']} |\n"
    quantiles = {"ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p95_s"}
    before = [c for name, c in costs.items() if name in VLLM_QUERIES]
    plain = [c for name, c in costs.items() if name in VLLM_QUERIES and name not in quantiles]
    after = plain + [c for n, c in costs.items() if n.startswith("buckets:") and "rate1m" not in n]
    recorded = plain + [c for n, c in costs.items() if n.startswith("buckets:") and "rate1m" in n]
    parts = [("histogram_quantile as written", before), ("bucket queries", after)]
    if len(recorded) > len(plain):
        parts.append(("recorded bucket rates", recorded))
    for label, part in parts:
        cpu = sum(c["prometheus_cpu_ms"] for c in part)
        text += f"| one tick, quantiles by {label} ({len(part)} queries) | | {round(cpu, 1)} | |\n"
    return text


COLUMNS = (
    ("targets", "targets"),
    ("variant", "variant"),
    ("Prometheus", "prometheus_kind"),
    ("decisions/target/s", "decisions_per_target_s"),
    ("controller CPU cores", "controller_cpu_cores"),
    ("ms CPU/tick", "controller_cpu_ms_per_tick"),
    ("RSS MB", "controller_rss_mb"),
    ("tick mean ms", "tick_mean_ms"),
    ("tick p99 ms <=", "tick_p99_ms_le"),
    ("PromQL/tick", "promql_queries_per_tick"),
    ("API req/target/s", "api_requests_per_target_s"),
    ("Prometheus CPU cores", "prometheus_cpu_cores"),
    ("head series", "prometheus_head_series"),
)


def table(rows: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |\n"
    head += "|" + "---|" * len(COLUMNS) + "\n"
    return head + "".join(
        "| " + " | ".join(str(r.get(k)) for _, k in COLUMNS) + " |\n" for r in rows
    )


COMPARED = (
    ("controller CPU cores", "controller_cpu_cores"),
    ("controller CPU ms/tick", "controller_cpu_ms_per_tick"),
    ("decisions/target/s", "decisions_per_target_s"),
    ("tick mean (ms)", "tick_mean_ms"),
    ("PromQL queries/tick", "promql_queries_per_tick"),
    ("tick p50 (ms, bucket bound)", "tick_p50_ms_bound"),
    ("tick p99 (ms, bucket bound)", "tick_p99_ms_bound"),
    ("controller RSS (MB)", "controller_rss_mb"),
    ("API requests/target/s", "api_requests_per_target_s"),
    ("Prometheus CPU cores", "prometheus_cpu_cores"),
    ("Prometheus CPU ms/tick", "prometheus_cpu_ms_per_tick"),
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--warmup", type=float, default=40.0)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--scrape-interval", type=float, default=15.0)
    parser.add_argument("--targets-per-page", type=int, default=50)
    parser.add_argument(
        "--prometheus",
        default="real",
        choices=("real", "fake"),
        help="real: the prometheus binary scraping the exporter; fake: an HTTP server "
        "answering in Prometheus' JSON shape at once (the controller alone at 1 s ticks)",
    )
    parser.add_argument("--event-loop", default="auto", choices=("auto", "uvloop", "asyncio"))
    parser.add_argument("--baseline", default=None, help="a git revision to measure beside")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each side (--baseline)")
    parser.add_argument("--profile", default=None, help="run the controller under cProfile")
    parser.add_argument(
        "--compare-recorded",
        action="store_true",
        help="real Prometheus: this tree's controller without, then with, "
        "deploy/prometheus/recording-rules.yaml loaded (SIGHUP reload) and "
        "AUTOSCALER_PROMETHEUS_RECORDED_RULES=true, --rounds times each",
    )
    parser.add_argument(
        "--output",
        default=None,
        help="with --baseline: the result file (default "
        "benchmarks/results/prometheus_scale_vs_baseline_<real|fake>.json)",
    )
    parser.add_argument(
        "--time-queries",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="after the runs, time each grouped query alone on the real Prometheus",
    )
    args = parser.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    command = " ".join(["benchmarks/bench_prometheus_scale.py", *sys.argv[1:]])
    head = tree_rev()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="bench-prom-") as tmp_s:
        tmp = Path(tmp_s)
        base = None
        rev = None
        if args.baseline:
            rev = short_rev(args.baseline)
            base = extract(rev, tmp / "base")
        for n in args.targets:
            work = tmp / f"n{n}"
            work.mkdir()
            with World(n, args, work) as world:
                plan = [(base, rev), (None, head)] * args.rounds if base else [(None, head)]
                if args.compare_recorded:
                    plan = [(None, "buckets"), (None, "recorded")] * args.rounds
                for_n = []
                for code, label in plan:
                    assert label is not None
                    recorded = label == "recorded"
                    if args.compare_recorded:
                        world.set_recording_rules(recorded)
                    row = run_controller(world, code, label, args, recorded=recorded)
                    row["command"] = command
                    for_n.append(row)
                    print(table([row]), flush=True)
                if args.prometheus == "real" and args.time_queries:
                    costs = time_queries(world, recorded=args.compare_recorded)
                    print(query_table(n, costs), flush=True)
                    for row in for_n:
                        row["prometheus_query_costs"] = costs
                rows += for_n
    if args.compare_recorded:
        compare(rows, "buckets", "recorded", command, args)
        return
    if args.baseline:
        compare(rows, str(rev), head, command, args)
        return
    existing = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"rows": []}
    done = {(r["targets"], r["prometheus_kind"]) for r in rows}
    merged = sorted(
        [
            r
            for r in existing.get("rows", [])
            if (r["targets"], r.get("prometheus_kind", "real")) not in done
        ]
        + rows,
        key=lambda r: (r.get("prometheus_kind", "real") != "real", r["targets"]),
    )
    document = {
        "benchmark": "bench_prometheus_scale",
        "machine": {"cpus": os.cpu_count()},
        "prometheus": _prometheus_version(),
        "rows": merged,
        "markdown": table(merged),
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(document["markdown"])
    print(f"wrote {RESULTS}", file=sys.stderr)


def compare(
    rows: list[dict[str, Any]], rev: str, head: str, command: str, args: argparse.Namespace
) -> None:
    document: dict[str, Any] = {
        "benchmark": "bench_prometheus_scale --baseline",
        "command": command,
        "baseline": rev,
        "current": head,
        "machine": {"cpus": os.cpu_count()},
        "prometheus": _prometheus_version(),
        "by_targets": {},
    }
    markdown = ""
    for n in args.targets:
        before = [r for r in rows if r["targets"] == n and r["variant"] == rev]
        after = [r for r in rows if r["targets"] == n and r["variant"] == head]
        out, part = compared_table(
            f"N={n} targets x {PODS} pods, median of {args.rounds} alternating runs",
            before,
            after,
            COMPARED,
            rev,
            head,
        )
        print(part, flush=True)
        markdown += part + "\n"
        document["by_targets"][str(n)] = {"rows": out, "raw": {"before": before, "after": after}}
    document["markdown"] = markdown
    out_path = (
        Path(args.output)
        if args.output
        else RESULTS.with_name(f"prometheus_scale_vs_baseline_{args.prometheus}.json")
    )
    out_path.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out_path}", file=sys.stderr)


def _prometheus_version() -> str:
    binary = shutil.which("prometheus") or "prometheus"
    out = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return (out.stdout or out.stderr).splitlines()[0] if (out.stdout or out.stderr) else ""


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
