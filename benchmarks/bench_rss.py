"""The controller's whole memory at fleet scale, in steady state: RSS and where it goes.

Usage:
    nice -n 10 .venv/bin/python benchmarks/bench_rss.py [--targets 1000] [--ticks 32]
        [--step 2] [--baseline REV[+NAME=VALUE] ...] [--variants now [now+NAME=VALUE ...]]
        [--trace]

One process is the cluster (as in bench_scale.py): the local Kubernetes API endpoint with
N Deployments, N x 8 Ready pods and N LLMAutoscalers, and every pod's /metrics on its own
loopback address; each pod's counters and buckets grow on every scrape and never reset
(a steady fleet). The measured process is a fresh interpreter per variant that composes
the controller as ``llm-autoscaler run`` does (`autoscaler.app.Controller`: CRD policy
store and watch, leader election, the shared informers, pod scraping, the control loop,
the REST and gRPC servers, ``/metrics``), except that the control loop runs on a fake
clock the benchmark advances, so steady state comes in minutes instead of 10:

1. before the controller starts, one target is run through the real `ControlLoop` with
   the forecast planner for 700 ticks of that fake clock (bench_memory.py's recording);
2. the controller starts and syncs its informers and targets; after its first tick each
   target's observation ring (600) and decision history (500) are filled with that
   recording (each target its own copies of the decisions' messages, metrics and
   numbers, as the loop makes them) and its planner replaced by a copy of the recorded
   one (each copy its own floats, as each target's planner has);
3. ``--ticks`` real ticks follow (every target scrapes its 8 pods over HTTP, parses,
   updates its windows and planner, decides, publishes), the fake clock ``--step``
   seconds apart: 32 ticks 2 s apart cover the 60 s scrape window, and a pod's window
   then holds as many rows as with 1 s scrapes (11: a row at most every window/12 = 5 s
   plus the newest; 5 s steps would keep 7); the newest entries of every history are
   then the loop's own. The controller's ``/metrics`` is read over HTTP every 15 s of
   that clock, as a Prometheus scraping it would (its page is built per scrape).

The child runs on the event loop ``llm-autoscaler run`` uses (`commands.run.run_loop`:
uvloop when installed) and tunes the GC as it does once started (`tune_gc`).

Then: RSS (VmRSS, after gc) by phase (interpreter, imports, controller started, informers
synced, first tick, histories and planners filled, windows full), RSS after
``malloc_trim(0)`` (what the allocator holds free), the objects reachable from each part
of the controller (`components`: sys.getsizeof over gc referents, each object counted for
the first part that reaches it; the rest of the live objects last), with ``--census``
live objects by type, and with ``--trace`` (slow: small N only) a tracemalloc
breakdown by component (a second interpreter per variant, tracing from after the imports;
each allocation goes to the innermost frame of a file with a known owner, so a parsed
JSON string the pod record keeps counts for the informer cache, not for ``json``).
``--variants`` names configurations measured side by side against the same cluster:
``now`` (the working tree), optionally with environment settings of its child
(``now+PYTHONMALLOC=malloc``). ``--baseline REV ...`` measures those revisions first
(their ``autoscaler`` package from ``git archive``, benchmarks/revisions.py, first on the
child's PYTHONPATH), each optionally with ``+NAME=VALUE`` settings as a variant.

At every phase the benchmark also reads the controller's RSS (VmRSS) and PSS
(``/proc/<pid>/smaps_rollup``) and its resident memory counting each physical page once
(``group_rss``, from ``/proc/<pid>/pagemap``, root only) (``processes_mb``).

The cluster is benchmarks/fleet.py's (shared with bench_scale). Prints tables; writes
benchmarks/results/rss.json (one entry per ``--targets``).
"""

from __future__ import annotations

import argparse
import array
import asyncio
import contextlib
import ctypes
import gc
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import fleet
import image_modules
from fleet import proc_mb

ROOT = Path(__file__).parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "rss.json"
PODS = fleet.PODS
# The controller's /metrics read every this many (fake-clock) seconds of the steady phase,
# as Prometheus scrapes it (deploy/prometheus/servicemonitor.yaml: 15 s).
METRICS_SCRAPE_S = 15.0
HEAVY_MODULES = ("matplotlib", "autoscaler.sim", "autoscaler.emulator", "autoscaler.demo")


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
_PFN_MASK = (1 << 55) - 1
_PRESENT = 1 << 63


