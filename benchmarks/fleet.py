"""The fleet harness shared by bench_scale, bench_rss and bench_shards: the emulated cluster
(N vLLM Deployments of Ready pods, each pod serving /metrics on a loopback address of its
own, and one LLMAutoscaler per Deployment), `llm-autoscaler run` processes against it, and
the black-box figures read from outside them (their ``/metrics``, /proc).

Two API servers: ``local`` (the in-process `LocalKubeAPI`, in a spawned cluster process
beside the pods) and ``real`` (etcd + kube-apiserver 1.24 from tests/real/controlplane.py;
the pods' status is written as a kubelet would).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import multiprocessing
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"
NAMESPACE = "fleet"
LEASE_NAMESPACE = "llm-autoscaler"
PODS = 8
CONTAINER = {"name": "vllm", "image": "vllm/vllm-openai:v0.10.0"}
# Steady at 8 replicas (running 42 per pod, target 42 per replica), forecast planner on:
# steady state is what is measured, no scale writes.
POLICY = {
    "maxReplicaCount": 16,
    "metrics": [{"signal": "running", "target": 42}],
    "prediction": {"enabled": True},
}
CLK_TCK = os.sysconf("SC_CLK_TCK")
READY_FIELDS = ("replicas", "updatedReplicas", "readyReplicas", "availableReplicas")


# ------------------------------------------------------------------------ process figures
def raise_fd_limit() -> None:
    """A pod is a listening socket: thousands of them need the hard file limit."""
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, from /proc/<pid>/stat (clock ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def proc_mb(pid: int | str = "self") -> dict[str, float]:
    """RSS (VmRSS) and PSS (/proc/<pid>/smaps_rollup: shared pages divided among the
    processes mapping them) of one process, MB; a figure that cannot be read is absent,
    never zero."""
    out: dict[str, float] = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) / 1024
    with contextlib.suppress(OSError), open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss:"):
                out["pss"] = int(line.split()[1]) / 1024
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def command_line(script: str) -> str:
    return " ".join([f"benchmarks/{script}", *sys.argv[1:]])


def write_results(name: str, document: dict[str, Any]) -> Path:
    """The benchmark's one current results file (``name`` in benchmarks/results/, or a
    path), with the machine it ran on."""
    out = Path(name) if os.sep in name else RESULTS_DIR / name
    document.setdefault("machine", {"cpus": os.cpu_count(), "load": os.getloadavg()})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)
    return out


def markdown_table(rows: Sequence[Sequence[object]]) -> str:
    """A header row, then the rows, as a markdown table."""
    lines = ["| " + " | ".join(str(c) for c in rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


# ------------------------------------------------------------------------------- the pods
def pod_ip(g: int) -> str:
    """Pod ``g``'s own loopback address (127.1.0.1, 127.1.0.2, ...)."""
    return f"127.{1 + g // 62500}.{(g // 250) % 250}.{g % 250 + 1}"


def target_names(targets: int) -> list[str]:
    return [f"m{t:04d}" for t in range(targets)]


async def serve_pods(targets: int, pods: int, pages: int) -> tuple[int, list[Any]]:
    """Every pod's /metrics on its own loopback address, the same port on each: the vLLM
    V1 fixture page whose counters and buckets grow on every scrape (``pages`` variants,
    then the last one again: counters never go back). Returns the port and the pods'
    protocols (``sent``: pages served)."""
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_scrape import Responses, _Pod

    loop = asyncio.get_running_loop()
    responses = Responses(pages)
    protocols: list[Any] = []

    def factory() -> Any:
        p = _Pod(responses, wrap=False)
        protocols.append(p)
        return p

    port = 0
    for g in range(targets * pods):
        server = await loop.create_server(factory, pod_ip(g), port)
        port = server.sockets[0].getsockname()[1]
    return port, protocols


def populate(kube: Any, targets: int, pods: int, policy: Any, metrics_port: int) -> None:
    """Deployments ``m0000``.. with ``pods`` Ready pods each (pod g of the fleet at
    ``pod_ip(g)``, scraped on ``metrics_port``) and one LLMAutoscaler per Deployment with
    ``policy``, created on ``kube`` (a running ``LocalKubeAPI``)."""
    from autoscaler.names import CRD_GROUP, CRD_PLURAL

    for t, name in enumerate(target_names(targets)):
        kube.create("deployments", _deployment(name, pods), group="apps")
        for p in range(pods):
            kube.create("pods", _pod(name, p))
            kube.mark_pod_ready(NAMESPACE, f"{name}-{p}", ip=pod_ip(t * pods + p))
        kube.create(CRD_PLURAL, _autoscaler(name, policy, metrics_port), group=CRD_GROUP)


