"""`llm-autoscaler run`: the controller against the current cluster (in-cluster config or
kubeconfig, ``KUBECONFIG`` honoured), configured by ``AUTOSCALER_*`` settings."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from autoscaler.errors import AutoscalerError
from autoscaler.settings import Settings


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("run", help="run the controller against a cluster")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig path (default: KUBECONFIG)")
    p.add_argument("--context", default=None, help="kubeconfig context")
    p.add_argument("--mode", choices=["direct", "keda", "advisory"], default=None)
    p.add_argument("--namespace", default=None, help="watch one namespace (default: all)")
    p.add_argument("--http-port", type=int, default=None)
    p.add_argument("--grpc-port", type=int, default=None)
    p.set_defaults(func=run)


async def _main(args: argparse.Namespace) -> int:
    from autoscaler.control.controller import Controller
    from autoscaler.kube.config import load_api_client

    overrides: dict[str, object] = {}
    if args.mode:
        overrides["mode"] = args.mode
    if args.namespace:
        overrides["namespace"] = args.namespace
    settings = Settings(**overrides)  # type: ignore[arg-type]
    if args.http_port is not None:
        settings.http.port = args.http_port
    if args.grpc_port is not None:
        settings.grpc.port = args.grpc_port
    api = await load_api_client(args.kubeconfig, args.context)
    controller = Controller(settings, api)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await controller.start()
        await stop.wait()
    finally:
        await controller.stop()
        await api.close()
    return 0


def run(args: argparse.Namespace) -> int:
    try:
        return asyncio.run(_main(args))
    except AutoscalerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