def resident_frames(pid: int | str) -> set[int] | None:
    """The physical page frames resident in one process's address space, from
    ``/proc/<pid>/pagemap`` (frame numbers are readable by root only: None otherwise).

    Why: the RSS of a process group is not the sum of its RSSs. A page mapped by the
    controller and a worker (libpython, libssl, every shared ``.so``) is resident once,
    as a container's memory counts it; the union of the frames is what one process with
    the same mappings would report as its RSS."""
    frames: set[int] = set()
    try:
        maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
        pagemap = open(f"/proc/{pid}/pagemap", "rb", buffering=0)  # noqa: SIM115 closed below
    except OSError:
        return None
    with pagemap:
        for line in maps:
            start_s, _, rest = line.partition("-")
            end_s = rest.split(" ", 1)[0]
            if line.endswith("[vsyscall]"):
                continue
            start, end = int(start_s, 16) // PAGE_BYTES, int(end_s, 16) // PAGE_BYTES
            try:
                pagemap.seek(start * 8)
                raw = pagemap.read((end - start) * 8)
            except OSError:
                continue
            entries = array.array("Q", raw[: len(raw) - len(raw) % 8])
            for e in entries:
                if e & _PRESENT:
                    frames.add(e & _PFN_MASK)
    frames.discard(0)  # frame numbers hidden (no CAP_SYS_ADMIN): read as 0
    return frames or None


def _group_resident_main(pids: Sequence[str]) -> None:
    union: set[int] = set()
    for pid in pids:
        frames = resident_frames(pid)
        if frames is None:
            print("null")
            return
        union |= frames
    print(len(union) * PAGE_BYTES / 2**20)


def group_resident_mb(pids: Sequence[int]) -> float | None:
    """Resident memory of a process group counting each physical page once (MB), None
    where frame numbers cannot be read (never a partial figure). Read by another process
    so the frame sets (~100k numbers) never land in the measured controller's heap."""
    proc = subprocess.run(
        [sys.executable, __file__, "--group-rss", *map(str, pids)],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": ""},
    )
    out = json.loads(proc.stdout.strip())
    return None if out is None else float(out)


def processes_mb() -> dict[str, Any]:
    """The controller's RSS and PSS and its resident memory with each physical page
    counted once (``group_rss``, MB; absent where frame numbers cannot be read)."""
    out: dict[str, Any] = {"controller": proc_mb()}
    for key in ("rss", "pss"):
        if key in out["controller"]:
            out[f"sum_{key}"] = out["controller"][key]
    group = group_resident_mb([os.getpid()])
    if group is not None:
        out["group_rss"] = group
    return out


# --------------------------------------------------------------------------- components
# file (relative to site-packages or the repo) -> component; first match, longest first
COMPONENTS: tuple[tuple[str, str], ...] = (
    ("autoscaler/kube/informer.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/kube/pods.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/kube/scale.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/kube/capacity.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/kube/cache.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/kube/selectors.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/kube/gpu.py", "informer caches (pods, workloads, nodes) + pod index"),
    ("autoscaler/store/", "policy store: LLMAutoscaler specs + CRD cache"),
    ("autoscaler/target.py", "policy store: LLMAutoscaler specs + CRD cache"),
    ("autoscaler/policy/schema.py", "policy store: LLMAutoscaler specs + CRD cache"),
    ("autoscaler/policy/", "decision objects (policy core)"),
    ("autoscaler/control/history.py:decisions", "decision histories"),
    ("autoscaler/control/history.py:observations", "observation rings"),
    ("autoscaler/control/loop.py", "control loop (per-target state, decision numbers)"),
    ("autoscaler/control/", "control loop (per-target state, decision numbers)"),
    ("autoscaler/forecast/", "forecast planners"),
    ("autoscaler/metrics/signals.py", "scrape windows (metrics/signals.py)"),
    ("autoscaler/metrics/page_client.py", "pod scrape connections (page client)"),
    ("autoscaler/metrics/", "parsed pages kept (metrics parser)"),
    ("autoscaler/api/metrics.py", "/metrics collector"),
    ("prometheus_client/", "/metrics collector"),
    ("autoscaler/kube/", "kube adapters (events, leader, status)"),
    ("kubernetes_asyncio/", "kubernetes-asyncio"),
    ("aiohttp/", "aiohttp"),
    ("asyncio/", "asyncio (transports, tasks)"),
    ("autoscaler/api/", "REST API / dashboard"),
    ("fastapi/", "REST API / dashboard"),
    ("starlette/", "REST API / dashboard"),
    ("uvicorn/", "REST API / dashboard"),
    ("grpc/", "gRPC (KEDA)"),
    ("autoscaler/keda/", "gRPC (KEDA)"),
    ("tracemalloc.py", "tracemalloc snapshot (not the controller)"),
)