def _deployment(name: str, pods: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": pods,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [CONTAINER]}},
        },
    }


def _pod(name: str, p: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{name}-{p}", "namespace": NAMESPACE, "labels": {"app": name}},
        "spec": {"containers": [CONTAINER], "nodeName": "bench-node"},
    }


def _autoscaler(name: str, policy: Any, metrics_port: int) -> dict[str, Any]:
    from autoscaler.domain import TargetRef
    from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object

    spec = TargetSpec(
        ref=TargetRef(NAMESPACE, name),
        policy=policy,
        scale_target_ref=ScaleTargetRef(name=name),
        metrics_port=metrics_port,
    )
    return dict(spec_to_object(spec))


# ----------------------------------------------------------------- the local cluster process
def serve_local(targets: int, pods: int, pages: int, ready: str, stats: str) -> None:
    """The spawned cluster process (local API): the pods and `LocalKubeAPI`, on uvloop
    (at 4,000 pages/s asyncio's own loop takes a core the controller then lacks)."""
    factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(_local_main(targets, pods, pages, Path(ready), Path(stats)))


async def _local_main(targets: int, pods: int, pages: int, ready: Path, stats: Path) -> None:
    from autoscaler.kube.localapi import LocalKubeAPI
    from autoscaler.policy.schema import load_policy

    port, protocols = await serve_pods(targets, pods, pages)
    async with LocalKubeAPI(port=0) as kube:
        populate(kube, targets, pods, load_policy(POLICY), port)
        kube.calls.clear()
        _write(ready, json.dumps({"url": kube.url}))
        while True:
            verbs: dict[str, int] = {}
            for c in kube.calls:
                key = f"{c.verb} {c.resource}"
                verbs[key] = verbs.get(key, 0) + 1
            scrapes = sum(p.sent for p in protocols)
            _write(stats, json.dumps({"verbs": verbs, "scrapes": scrapes}))
            await asyncio.sleep(0.5)


def _serve_pods_only(targets: int, pods: int, pages: int, ready: str, stats: str) -> None:
    """The spawned pods process (real API server): the pods alone."""
    factory = None
    with contextlib.suppress(ImportError):
        import uvloop

        factory = uvloop.new_event_loop

    async def main() -> None:
        port, protocols = await serve_pods(targets, pods, pages)
        _write(Path(ready), json.dumps({"port": port}))
        while True:
            _write(Path(stats), json.dumps({"scrapes": sum(p.sent for p in protocols)}))
            await asyncio.sleep(0.5)

    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


