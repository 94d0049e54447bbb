"""The controller at fleet scale, as a black box: N targets x 8 pods, pollingInterval 1 s,
R `llm-autoscaler run` processes.

Run: nice -n 10 .venv/bin/python benchmarks/bench_scale.py --targets 500 [--duration 20]
     [--apiserver local|real] [--replicas R --shards S] [--flags ...]
(writes benchmarks/results/scale.json: one row per API server, N, R and S, merged with the
rows there)
Side by side: --ablation (each remaining performance mechanism with it removed, in fresh
processes, --rounds rounds; merged into benchmarks/results/ablation.json) and
--baseline REV (that revision's ``autoscaler`` package from ``git archive`` and this tree,
alternately; written under "baseline" in scale.json).

The fleet (benchmarks/fleet.py): N Deployments with 8 Ready pods each, every pod's
/metrics on its own loopback address (the vLLM V1 fixture page, counters growing on every
scrape) and one LLMAutoscaler per Deployment, steady at 8 replicas with the forecast
planner on (no scale writes), on the local API endpoint (``--apiserver local``, spawned
beside the pods) or on etcd + kube-apiserver 1.24 (``--apiserver real``, binaries as
tests/real finds them).

The controllers are ``python -m autoscaler run --kubeconfig ...`` with no other flag than
``--flags`` (and, with ``--replicas R > 1``, ``--shards S --shard-scope held``). Once every
target has been decided and ``--warmup`` seconds more, the benchmark reads each process's
``/metrics`` and /proc at the start and end of ``--duration`` seconds:

- decisions per target per second from ``llm_autoscaler_decisions_total`` (summed over
  the group; the least-decided target's rate, a never-decided target counting 0);
- decision lag p50/p99 as Prometheus's ``histogram_quantile`` over the group's
  ``llm_autoscaler_decision_lag_seconds`` buckets, and the share of decisions within 1 s
  (a bucket bound: exact); past the last finite bound (5 s) a quantile is a lower bound;
- CPU cores (utime + stime of every controller, /proc/<pid>/stat) and group PSS/RSS
  (/proc/<pid>/smaps_rollup, at the end); the processes serving the fleet (pods, API
  server, etcd) apart, never in the group's figure;
- Lease writes (create/update/patch) and all API requests per second, counted by the
  local endpoint or by the real API server's ``apiserver_request_total``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

import fleet
from revisions import extract, short_rev, tree_rev

RESULTS = "scale.json"
GOAL = {  # the per-process envelope goal, no flags, 1 s polling
    "min_decisions_per_target_s": 0.9,
    "decision_lag_p99_ms": 1000.0,
    "cpu_cores": 1.0,
    "pss_mb_group": 250.0,
}


# ------------------------------------------------------------------------------- one run
def serve_cluster(
    targets: int, pods: int, ready_file: str, stats_file: str, pages: int, wrap: bool = False
) -> None:
    """The local cluster process (pods + local API), for benchmarks that drive their own
    controller (bench_hostile); pages never wrap (``wrap`` is accepted and ignored)."""
    del wrap
    fleet.serve_local(targets, pods, pages, ready_file, stats_file)


def settle(ctls: list[fleet.Controller], names: list[str], limit_s: float) -> float:
    """Wait until every target has a decision (on any replica); the seconds it took."""
    start = time.monotonic()
    want = {f"{fleet.NAMESPACE}/{n}" for n in names}
    while True:
        decided: set[str] = set()
        for c in ctls:
            if c.proc.poll() is not None:
                raise RuntimeError(f"{c.name} exited:\n{c.log.read_text()[-3000:]}")
            decided |= set(fleet.snapshot(c).decisions)
        if want <= decided:
            return time.monotonic() - start
        if time.monotonic() - start > limit_s:
            missing = len(want - decided)
            raise RuntimeError(f"{missing} targets undecided after {limit_s:.0f} s")
        time.sleep(1.0)


def controller_flags(args: argparse.Namespace, replicas: int) -> list[str]:
    flags = list(args.flags)
    if replicas > 1:
        flags += ["--shards", str(args.shards), "--shard-scope", "held"]
    return flags


def measure(
    c: fleet.Cluster,
    targets: int,
    args: argparse.Namespace,
    *,
    replicas: int = 1,
    flags: list[str] | None = None,
    argv0: list[str] | None = None,
    pythonpath: Path | None = None,
) -> dict[str, Any]:
    """R controllers on cluster ``c``: their group figures over ``--duration`` s."""
    names = fleet.target_names(targets)
    flags = controller_flags(args, replicas) if flags is None else flags
    ctls = fleet.start_controllers(c, replicas, flags, argv0=argv0, pythonpath=pythonpath)
    try:
        settle_s = settle(ctls, names, args.settle_limit)
        time.sleep(args.warmup)
        servers = c.server_pids()
        s_servers = {k: fleet.proc_cpu_s(p) for k, p in servers.items()}
        s_req, s_scrapes = c.api_requests(), c.scrapes()
        start = [fleet.snapshot(x) for x in ctls]
        load = os.getloadavg()[0]
        time.sleep(args.duration)
        end = [fleet.snapshot(x) for x in ctls]
        e_req, e_scrapes = c.api_requests(), c.scrapes()
        e_servers = {k: fleet.proc_cpu_s(p) for k, p in servers.items()}
        mem = [fleet.proc_mb(x.pid) for x in ctls]
        for x in ctls:
            if x.proc.poll() is not None:
                raise RuntimeError(f"{x.name} exited while measured")
    finally:
        for x in ctls:
            x.stop()
    row = fleet.group_figures([f"{fleet.NAMESPACE}/{n}" for n in names], start, end)
    wall = row["measured_s"]
    req = {k: v - s_req.get(k, 0.0) for k, v in e_req.items() if v - s_req.get(k, 0.0) > 0}
    leases = fleet.lease_writes(req)
    decided = row["decisions_per_target_s"] * targets * wall
    row.update(
        {
            "apiserver": c.apiserver,
            "targets": targets,
            "pods": targets * fleet.PODS,
            "replicas": replicas,
            "flags": " ".join(flags) or "(none)",
            "settle_s": round(settle_s, 1),
            # the machine's 1-minute load average (runnable processes) at the start and
            # end: others' work competes for the same cores
            "load_avg": [round(load, 2), round(os.getloadavg()[0], 2)],
            "cpu_ms_per_decision": round(1000 * row["cpu_cores"] * wall / max(decided, 1), 3),
            "pss_mb_group": round(sum(m.get("pss", math.nan) for m in mem), 1),
            "rss_mb_group": round(sum(m["rss"] for m in mem), 1),
            "pss_mb_by_replica": [round(m.get("pss", math.nan), 1) for m in mem],
            "shards_held": [e.held for e in end],
            "lease_writes_per_s": round(leases / wall, 2),
            "lease_writes_per_target_s": round(leases / wall / targets, 4),
            "api_requests_per_s": round(sum(req.values()) / wall, 1),
            "api_requests_by_verb_per_s": {k: round(v / wall, 2) for k, v in sorted(req.items())},
            "pod_scrapes_per_s": round((e_scrapes - s_scrapes) / wall, 1),
            "server_cpu_cores": {
                k: round((e_servers[k] - s_servers[k]) / wall, 3) for k in servers
            },
        }
    )
    row["meets_goal"] = (
        row["min_decisions_per_target_s"] >= GOAL["min_decisions_per_target_s"]
        and row["decision_lag_p99_ms"] <= GOAL["decision_lag_p99_ms"]
        and row["cpu_cores"] <= GOAL["cpu_cores"] * replicas
        and row["pss_mb_group"] <= GOAL["pss_mb_group"] * replicas
    )
    return row


def pages_for(args: argparse.Namespace) -> int:
    """Enough page variants for the whole run at one scrape per second (never wrapping)."""
    pages: int = math.ceil(args.settle_limit + args.warmup + args.duration) + 60
    return pages


def _lag(ms: float) -> str:
    """A lag quantile past the histogram's last finite bound (5 s) is only known to be
    at least that."""
    return f">= {ms:g}" if ms >= 5000 else f"{ms:g}"


def table(rows: list[dict[str, Any]]) -> str:
    head: list[object] = [
        "API server",
        "targets",
        "replicas (flags)",
        "decisions/target/s: mean (min)",
        "lag p50 / p99 ms (within 1 s)",
        "CPU cores (by replica)",
        "PSS MB (group)",
        "Lease writes/target/s",
        "API req/s",
        "serving cores",
    ]
    body: list[list[object]] = [head]
    for r in rows:
        body.append(
            [
                r["apiserver"],
                r["targets"],
                f"{r['replicas']} ({r['flags']})",
                f"{r['decisions_per_target_s']} ({r['min_decisions_per_target_s']})",
                f"{_lag(r['decision_lag_p50_ms'])} / {_lag(r['decision_lag_p99_ms'])} "
                f"({r['decisions_within_1s']:.2%})",
                f"{r['cpu_cores']} ({', '.join(map(str, r['cpu_cores_by_replica']))})",
                r["pss_mb_group"],
                r["lease_writes_per_target_s"],
                r["api_requests_per_s"],
                ", ".join(f"{k} {v}" for k, v in r["server_cpu_cores"].items()),
            ]
        )
    return fleet.markdown_table(body)


# -------------------------------------------------------------------- variants (ablation)
class AiohttpPageClient:
    """`PageClient`'s interface on aiohttp (the ablation's variant "aiohttp"): one
    ``ClientSession`` with a keep-alive connector, ``ClientTimeout(total=timeout_s)``, the
    body bounded while it arrives."""

    def __init__(self, *, timeout_s: float, max_body_bytes: int, keepalive_s: float = 30.0) -> None:
        import aiohttp

        self.max_body_bytes = max_body_bytes
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=keepalive_s),
            timeout=aiohttp.ClientTimeout(total=timeout_s),
            headers={"Accept": "text/plain;version=0.0.4;q=0.9,*/*;q=0.1"},
        )
        self.connects = 0

    async def get(self, url: str, query: bytes = b"") -> bytes:
        import yarl

        from autoscaler.metrics.page_client import PageFetchError

        sep = "&" if "?" in url else "?"
        full = f"{url}{sep}{query.decode('ascii')}" if query else url
        async with self._session.get(yarl.URL(full, encoded=True), allow_redirects=False) as r:
            if r.status != 200:
                raise PageFetchError(f"HTTP {r.status}")
            chunks: list[bytes] = []
            size = 0
            async for chunk in r.content.iter_any():
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


def run_variant_controller(variant: str, argv: list[str]) -> int:
    """``bench_scale.py --controller VARIANT <llm-autoscaler argv>``: the CLI with one
    mechanism taken out first."""
    if variant == "no-lazy-kube":  # the real client imported before any autoscaler module
        import kubernetes_asyncio.client  # noqa: F401
    if variant == "aiohttp":
        import autoscaler.metrics.pod_scrape as pod_scrape

        setattr(pod_scrape, "PageClient", AiohttpPageClient)  # noqa: B010
    from autoscaler.cli import main

    return main(argv)


def _variant_exists(module: str) -> bool:
    return (fleet.ROOT / module).exists()


# (name, controller flags, wrapper variant or None, module whose presence it needs)
VARIANTS: tuple[tuple[str, tuple[str, ...], str | None, str], ...] = (
    ("default", (), None, "autoscaler"),
    ("no-phases", ("--tick-phases", "1"), None, "autoscaler"),
    ("aiohttp", (), "aiohttp", "autoscaler/metrics/page_client.py"),
    ("no-lazy-kube", (), "no-lazy-kube", "autoscaler/_lazy_kube.py"),
)
# (mechanism, the variant with it, the variant without it)
MECHANISMS: tuple[tuple[str, str, str], ...] = (
    ("(b) hand-written HTTP/epoll client (vs aiohttp)", "default", "aiohttp"),
    ("(e) lazy kubernetes_asyncio (sys.modules)", "default", "no-lazy-kube"),
    ("(f) tick phases (P=10 vs 1)", "default", "no-phases"),
)
# (label, key, True when higher is better): the figures the 20% rule reads
FIGURES: tuple[tuple[str, str, bool], ...] = (
    ("CPU ms/decision", "cpu_ms_per_decision", False),
    ("PSS MB (group)", "pss_mb_group", False),
    ("decision lag p99 ms", "decision_lag_p99_ms", False),
    ("min decisions/target/s", "min_decisions_per_target_s", True),
)
RULE = 0.20  # a mechanism stays only if removing it costs more than this on one figure


def removal_cost(with_: float, without: float, higher_is_better: bool) -> float:
    """What removing a mechanism costs on one figure, as a fraction of the figure with
    it (positive: worse without it)."""
    if not with_ or math.isnan(with_) or math.isnan(without):
        return math.nan
    return (with_ - without) / with_ if higher_is_better else (without - with_) / with_


def _median(values: list[float]) -> float:
    finite = [v for v in values if not math.isnan(v)]
    return round(statistics.median(finite), 3) if finite else math.nan


def ablation(args: argparse.Namespace) -> None:
    """Every variant whose mechanism is still in the tree, on one cluster, one after the
    other, ``--rounds`` rounds (a round sees the same load for every variant); medians,
    each mechanism's removal cost and the 20% verdict. Mechanisms already removed keep
    their rows in ablation.json (measured on the revision named there)."""
    n = args.targets[0]
    variants = [v for v in VARIANTS if _variant_exists(v[3])]
    raw: dict[str, list[dict[str, Any]]] = {v[0]: [] for v in variants}
    with fleet.cluster(args.apiserver, n, fleet.PODS, pages_for(args)) as c:
        for r in range(args.rounds):
            for name, flags, wrapper, _ in variants:
                argv0 = None
                if wrapper is not None:
                    argv0 = [sys.executable, __file__, "--controller", wrapper]
                row = measure(c, n, args, flags=[*args.flags, *flags], argv0=argv0)
                raw[name].append(row)
                print(f"round {r + 1} {name}:\n{table([row])}", flush=True)
    medians = {
        name: {key: _median([row[key] for row in rows]) for _, key, _ in FIGURES}
        | {"cpu_cores": _median([row["cpu_cores"] for row in rows])}
        for name, rows in raw.items()
    }
    verdicts: list[dict[str, Any]] = []
    for mechanism, with_, without in MECHANISMS:
        if with_ not in medians or without not in medians:
            continue
        costs = {
            key: removal_cost(medians[with_][key], medians[without][key], better)
            for _, key, better in FIGURES
        }
        worst = max((x for x in costs.values() if not math.isnan(x)), default=math.nan)
        verdicts.append(
            {
                "mechanism": mechanism,
                "with": with_,
                "without": without,
                "removal_cost": {k: round(v, 3) for k, v in costs.items()},
                "verdict": "stays" if worst > RULE else "goes",
            }
        )
    head = (
        f"N={n} targets x {fleet.PODS} pods, 1 s polling, one process, {args.apiserver} API "
        f"server, median of {args.rounds} rounds; each cell: with -> without (removal cost)"
    )
    rows: list[list[object]] = [["mechanism", *(f[0] for f in FIGURES), "verdict"]]
    for v in verdicts:
        rows.append(
            [
                v["mechanism"],
                *(
                    f"{medians[v['with']][k]} -> {medians[v['without']][k]} "
                    f"({v['removal_cost'][k]:+.0%})"
                    for _, k, _ in FIGURES
                ),
                v["verdict"],
            ]
        )
    markdown = head + "\n\n" + fleet.markdown_table(rows)
    print(markdown, flush=True)
    out = Path(args.out or fleet.RESULTS_DIR / "ablation.json")
    previous = json.loads(out.read_text()) if out.exists() else {}
    document = {
        "benchmark": "bench_scale --ablation",
        "command": fleet.command_line("bench_scale.py"),
        "code": tree_rev(),
        "targets": n,
        "rounds": args.rounds,
        "medians": medians,
        "mechanisms": verdicts,
        "markdown": markdown,
        "raw": raw,
        # the record of mechanisms no longer in the tree (measured on its own revision)
        "earlier": previous.get("earlier") or {k: v for k, v in previous.items() if k != "earlier"},
    }
    fleet.write_results(str(out), document)


# ------------------------------------------------------------------------------ baseline
def baseline(args: argparse.Namespace) -> dict[str, Any]:
    """``--baseline REV``: that revision's package and this tree, alternately on one
    cluster, ``--rounds`` times each; medians side by side."""
    rev = short_rev(args.baseline)
    n = args.targets[0]
    keys = [f[1] for f in FIGURES] + ["cpu_cores", "decision_lag_p50_ms"]
    before: list[dict[str, Any]] = []
    after: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        code = extract(rev, Path(tmp) / "base")
        with fleet.cluster(args.apiserver, n, fleet.PODS, pages_for(args)) as c:
            for _ in range(args.rounds):
                before.append(measure(c, n, args, pythonpath=code))
                after.append(measure(c, n, args))
    rows: list[list[object]] = [["figure", rev, tree_rev(), "after / before"]]
    for k in keys:
        b, a = _median([r[k] for r in before]), _median([r[k] for r in after])
        rows.append([k, b, a, f"{a / b:.2f}" if b else "-"])
    markdown = f"N={n}, median of {args.rounds} alternating runs\n\n" + fleet.markdown_table(rows)
    print(markdown)
    return {"baseline": rev, "markdown": markdown, "raw": {"before": before, "after": after}}


# ---------------------------------------------------------------------------------- main
RUN_FIGURES = (
    "decisions_per_target_s",
    "min_decisions_per_target_s",
    "decision_lag_p99_ms",
    "cpu_cores",
    "cpu_ms_per_decision",
    "pss_mb_group",
    "load_avg",
)


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run with the median least-decided target (a whole run, its figures together),
    with every run's main figures under ``runs`` (the machine is shared: the spread is
    part of the result)."""
    ranked = sorted(runs, key=lambda r: r["min_decisions_per_target_s"])
    row = dict(ranked[(len(ranked) - 1) // 2])
    row["runs"] = [{k: r[k] for k in RUN_FIGURES} for r in runs]
    return row


def merge_rows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per configuration (API server, N, replicas, flags): the new ones replace
    the old ones of the same configuration."""

    def key(r: dict[str, Any]) -> tuple[str, int, int, str]:
        return r["apiserver"], r["targets"], r["replicas"], r["flags"]

    fresh = {key(r) for r in new}
    return sorted([r for r in old if key(r) not in fresh] + new, key=key)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--targets", type=int, nargs="+", default=[500])
    parser.add_argument("--apiserver", choices=("local", "real"), default="local")
    parser.add_argument("--replicas", type=int, default=1, help="controller processes (R)")
    parser.add_argument(
        "--shards", type=int, default=None, help="shard Leases with --replicas > 1 (default 2R)"
    )
    parser.add_argument(
        "--flags",
        type=shlex.split,
        default=[],
        help="extra `llm-autoscaler run` flags for every controller, one string "
        "(e.g. --flags='--tick-phases 1'; default: none)",
    )
    parser.add_argument("--warmup", type=float, default=10.0, help="s after every target decided")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--settle-limit", type=float, default=300.0, help=argparse.SUPPRESS)
    parser.add_argument("--ablation", action="store_true")
    parser.add_argument("--baseline", default=None, help="a git revision, side by side")
    parser.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="runs of each side (--ablation, --baseline: default 2) or of the envelope on "
        "one cluster (default 1; the row is the median run, every run listed)",
    )
    parser.add_argument("--out", default=None, help="results file (default: results/scale.json)")
    args = parser.parse_args(argv)
    if args.rounds is None:
        args.rounds = 2 if args.ablation or args.baseline else 1
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: must be at least 1")
    if args.replicas < 1:
        parser.error(f"--replicas {args.replicas}: must be at least 1")
    if args.shards is None:
        args.shards = 2 * args.replicas
    if args.replicas > 1 and args.shards < args.replicas:
        parser.error(f"--shards {args.shards}: must be at least --replicas ({args.replicas})")
    return args


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--controller"]:
        raise SystemExit(run_variant_controller(argv[1], argv[2:]))
    args = parse_args(argv)
    fleet.raise_fd_limit()
    if args.ablation:
        ablation(args)
        return
    out = Path(args.out) if args.out else fleet.RESULTS_DIR / RESULTS
    document = json.loads(out.read_text()) if out.exists() else {}
    if args.baseline:
        document["baseline"] = baseline(args)
    else:
        rows = []
        for n in args.targets:
            with fleet.cluster(args.apiserver, n, fleet.PODS, pages_for(args)) as c:
                runs = [measure(c, n, args, replicas=args.replicas) for _ in range(args.rounds)]
            row = median_run(runs)
            row["command"] = fleet.command_line("bench_scale.py")
            rows.append(row)
            print(table([row]), flush=True)

        document["rows"] = merge_rows(document.get("rows", []), rows)
    document.update(
        {
            "benchmark": "bench_scale",
            "code": tree_rev(),
            "goal": GOAL,
            "markdown": table(document.get("rows", [])),
        }
    )
    document.pop("machine", None)
    print(document["markdown"])
    fleet.write_results(str(out), document)


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