def _ranges() -> dict[str, list[tuple[int, int, str]]]:
    """file -> line ranges of the classes/functions whose allocations have their own
    component (history.py's two histories; the benchmark's fill stands for what the loop
    would have built: decision copies kept by the histories, planner copies)."""
    import inspect

    import bench_memory

    from autoscaler.control import history

    out: dict[str, list[tuple[int, int, str]]] = {}
    for obj, name in (
        (history.DecisionHistory, "autoscaler/control/history.py:decisions"),
        (history.ObservationRing, "autoscaler/control/history.py:observations"),
        (history._ObsBlock, "autoscaler/control/history.py:observations"),
        (history._DecisionBlock, "autoscaler/control/history.py:decisions"),
        (history._Columns, "autoscaler/control/history.py:observations"),
        (bench_memory.clone, "autoscaler/control/history.py:decisions"),
        (bench_memory._new_float, "autoscaler/control/history.py:decisions"),
        (_planner_copy, "autoscaler/forecast/"),
    ):
        lines, start = inspect.getsourcelines(obj)  # type: ignore[arg-type]
        path = inspect.getsourcefile(obj)  # type: ignore[arg-type]
        assert path is not None
        out.setdefault(path, []).append((start, start + len(lines), name))
    return out


class Classifier:
    def __init__(self) -> None:
        self.ranges = _ranges()
        self._by_file: dict[str, str | None] = {}

    def _file(self, filename: str, lineno: int) -> str | None:
        ranges = self.ranges.get(filename)
        if ranges is not None:
            for lo, hi, name in ranges:
                if lo <= lineno < hi:
                    filename = name
                    break
        elif filename in self._by_file:
            return self._by_file[filename]
        for key, component in COMPONENTS:
            if key in filename:
                if ":" not in filename:
                    self._by_file[filename] = component
                return component
        if ":" not in filename:
            self._by_file[filename] = None
        return None

    def __call__(self, traceback: tracemalloc.Traceback) -> str:
        for frame in reversed(traceback):  # innermost first (tracemalloc: oldest first)
            component = self._file(frame.filename, frame.lineno)
            if component is not None:
                return component
        f = traceback[-1].filename
        return "other: " + ("/".join(Path(f).parts[-2:]) if f else "?")


# ------------------------------------------------------------------------------- child
def _own_float(x: float, memo: dict[int, Any]) -> float:
    y = memo.get(id(x))
    if y is None:
        y = memo[id(x)] = x * 1.0  # a new object (sign of zero and NaN kept)
    return y  # type: ignore[no-any-return]


def _planner_copy(planner: Any, spec: Any) -> Any:
    """A copy of the recorded planner with its own floats (shared within the copy as in
    the original, where a sample sits in a book and in its sorted copy)."""
    import copy

    atomic = copy._deepcopy_dispatch[float]  # type: ignore[attr-defined]
    copy._deepcopy_dispatch[float] = _own_float  # type: ignore[attr-defined]
    try:
        adapter = copy.deepcopy(planner)
    finally:
        copy._deepcopy_dispatch[float] = atomic  # type: ignore[attr-defined]
    adapter.spec = spec
    return adapter


def _proxy(d: dict[str, Any]) -> Any:
    from types import MappingProxyType

    return MappingProxyType(d)


def census(top: int = 40) -> dict[str, list[float]]:
    """Live objects by type: [MB, count] (every gc-tracked object and the untracked ones
    they refer to: str, float, int, bytes, array ...); sizes are sys.getsizeof."""
    seen: set[int] = set()
    by: dict[str, list[float]] = {}

    def add(o: object) -> None:
        if id(o) in seen:
            return
        seen.add(id(o))
        row = by.setdefault(type(o).__qualname__, [0.0, 0.0])
        row[0] += sys.getsizeof(o)
        row[1] += 1

    for o in gc.get_objects():
        add(o)
        for r in gc.get_referents(o):
            if not gc.is_tracked(r):
                add(r)
    rows = sorted(by.items(), key=lambda kv: -kv[1][0])[:top]
    return {k: [round(v[0] / 2**20, 2), int(v[1])] for k, v in rows}