def _write(path: Path, text: str) -> None:
    """Atomically (the other process reads it while we write)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _spawn(target: Any, args: tuple[Any, ...], ready: Path, limit_s: float) -> Any:
    # spawned, not forked: it shares no pages with the measured processes
    proc = multiprocessing.get_context("spawn").Process(target=target, args=args, daemon=True)
    proc.start()
    deadline = time.monotonic() + limit_s
    while not ready.exists():
        if time.monotonic() > deadline or not proc.is_alive():
            proc.terminate()
            raise RuntimeError("the cluster process did not come up")
        time.sleep(0.2)
    return proc


@dataclass
class Cluster:
    """The emulated fleet on one API server; `kubeconfig` is what the controllers use."""

    apiserver: str
    url: str
    workdir: Path
    kubeconfig: Path
    procs: list[Any] = field(default_factory=list)  # multiprocessing processes to stop
    plane: Any = None  # the real control plane
    stats_file: Path | None = None

    def stats(self) -> dict[str, Any]:
        assert self.stats_file is not None
        return dict(json.loads(self.stats_file.read_text()))

    def scrapes(self) -> int:
        return int(self.stats()["scrapes"])

    def api_requests(self) -> dict[str, float]:
        """API requests served so far by ``verb resource`` (local: counted by the endpoint;
        real: the API server's ``apiserver_request_total``)."""
        if self.plane is None:
            return {k: float(v) for k, v in self.stats()["verbs"].items()}
        text = _get(f"{self.plane.url}/metrics", self.plane.tokens["admin"])
        out: dict[str, float] = {}
        for name, labels, value in _samples(text):
            if name == "apiserver_request_total":
                key = f"{labels.get('verb', '').lower()} {labels.get('resource', '')}"
                out[key] = out.get(key, 0.0) + value
        return out

    def server_pids(self) -> dict[str, int]:
        """The processes serving the fleet (never counted in the controllers' figures)."""
        out = {"pods" if self.plane else "pods + local API": p.pid for p in self.procs}
        if self.plane is not None:
            for name in ("kube-apiserver", "etcd"):
                out[name] = self.plane.procs[name].pid
        return out

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
            p.join(timeout=10)
        if self.plane is not None:
            self.plane.stop()


def lease_writes(requests: dict[str, float]) -> float:
    return sum(
        v
        for k, v in requests.items()
        if k.endswith(" leases") and not k.startswith(("get", "list", "watch"))
    )


@contextlib.contextmanager
def cluster(apiserver: str, targets: int, pods: int, pages: int) -> Iterator[Cluster]:
    """The fleet on ``apiserver`` (``local`` or ``real``), torn down on exit."""
    with tempfile.TemporaryDirectory(prefix="fleet-") as tmp:
        work = Path(tmp)
        ready, stats = work / "ready.json", work / "stats.json"
        if apiserver == "local":
            proc = _spawn(serve_local, (targets, pods, pages, str(ready), str(stats)), ready, 900)
            url = json.loads(ready.read_text())["url"]
            kc = _kubeconfig(work / "kubeconfig", url, None)
            c = Cluster("local", url, work, kc, [proc], stats_file=stats)
        elif apiserver == "real":
            c = _real_cluster(work, targets, pods, pages, ready, stats)
        else:
            raise ValueError(f"apiserver {apiserver!r}: must be local or real")
        try:
            while not stats.exists():
                time.sleep(0.1)
            yield c
        finally:
            c.close()


def _kubeconfig(path: Path, url: str, token: str | None) -> Path:
    user = f"    token: {token}\n" if token else "    {}\n"
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters:\n- name: c\n  cluster:\n    server: {url}\n"
        "    insecure-skip-tls-verify: true\n"
        f"users:\n- name: u\n  user:\n{user}"
        "contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\n"
        "current-context: c\n"
    )
    return path


# -------------------------------------------------------------------- the real API server
def _real_cluster(
    work: Path, targets: int, pods: int, pages: int, ready: Path, stats: Path
) -> Cluster:
    sys.path.insert(0, str(ROOT))
    from tests.real.controlplane import Binaries, ControlPlane, find_binaries

    bins = find_binaries()
    if isinstance(bins, str):
        raise SystemExit(bins)
    # etcd + kube-apiserver only: pods are created bound and their status written here, as
    # a kubelet would; no controller-manager or scheduler competes for the CPU
    plane = ControlPlane(Binaries(bins.etcd, bins.apiserver, None, None))
    plane.start()
    proc = None
    try:
        proc = _spawn(_serve_pods_only, (targets, pods, pages, str(ready), str(stats)), ready, 900)
        port = json.loads(ready.read_text())["port"]
        asyncio.run(_populate_real(plane, targets, pods, port))
    except BaseException:
        if proc is not None:
            proc.terminate()
        plane.stop()
        raise
    kc = plane.kubeconfig_for("admin")
    return Cluster("real", plane.url, work, kc, [proc], plane=plane, stats_file=stats)


