"""`llm-autoscaler run`: the controller against the current cluster (in-cluster config or
kubeconfig, ``KUBECONFIG`` honoured), configured by ``AUTOSCALER_*`` settings."""

from __future__ import annotations

import argparse
import asyncio
import gc
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from autoscaler.errors import AutoscalerError
from autoscaler.settings import Settings

_T = TypeVar("_T")
EVENT_LOOPS: Final = ("auto", "uvloop", "asyncio")
# The cyclic GC once the controller has started (CPython's default young threshold is 700:
# ~16 collections a second mid-tick, promoting each tick's short-lived objects, ~17% of
# the CPU at 100 targets).
GC_THRESHOLDS: Final = (50_000, 20, 20)

DESCRIPTION = """\
Runs the controller against the cluster in your kubeconfig (or in-cluster config): it
watches LLMAutoscaler resources, scrapes the vLLM pods (or queries Prometheus), decides,
and in direct mode patches the Deployments' scale subresource; it serves the REST API and
dashboard (--http-port) and the KEDA external scaler (--grpc-port). Every other setting
comes from AUTOSCALER_* environment variables (see docs/install.md)."""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the controller against a cluster", description=DESCRIPTION)
    p.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: KUBECONFIG)")
    p.add_argument("--context", default=None, help="kubeconfig context (default: current)")
    p.add_argument(
        "--mode",
        choices=["direct", "keda", "advisory"],
        default=None,
        help="direct: patch the scale subresource; keda: serve KEDA, never write; "
        "advisory: decide and publish only (default: AUTOSCALER_MODE, else direct)",
    )
    p.add_argument("--namespace", default=None, help="watch one namespace (default: all)")
    p.add_argument(
        "--lease-namespace",
        default=None,
        help="namespace of the leader-election Lease (default: POD_NAMESPACE, then "
        "--namespace, then default); from a workstation use the controller's namespace "
        "(llm-autoscaler), where the shipped Role grants Leases",
    )
    p.add_argument(
        "--shards",
        type=int,
        default=None,
        help="split the targets over this many shard Leases held by whichever replicas "
        "are alive (1: one leader Lease, as before; e.g. 64 for several replicas; "
        "default: AUTOSCALER_SHARDS, else 1); every replica must use the same number",
    )
    p.add_argument(
        "--shard-scope",
        choices=["all", "held"],
        default=None,
        help="with --shards > 1: all = every replica scrapes and decides every target "
        "(KEDA and the REST API answer on any replica), each writes only its shards; "
        "held = each replica scrapes and decides only its shards' targets, so the CPU "
        "splits too (direct mode only; default: AUTOSCALER_SHARD_SCOPE, else all)",
    )
    p.add_argument(
        "--scrape-workers",
        type=int,
        default=None,
        help=argparse.SUPPRESS,  # removed (one process holds its envelope): ignored
    )
    p.add_argument(
        "--tick-phases",
        type=int,
        default=None,
        help="spread the targets over this many phases of each tick interval, so a "
        "fleet's scrapes and decisions do not all land at once (1: every due target at "
        "the start of each tick; pod scraping only, 1 with Prometheus; default: "
        "AUTOSCALER_TICK_PHASES, else 10)",
    )
    p.add_argument(
        "--http-port",
        type=int,
        default=None,
        help="REST API, dashboard and /metrics port (default: AUTOSCALER_HTTP__PORT, else 8080)",
    )
    p.add_argument(
        "--grpc-port",
        type=int,
        default=None,
        help="KEDA external-scaler gRPC port (default: AUTOSCALER_GRPC__PORT, else 9090)",
    )
    p.add_argument(
        "--event-loop",
        choices=EVENT_LOOPS,
        default="auto",
        help="auto: uvloop when installed, else asyncio's own loop (default: auto)",
    )
    p.set_defaults(func=run)


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop to run the controller on: uvloop (libuv; the scrape path's
    transports and callbacks cost less CPU, benchmarks/bench_scrape.py) when installed
    and not ``asyncio``; None means asyncio's default loop."""
    if choice not in EVENT_LOOPS:
        raise AutoscalerError(f"event loop {choice!r}: must be one of {', '.join(EVENT_LOOPS)}")
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if choice == "uvloop":
            raise AutoscalerError(
                "--event-loop uvloop: the uvloop package is not installed"
            ) from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def run_loop(main: Coroutine[Any, Any, _T], choice: str = "auto") -> _T:
    """``asyncio.run(main)`` on the chosen event loop."""
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(main)


def tune_gc() -> None:
    """Once the controller has started: collect once, move every object alive now
    (modules, settings, clients) out of the collector's sight (`gc.freeze`: they are
    never walked again) and raise the young threshold to GC_THRESHOLDS."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def _main(args: argparse.Namespace) -> int:
    from autoscaler.app import Controller
    from autoscaler.kube.config import load_api_client

    overrides: dict[str, object] = {}
    if args.mode:
        overrides["mode"] = args.mode
    if args.namespace:
        overrides["namespace"] = args.namespace
    if args.lease_namespace:
        overrides["lease_namespace"] = args.lease_namespace
    if args.shards is not None:
        overrides["shards"] = args.shards
    if args.shard_scope is not None:
        overrides["shard_scope"] = args.shard_scope
    if args.scrape_workers is not None:
        print(
            "warning: --scrape-workers is deprecated and ignored: pods are scraped in the "
            "controller process (past one process's envelope, run replicas with --shards)",
            file=sys.stderr,
        )
    if args.tick_phases is not None:
        overrides["tick_phases"] = args.tick_phases
    settings = Settings.load(**overrides)  # every bad value: field, value and rule
    if args.http_port is not None:
        settings.http.port = args.http_port
    if args.grpc_port is not None:
        settings.grpc.port = args.grpc_port
    from autoscaler.api.server import check_port_free

    check_port_free(settings.http.host, settings.http.port, "--http-port")
    check_port_free(settings.grpc.host, settings.grpc.port, "--grpc-port")
    api = await load_api_client(args.kubeconfig, args.context)
    controller = Controller(settings, api)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await controller.start()
        tune_gc()
        await stop.wait()
    finally:
        await controller.stop()
        await api.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from autoscaler.api.server import PortInUse

    try:
        return run_loop(_main(args), args.event_loop)
    except PortInUse as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except AutoscalerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