def components(ctl: Any, source: Any) -> dict[str, float]:
    """MB reachable from each component's roots (sys.getsizeof of every object reached
    through gc.get_referents, not entering modules, classes or functions), in this order;
    an object reached from two components counts for the first. The last row is every
    other live object (gc-tracked, and the untracked ones they refer to)."""
    import types

    stop = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType, types.CodeType)
    seen: set[int] = set()

    def walk(roots: list[object], types_of: dict[str, float] | None = None) -> float:
        total = 0
        stack = list(roots)
        seen.add(id(stack))
        while stack:
            o = stack.pop()
            if id(o) in seen or isinstance(o, stop):
                continue
            seen.add(id(o))
            size = sys.getsizeof(o)
            total += size
            if types_of is not None:
                name = type(o).__qualname__
                types_of[name] = types_of.get(name, 0.0) + size / 2**20
            stack.extend(gc.get_referents(o))
        return total / 2**20

    seen.add(id(ctl))
    seen.add(id(seen))  # the walk's own bookkeeping is not the controller's
    # nor is the event loop a component: entered, it reaches whatever it has a callback of
    # (the page client's one epoll reader reaches every connection from the kube client)
    seen.add(id(asyncio.get_running_loop()))
    state, loop, cache = ctl.state, ctl.loop, ctl.cache
    targets = list(state.targets.values())
    out: dict[str, float] = {}
    for name, roots in (
        ("decision histories (500 per target)", [st.history for st in targets]),
        ("observation rings (600 per target)", [st.observations for st in targets]),
        ("scrape windows (8 pods per target)", [getattr(source, "_histories", {})]),
        ("forecast planners", [loop._planners]),
        (
            "informer caches + pod index (pods, workloads, nodes)",
            [*(i.items for i in cache.informers), cache.index, cache.gpus],
        ),
        ("policy store + target specs", [ctl.store, *(st.spec for st in targets)]),
        (
            "latest decision + loop state per target",
            [
                *(st.last_decision for st in targets),
                loop._decision_states,
                loop._next_due,
                loop._failing,
                state.targets,
            ],
        ),
        ("/metrics collector", [ctl.metrics]),
        ("pod scrape connections + buffers", [getattr(source, "_http", None)]),
        ("kube clients, adapters, recorder", [ctl.cluster, ctl.api, ctl.leases]),
        ("REST + gRPC servers", [ctl.http, ctl.grpc]),
    ):
        out[name] = walk(roots)
    rest: list[object] = []
    seen.add(id(rest))
    for o in gc.get_objects():
        if id(o) not in seen:
            rest.append(o)
    rest_types: dict[str, float] = {}
    out["everything else live (asyncio, logging, caches, interned strings)"] = walk(
        rest, rest_types
    )
    top = sorted(rest_types.items(), key=lambda kv: -kv[1])[:12]
    REST_BY_TYPE.clear()
    REST_BY_TYPE.update({k: round(v, 2) for k, v in top})
    return out