async def _populate_real(plane: Any, targets: int, pods: int, port: int) -> None:
    """The CRD (deploy/base), the namespaces, then every Deployment (status: all Ready),
    pod (status Running and Ready at its address) and LLMAutoscaler, 32 requests at once."""
    from autoscaler.names import CRD_GROUP, CRD_PLURAL, CRD_VERSION
    from autoscaler.policy.schema import load_policy
    from tests.deploy.manifests import DEPLOY, render
    from tests.real.kubectl import MERGE_PATCH, Kube, KubeError

    policy = load_policy(POLICY)
    async with Kube(plane.url, plane.tokens["admin"]) as k:
        for obj in render(DEPLOY / "base"):
            if obj["kind"] in ("CustomResourceDefinition", "Namespace"):
                await k.apply(obj)
                if obj["kind"] == "CustomResourceDefinition":
                    await k.wait_established(obj["metadata"]["name"])
        for ns in (NAMESPACE, LEASE_NAMESPACE):
            await k.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}}, ok=(201, 409))
        gate = asyncio.Semaphore(32)

        async def post(path: str, body: dict[str, Any]) -> None:
            # kube-apiserver 1.24's CEL evaluation races under concurrent creates ("internal
            # error: runtime error: index out of range" on a valid object): retried
            for attempt in range(5):
                try:
                    await k.request("POST", path, body)
                    return
                except KubeError as err:
                    if err.status != 422 or "internal error" not in str(err) or attempt == 4:
                        raise
                    await asyncio.sleep(0.2)

        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())

        async def one(t: int, name: str) -> None:
            async with gate:
                apps = f"/apis/apps/v1/namespaces/{NAMESPACE}/deployments"
                await k.request("POST", apps, _deployment(name, pods))
                status = {
                    "observedGeneration": 1,
                    **{
                        f: pods
                        for f in (
                            "replicas",
                            "updatedReplicas",
                            "readyReplicas",
                            "availableReplicas",
                        )
                    },
                }
                await k.request(
                    "PATCH",
                    f"{apps}/{name}/status",
                    {"status": status},
                    content_type=MERGE_PATCH,
                )
                for p in range(pods):
                    core = f"/api/v1/namespaces/{NAMESPACE}/pods"
                    await k.request("POST", core, _pod(name, p))
                    ip = pod_ip(t * pods + p)
                    await k.request(
                        "PATCH",
                        f"{core}/{name}-{p}/status",
                        {"status": _ready_status(ip, now)},
                        content_type=MERGE_PATCH,
                    )
                path = f"/apis/{CRD_GROUP}/{CRD_VERSION}/namespaces/{NAMESPACE}/{CRD_PLURAL}"
                await post(path, _autoscaler(name, policy, port))

        await asyncio.gather(*(one(t, n) for t, n in enumerate(target_names(targets))))


def _ready_status(ip: str, now: str) -> dict[str, Any]:
    return {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": now,
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": now}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "containerStatuses": [
            {
                "name": "vllm",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "image": "emulated-vllm",
                "imageID": "emulated-vllm",
                "state": {"running": {"startedAt": now}},
            }
        ],
    }


# --------------------------------------------------------------------- controller processes
@dataclass
class Controller:
    """One `llm-autoscaler run` process (stdout+stderr to its log file)."""

    name: str
    proc: subprocess.Popen[bytes]
    http_port: int
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def metrics(self) -> str:
        return _get(f"http://127.0.0.1:{self.http_port}/metrics", None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def start_controllers(
    c: Cluster,
    replicas: int,
    flags: Sequence[str] = (),
    *,
    env: dict[str, str] | None = None,
    argv0: Sequence[str] | None = None,
    pythonpath: Path | None = None,
) -> list[Controller]:
    """``replicas`` processes of ``llm-autoscaler run --kubeconfig <c> <flags>`` (each its
    own ports and identity; ``argv0`` in place of ``python -m autoscaler``, e.g. a variant
    wrapper), each up once its /metrics answers."""
    out = []
    for r in range(replicas):
        http, grpc = free_port(), free_port()
        # FLEET_LOG_DIR: keep the controllers' logs there (else gone with the cluster)
        log = Path(os.environ.get("FLEET_LOG_DIR") or c.workdir) / f"controller-{r}.log"
        e = {**os.environ, **(env or {}), "POD_NAME": f"bench-{r}", "PYTHONUNBUFFERED": "1"}
        if pythonpath is not None:
            e["PYTHONPATH"] = str(pythonpath)
        cmd = [*(argv0 or [sys.executable, "-m", "autoscaler"]), "--log-format", "json"]
        cmd += ["--log-level", "INFO", "run", "--kubeconfig", str(c.kubeconfig)]
        cmd += ["--http-port", str(http), "--grpc-port", str(grpc)]
        cmd += ["--lease-namespace", LEASE_NAMESPACE, *flags]
        with log.open("wb") as f:
            proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=e, cwd=ROOT)
        out.append(Controller(f"bench-{r}", proc, http, log))
    try:
        deadline = time.monotonic() + 120
        for ctl in out:
            while True:
                if ctl.proc.poll() is not None:
                    raise RuntimeError(f"{ctl.name} exited:\n{ctl.log.read_text()[-3000:]}")
                with contextlib.suppress(OSError):
                    ctl.metrics()
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{ctl.name}: no /metrics after 120 s")
                time.sleep(0.3)
    except BaseException:
        for ctl in out:
            ctl.stop()
        raise
    return out


