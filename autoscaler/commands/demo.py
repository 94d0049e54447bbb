"""`llm-autoscaler demo`: the embedded demo (see `autoscaler.demo.app`)."""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

from autoscaler.demo.app import DemoOptions, PortInUse, run_demo
from autoscaler.demo.compare import phase_line
from autoscaler.errors import AutoscalerError

DESCRIPTION = """\
Runs, on 127.0.0.1 only and with no cluster or GPU: a local Kubernetes API with emulated
vLLM pods and GPU nodes, this controller (REST API, dashboard, KEDA gRPC scaler), and one
load at two fleets side by side with the same replica limits (1..16): a ramp of long
prompts that fills the KV cache, then a burst of the Azure code trace on top. One fleet
is scaled by this controller (with a warm pool of pause pods), one by the seeds'
KEDA+HPA policy. A second model sits at zero behind the activator: its first request is
held through the cold start and answered; idle, its replicas sleep, a burst wakes them in
seconds, and it goes back to zero. A third model runs on two variants (MIG slices and a
full H100): the slices grow first, the H100 once they run out, and it shrinks first.
The terminal shows a live table and a summary; logs go to --log-file."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    d = DemoOptions()
    p = sub.add_parser(
        "demo",
        help="run the embedded demo (no cluster, no GPU)",
        description=DESCRIPTION,
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--http-port",
        type=int,
        default=d.http_port,
        help="REST API and dashboard port (0: any free)",
    )
    p.add_argument(
        "--grpc-port",
        type=int,
        default=d.grpc_port,
        help="KEDA external-scaler gRPC port (0: any free)",
    )
    p.add_argument(
        "--duration",
        type=float,
        default=d.duration_s,
        help="real seconds, first cold start included",
    )
    p.add_argument("--speed", type=float, default=d.speed, help="emulated seconds per real second")
    p.add_argument(
        "--headless",
        action="store_true",
        help="one plain line per second instead of the live table",
    )
    p.add_argument(
        "--load", type=float, default=d.load_factor, help="rate multiplier of the burst (step)"
    )
    p.add_argument(
        "--cold-start",
        type=float,
        default=d.cold_start_s,
        help="emulated seconds from a pod's start on a warm GPU to Ready",
    )
    p.add_argument(
        "--node-provision",
        type=float,
        default=d.node_provision_s,
        help="emulated seconds to add a GPU node",
    )
    p.add_argument(
        "--trace",
        type=Path,
        default=None,
        help="Azure CSV trace (default: the bundled burst of the code trace)",
    )
    p.add_argument(
        "--summary", type=Path, default=d.summary_path, help="where the JSON summary is written"
    )
    p.add_argument(
        "--log-file",
        type=Path,
        default=Path("out/demo.log"),
        help="where the controller's logs go (JSON lines)",
    )
    p.add_argument(
        "--api-token",
        default=None,
        help="bearer token for REST writes "
        "(default: AUTOSCALER_API_TOKEN, else generated and printed)",
    )
    p.set_defaults(func=run)


LOG_ROTATE_BYTES = 10 * 1024 * 1024


def _log_to_file(path: Path, level: str | None) -> Any:
    """Every log line (controller decisions, library warnings) to ``path``, none on the
    terminal: the terminal is the live table's. Appended, so a restart keeps the last
    run's lines; past `LOG_ROTATE_BYTES` the file moves to ``<path>.1`` first."""
    from autoscaler.logging import configure_logging

    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.stat().st_size > LOG_ROTATE_BYTES:
        path.replace(path.with_name(path.name + ".1"))
    fh = path.open("a", encoding="utf-8")
    configure_logging(fmt="json", level=level, stream=fh)
    return fh


def _summary_line(s: dict[str, Any], path: Path, log_file: Path) -> str:
    lines = [f"summary: {s['headline']}"] if s.get("headline") else []
    for phase in ("ramp", "step"):
        line = phase_line(s["fleets"], phase)
        if line is not None:
            what = s.get("load_phases", {}).get(phase, {}).get("what", "")
            lines.append(f"  {line} ({what})")
    lines.append(
        f"{s['decisions']} decisions, {s['scale_ups']} scale-ups, "
        f"{s['scale_downs']} scale-downs, max {s['max_replicas']} replicas "
        "(times below are emulated seconds)"
    )
    for key, f in s["fleets"].items():
        load = f.get("load") or {}
        lines.append(
            f"  {key:5s} {f['title']:30s} TTFT p50 {f['ttft_p50_s']} s, p95 {f['ttft_p95_s']} s; "
            f"{f['gpu_seconds'] / 3600:.2f} GPU-hours, max {f['max_gpus']} GPUs; "
            f"load: {load.get('ok', 0)} ok, {load.get('failed', 0)} failed, "
            f"{load.get('cancelled', 0)} cut at the end, {load.get('not_sent', 0)} not sent"
        )
    z = s.get("zero") or {}
    if z.get("answered_at_s") is not None:
        back = z.get("back_to_zero_at_s")
        lines.append(
            f"  zero  {z['model']}: request held at t={z['sent_at_s']:.0f} s, "
            f"answered at t={z['answered_at_s']:.0f} s (held {z['held_s']} s); "
            + (f"back to 0 replicas at t={back:.0f} s" if back is not None else "not yet at 0")
        )
        if z.get("burst_sent_at_s") is not None:
            lines.append(
                f"        burst of {z.get('burst')} at t={z['burst_sent_at_s']:.0f} s: "
                f"{z.get('woken', 0)} sleepers woken in {z.get('woken_in_s')} s, "
                f"{z.get('burst_answered', 0)} answered, held p50 {z.get('burst_held_p50_s')} s"
                f" / max {z.get('burst_held_max_s')} s"
            )
    elif z:
        lines.append(f"  zero  {z['model']}: not answered in the run ({z.get('error')})")
    v = s.get("variants") or {}
    if v.get("line"):
        lines.append(f"  {v['line']}")
    lines.append(f"written to {path}; logs in {log_file}")
    return "\n".join(lines)


def _process_age_s() -> float:
    """Seconds since this process started (Linux /proc; 0 elsewhere), so --duration
    includes the interpreter's start-up and imports."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        uptime_s = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime_s - int(fields[19]) / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return 0.0


def run(args: argparse.Namespace) -> int:
    started = time.monotonic() - _process_age_s()  # --duration counts from process start
    if args.duration <= 0 or args.speed <= 0 or args.load <= 0:
        print("error: --duration, --speed and --load must be > 0", file=sys.stderr)
        return 2
    opts = DemoOptions(
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        duration_s=args.duration,
        speed=args.speed,
        headless=args.headless,
        load_factor=args.load,
        cold_start_s=args.cold_start,
        node_provision_s=args.node_provision,
        trace=args.trace,
        summary_path=args.summary,
        api_token=args.api_token,
    )
    log = _log_to_file(args.log_file, getattr(args, "log_level", None))
    try:
        result = asyncio.run(run_demo(opts, sys.stdout, started=started))
    except PortInUse as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except AutoscalerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    finally:
        log.flush()
    print(_summary_line(result.summary, opts.summary_path, args.log_file), flush=True)
    return 0