REST_BY_TYPE: dict[str, float] = {}  # the last `components` call's "everything else"


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def allocator_stats() -> dict[str, float]:
    """MB held by the two allocators: pymalloc (objects <= 512 bytes: its arenas, the
    bytes in live blocks, free blocks and empty pools, from sys._debugmallocstats) and
    glibc malloc (mallinfo2: heap + mmapped, in use, free); {} where unavailable."""
    out: dict[str, float] = {}
    with tempfile.TemporaryFile(mode="w+") as f:
        saved = os.dup(2)
        try:
            sys.stderr.flush()
            os.dup2(f.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        f.seek(0)
        text = f.read()
    for key, pattern in (
        ("pymalloc_arenas", r"(\d+) arenas \* \d+ bytes/arena\s+=\s+([\d,]+)"),
        ("pymalloc_blocks_in_use", r"# bytes in allocated blocks\s+=\s+([\d,]+)"),
        ("pymalloc_free_blocks", r"# bytes in available blocks\s+=\s+([\d,]+)"),
        ("pymalloc_empty_pools", r"\d+ unused pools \* \d+ bytes\s+=\s+([\d,]+)"),
    ):
        m = re.search(pattern, text)
        if m:
            out[key] = int(m.groups()[-1].replace(",", "")) / 2**20
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        mi = libc.mallinfo2()
    except (OSError, AttributeError):
        return out
    out["malloc_heap_and_mmap"] = (mi.arena + mi.hblkhd) / 2**20
    out["malloc_in_use"] = (mi.uordblks + mi.hblkhd) / 2**20
    out["malloc_free"] = mi.fordblks / 2**20
    return out


def malloc_trim() -> bool:
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    libc.malloc_trim(0)
    return True


async def child(
    url: str, args: argparse.Namespace, variant: str, trace: bool, interpreter: float
) -> dict[str, Any]:
    rss: dict[str, float] = {"interpreter": interpreter}
    import copyreg
    from types import MappingProxyType

    import autoscaler.app
    from autoscaler.commands.run import tune_gc
    from autoscaler.control.clock import FakeClock
    from autoscaler.control.state import HISTORY_LEN, OBSERVATIONS_LEN
    from autoscaler.kube.config import api_client_for
    from autoscaler.logging import configure_logging
    from autoscaler.settings import GrpcSettings, HttpSettings, Settings

    gc.collect()
    rss["imports"] = rss_mb()
    heavy = sorted(
        {
            m.split(".")[0] if m.startswith("matplotlib") else m
            for m, module in sys.modules.items()
            if m.startswith(HEAVY_MODULES) and module is not None  # None: blocked
        }
    )
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_memory  # the recording (after the imports' RSS: not the controller's)

    copyreg.pickle(MappingProxyType, lambda m: (_proxy, (dict(m),)))
    configure_logging("json", "WARNING")
    # 1. one target's steady history through the real loop (fake time 1000..1700)
    recorded, planner = await bench_memory._record_target(700)
    gc.collect()
    if trace:
        tracemalloc.start(12)
    clock = FakeClock(1701.0)

    class Loop(autoscaler.app.ControlLoop):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, clock=clock, **kw)

    autoscaler.app.ControlLoop = Loop  # type: ignore[misc]
    settings = Settings(
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=1.0,
        leader_election=True,
        scrape_concurrency=64,
    )
    api = api_client_for(url)
    ctl = autoscaler.app.Controller(settings, api, identity=f"bench-{variant}")
    t0 = time.monotonic()
    cpu0 = time.process_time()
    await ctl.start()
    tune_gc()  # as `llm-autoscaler run` does once started
    assert ctl.loop is not None and ctl.cache is not None
    state = ctl.state
    phase_peak: dict[str, float] = {}
    source = ctl.loop.signals.source  # type: ignore[attr-defined]
    processes: dict[str, dict[str, Any]] = {}

    def mark(name: str) -> None:
        gc.collect()
        rss[name] = rss_mb()
        processes[name] = processes_mb()
        if trace:
            current, peak = tracemalloc.get_traced_memory()
            phase_peak[name] = peak / 2**20
            tracemalloc.reset_peak()

    mark("started")

    async def wait_ticks(n: int) -> None:
        deadline = time.monotonic() + 1800
        while state.ticks < n:
            if time.monotonic() > deadline:
                raise RuntimeError(f"tick {n} did not complete")
            await asyncio.sleep(0.05)

    await ctl.cache.wait_synced(600)
    while len(state.targets) < args.targets or not state.is_leader:  # noqa: ASYNC110
        await asyncio.sleep(0.1)  # polling the controller from outside, as a probe would
    mark("synced")
    first = state.ticks + 1
    # the first tick may have run before the pods were cached: tick until every target read
    # all its pods once
    while True:
        await clock.advance(args.step)
        await wait_ticks(first)
        first += 1
        ok = sum(
            1
            for st in state.targets.values()
            if st.last_decision is not None and st.observations[-1].pods_read == PODS
        )
        if ok == args.targets:
            break
    mark("first_tick")

    # 2. steady histories and planners for every target
    loop = ctl.loop
    for ref, st in state.targets.items():
        for obs, _ in recorded[-OBSERVATIONS_LEN:]:
            st.observations.append(obs)
        for _, decision in recorded[-HISTORY_LEN:]:
            st.history.append(bench_memory.clone(decision))
        loop._planners[ref] = _planner_copy(planner, st.spec)
    del recorded, planner
    mark("histories")

    # 3. real ticks: windows full, newest history entries the loop's own; the
    # controller's own /metrics read as a Prometheus server scraping it every 15 s would
    import aiohttp  # the kube client's: imported by the controller already

    metrics_bytes: list[int] = []
    scrape_every = max(1, round(METRICS_SCRAPE_S / args.step))
    assert ctl.http is not None
    async with aiohttp.ClientSession() as http:
        for i in range(args.ticks):
            await clock.advance(args.step)
            await wait_ticks(first)
            first += 1
            if i % scrape_every == 0:
                async with http.get(ctl.http.url + "/metrics") as resp:
                    resp.raise_for_status()
                    metrics_bytes.append(len(await resp.read()))
    wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
    mark("steady")
    out: dict[str, Any] = {
        "variant": variant,
        "rss_mb": rss,
        "processes_mb": processes,
        "heavy_modules": heavy,
    }
    if trace:
        out["traced_peak_mb"] = phase_peak
    histories = getattr(source, "_histories", {})
    rows = [len(h.rows) for hs in histories.values() for h in hs.values()]
    out["counts"] = {
        "targets": len(state.targets),
        "metrics_scrapes": len(metrics_bytes),
        "metrics_page_bytes": max(metrics_bytes),
        "pods_cached": len(ctl.cache.pods.items),
        "deployments_cached": len(ctl.cache.deployments.items),
        "windows": len(rows),
        "window_rows_per_pod": sum(rows) / len(rows) if rows else None,
        "observations_per_target": min(len(st.observations) for st in state.targets.values()),
        "decisions_per_target": min(len(st.history) for st in state.targets.values()),
        "planners": len(loop._planners),
        "ticks": state.ticks,
        "fake_time_s": clock.now(),
        "wall_s": round(wall, 1),
        "cpu_s": round(cpu, 1),
    }
    if trace:
        snap = tracemalloc.take_snapshot()
        overhead = tracemalloc.get_tracemalloc_memory()
        tracemalloc.stop()
        classify = Classifier()
        by: dict[str, int] = {}
        other: dict[str, int] = {}
        for stat in snap.statistics("traceback"):
            c = classify(stat.traceback)
            by[c] = by.get(c, 0) + stat.size
            if c.startswith("other"):
                f = stat.traceback[-1]
                key = f"{f.filename}:{f.lineno}"
                other[key] = other.get(key, 0) + stat.size
        out["traced_mb"] = {k: v / 2**20 for k, v in sorted(by.items(), key=lambda kv: -kv[1])}
        out["traced_other_top"] = {
            k: v / 2**20 for k, v in sorted(other.items(), key=lambda kv: -kv[1])[:15]
        }
        out["tracemalloc_overhead_mb"] = overhead / 2**20
    else:
        out["allocator_mb"] = allocator_stats()
        out["trimmed"] = malloc_trim()
        rss["after_malloc_trim"] = rss_mb()  # the controller's trim
        processes["after_malloc_trim"] = processes_mb()
        out["allocator_after_trim_mb"] = allocator_stats()
        out["components_mb"] = components(ctl, source)  # after: the walk allocates
        out["everything_else_by_type_mb"] = dict(REST_BY_TYPE)
        if args.census:
            out["census"] = census()
    await ctl.stop()
    await api.close()
    return out