# ------------------------------------------------------------------ /metrics, read outside
def _get(url: str, token: str | None) -> str:
    import ssl

    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    with urllib.request.urlopen(req, timeout=30, context=ctx) as resp:
        return str(resp.read().decode())


def _samples(text: str) -> Iterator[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(text):
        for s in family.samples:
            yield s.name, s.labels, s.value


@dataclass(frozen=True)
class Snapshot:
    """What one controller's /metrics and /proc say at one moment."""

    t: float
    decisions: dict[str, float]  # "namespace/name" -> decisions so far (every reason)
    lag_buckets: dict[float, float]  # le -> cumulative count
    cpu_s: float
    held: float  # shards held (the llm_autoscaler_shards_held gauge; nan when absent)


def snapshot(ctl: Controller) -> Snapshot:
    decisions: dict[str, float] = {}
    lag: dict[float, float] = {}
    held = math.nan
    for name, labels, value in _samples(ctl.metrics()):
        if name == "llm_autoscaler_decisions_total":
            key = f"{labels['namespace']}/{labels['name']}"
            decisions[key] = decisions.get(key, 0.0) + value
        elif name == "llm_autoscaler_decision_lag_seconds_bucket":
            lag[float(labels["le"])] = value
        elif name == "llm_autoscaler_shards_held":
            held = value
    return Snapshot(time.monotonic(), decisions, lag, proc_cpu_s(ctl.pid), held)


def histogram_quantile(q: float, buckets: dict[float, float]) -> float:
    """Prometheus's ``histogram_quantile`` over cumulative ``le`` buckets: linear within
    the bucket holding the rank (nan without observations; the last finite bound when the
    rank falls in +Inf)."""
    bounds = sorted(buckets)
    total = buckets.get(math.inf, 0.0)
    if total <= 0:
        return math.nan
    rank = q * total
    lower, below = 0.0, 0.0
    for le in bounds:
        count = buckets[le]
        if count >= rank:
            if math.isinf(le):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-12)
        lower, below = le, count
    return lower


def group_figures(
    targets: Sequence[str], start: Sequence[Snapshot], end: Sequence[Snapshot]
) -> dict[str, Any]:
    """Per-target decisions/s (summed over the group: a target decided by any replica),
    decision lag p50/p99 and the share of decisions within 1 s (the group's histograms
    added), CPU cores (the group's)."""
    wall = statistics_mean([e.t - s.t for s, e in zip(start, end, strict=True)])
    pairs = list(zip(start, end, strict=True))
    per_target = [
        sum(e.decisions.get(key, 0.0) - s.decisions.get(key, 0.0) for s, e in pairs) / wall
        for key in targets
    ]
    lag: dict[float, float] = {}
    for s, e in zip(start, end, strict=True):
        for le, v in e.lag_buckets.items():
            lag[le] = lag.get(le, 0.0) + v - s.lag_buckets.get(le, 0.0)
    total = lag.get(math.inf, 0.0)
    cpu = sum(e.cpu_s - s.cpu_s for s, e in zip(start, end, strict=True))
    return {
        "measured_s": round(wall, 1),
        "decisions_per_target_s": round(sum(per_target) / len(per_target), 3),
        "min_decisions_per_target_s": round(min(per_target), 3),
        "targets_below_0_9_per_s": sum(1 for x in per_target if x < 0.9),
        "decision_lag_p50_ms": round(1000 * histogram_quantile(0.5, lag), 1),
        "decision_lag_p99_ms": round(1000 * histogram_quantile(0.99, lag), 1),
        "decisions_within_1s": round(lag.get(1.0, 0.0) / total, 4) if total else math.nan,
        "cpu_cores": round(cpu / wall, 3),
        "cpu_cores_by_replica": [
            round((e.cpu_s - s.cpu_s) / wall, 3) for s, e in zip(start, end, strict=True)
        ],
    }


def statistics_mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)