def child_main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("variant")
    parser.add_argument("--targets", type=int, required=True)
    parser.add_argument("--ticks", type=int, required=True)
    parser.add_argument("--step", type=float, required=True)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--census", action="store_true")
    parser.add_argument("--block", default="", help="comma-separated modules to block")
    args = parser.parse_args(argv)
    image_modules.block(filter(None, args.block.split(",")))  # not in the image: absent
    interpreter = rss_mb()
    from autoscaler.commands.run import run_loop

    # the event loop `llm-autoscaler run` uses (uvloop when installed)
    result = run_loop(child(args.url, args, args.variant, args.trace, interpreter))
    print(json.dumps(result), flush=True)


# -------------------------------------------------------------------------------- main
def table(rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(str(c) for c in rows[0]) + " |"]
    lines.append("|" + "---|" * len(rows[0]))
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows[1:]]
    return "\n".join(lines)


def run_child(
    url: str, variant: str, args: argparse.Namespace, trace: bool, baseline: Path | None = None
) -> dict[str, Any]:
    """One measured interpreter. ``variant`` is ``now`` or a ``--baseline``
    revision, optionally followed by ``+NAME=VALUE`` environment settings of that child
    (``now+PYTHONMALLOC=malloc``)."""
    name, *settings = variant.split("+")
    env = dict(os.environ)
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise SystemExit(f"variant {variant!r}: {setting!r} is not NAME=VALUE")
        env[key] = value
    if baseline is not None:  # that revision's package first on the path
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(baseline), env.get("PYTHONPATH", "")) if p
        )
        name = "now"  # the revision's own code, nothing swapped in
    cmd = [
        sys.executable,
        __file__,
        "--child",
        url,
        name,
        "--block",
        ",".join(args.dev_only),
        "--targets",
        str(args.targets),
        "--ticks",
        str(args.ticks),
        "--step",
        str(args.step),
    ]
    if trace:
        cmd.append("--trace")
    if args.census:
        cmd.append("--census")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(baseline or ROOT))
    if proc.returncode != 0:
        raise RuntimeError(f"child {variant} failed:\n{proc.stderr[-4000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child_main(sys.argv[2:])
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--group-rss":
        _group_resident_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", type=int, default=1000)
    parser.add_argument("--ticks", type=int, default=32)
    parser.add_argument("--step", type=float, default=2.0)
    parser.add_argument("--variants", nargs="+", default=["now"])
    parser.add_argument(
        "--baseline",
        nargs="*",
        default=[],
        help="git revisions measured first, each as its own variant (its autoscaler "
        "package extracted with git archive, first on the child's PYTHONPATH)",
    )
    parser.add_argument("--trace", action="store_true", help="also a tracemalloc run per variant")
    parser.add_argument(
        "--census", action="store_true", help="live objects by type at steady state (MB, count)"
    )
    parser.add_argument("--output", default="", help="results file (default: results/rss.json)")
    parser.add_argument(
        "--with-dev-packages",
        action="store_true",
        help="let the children import the dev extras the venv has (the image has none of "
        "them; by default they are blocked: benchmarks/image_modules.py)",
    )
    args = parser.parse_args()
    args.dev_only = [] if args.with_dev_packages else image_modules.dev_only_modules()
    fleet.raise_fd_limit()
    command = fleet.command_line("bench_rss.py")
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        # every page a tick reads a fresh one (counters growing, never wrapping)
        pages = 2 * args.ticks + 120
        with fleet.cluster("local", args.targets, PODS, pages) as cluster:
            url = cluster.url
            variants: list[tuple[str, Path | None]] = [(v, None) for v in args.variants]
            if args.baseline:
                from revisions import extract, short_rev

                # REV[+NAME=VALUE ...]: that revision, with environment settings as a variant
                trees: dict[str, Path] = {}
                base: list[tuple[str, Path | None]] = []
                for spec in args.baseline:
                    rev, *env = spec.split("+")
                    short = short_rev(rev)
                    if short not in trees:
                        trees[short] = extract(short, Path(tmp) / short)
                    base.append(("+".join([short, *env]), trees[short]))
                variants[:0] = base
            for variant, baseline in variants:
                results[variant] = run_child(url, variant, args, trace=False, baseline=baseline)
                print(f"{variant}: {json.dumps(results[variant])}", file=sys.stderr, flush=True)
                if args.trace:
                    traced = run_child(url, variant, args, trace=True, baseline=baseline)
                    results[variant]["traced"] = traced
                    print(f"{variant} traced: {json.dumps(traced)}", file=sys.stderr, flush=True)
    names = list(results)
    phases = [
        ("interpreter", "interpreter"),
        ("imports", "+ imports (autoscaler.app)"),
        ("started", "+ controller started (targets listed, servers up)"),
        ("synced", "+ informers synced (8 x N pods, N Deployments), leader"),
        ("first_tick", "+ every target's pods read once"),
        ("histories", "+ 600 observations, 500 decisions, steady planner per target"),
        ("steady", f"+ {args.ticks} ticks {args.step:g} s apart (windows full): **steady**"),
        ("after_malloc_trim", "after malloc_trim(0)"),
    ]
    rows: list[list[object]] = [["RSS (MB)", *names]]
    for key, label in phases:
        rows.append([label, *(f"{results[n]['rss_mb'].get(key, float('nan')):.1f}" for n in names)])
    print(table(rows))
    # controller + scrape workers, each process's RSS and PSS
    proc_keys: list[str] = []
    for n in names:
        for k in results[n]["processes_mb"]["steady"]:
            if not k.startswith("sum_") and k != "group_rss" and k not in proc_keys:
                proc_keys.append(k)
    prows: list[list[object]] = [["processes at steady state, MB: RSS (PSS)", *names]]

    def cell(row: dict[str, Any] | None, rss_key: str, pss_key: str) -> str:
        if row is None or rss_key not in row:
            return "-"
        pss = row.get(pss_key)
        return f"{row[rss_key]:.1f}" + (f" ({pss:.1f})" if pss is not None else "")

    for k in proc_keys:
        prows.append(
            [k, *(cell(results[n]["processes_mb"]["steady"].get(k), "rss", "pss") for n in names)]
        )
    for phase, label in (
        ("steady", "**sum**"),
        ("after_malloc_trim", "sum after the controller's malloc_trim(0)"),
    ):
        prows.append(
            [
                label,
                *(cell(results[n]["processes_mb"].get(phase), "sum_rss", "sum_pss") for n in names),
            ]
        )
    for phase, label in (
        ("steady", "**group RSS** (each shared page once)"),
        ("after_malloc_trim", "group RSS after the controller's malloc_trim(0)"),
    ):
        prows.append(
            [
                label,
                *(
                    f"{g:.1f}"
                    if (g := results[n]["processes_mb"].get(phase, {}).get("group_rss")) is not None
                    else "-"
                    for n in names
                ),
            ]
        )
    print()
    print(table(prows))
    alloc_keys: list[str] = []
    for n in names:
        for k in results[n].get("allocator_mb", {}):
            if k not in alloc_keys:
                alloc_keys.append(k)
    if alloc_keys:
        nan = float("nan")
        arows: list[list[object]] = [["allocators at steady state (MB; after trim)", *names]]
        for k in alloc_keys:
            arows.append(
                [
                    k,
                    *(
                        f"{results[n].get('allocator_mb', {}).get(k, nan):.1f}"
                        f" ({results[n].get('allocator_after_trim_mb', {}).get(k, nan):.1f})"
                        for n in names
                    ),
                ]
            )
        print()
        print(table(arows))
    comp_names: list[str] = []
    for n in names:
        for c in results[n].get("components_mb", {}):
            if c not in comp_names:
                comp_names.append(c)
    if comp_names:
        crows: list[list[object]] = [["reachable objects at steady state (MB)", *names]]
        for c in comp_names:
            crows.append([c, *(f"{results[n]['components_mb'].get(c, 0.0):.1f}" for n in names)])
        sums = []
        for n in names:
            objects = sum(results[n]["components_mb"].values())
            rest = results[n]["rss_mb"]["steady"] - results[n]["rss_mb"]["imports"] - objects
            sums.append(f"{objects:.1f} ({rest:.1f})")
        crows.append(
            ["**sum** (in brackets: steady RSS - imports - sum, i.e. free pools, C memory)", *sums]
        )
        print()
        print(table(crows))
    if args.trace:
        comps: list[str] = []
        for n in names:
            for c in results[n]["traced"]["traced_mb"]:
                if c not in comps:
                    comps.append(c)
        trows: list[list[object]] = [["traced (MB, tracemalloc)", *names]]
        for c in comps:
            trows.append(
                [c, *(f"{results[n]['traced']['traced_mb'].get(c, 0.0):.1f}" for n in names)]
            )
        trows.append(
            [
                "**sum traced**",
                *(f"{sum(results[n]['traced']['traced_mb'].values()):.1f}" for n in names),
            ]
        )
        print()
        print(table(trows))
    for n in names:
        print(
            f"\n{n}: counts {json.dumps(results[n]['counts'])}; heavy modules imported: "
            f"{results[n]['heavy_modules'] or 'none'}"
        )
    # one entry per fleet size, merged with the sizes already there
    out_path = Path(args.output) if args.output else RESULTS
    doc = json.loads(out_path.read_text()) if out_path.exists() else {}
    runs = doc.get("runs", {}) if doc.get("benchmark") == "rss" else {}
    runs[str(args.targets)] = {
        "command": command,
        "trace": args.trace,
        "blocked_dev_only_modules": args.dev_only,
        "results": results,
    }
    doc = {"benchmark": "rss", "runs": dict(sorted(runs.items(), key=lambda kv: int(kv[0])))}
    out_path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"\nwrote {out_path}")


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        main()
