"""`llm-autoscaler activator`: the OpenAI-compatible front that holds requests while a
model is at zero and pokes the controller (docs/activator.md)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "activator",
        help="run the activator (holds requests while a model is at zero)",
        description="Serves an OpenAI-compatible API for the models in --config, routes by "
        "the body's 'model' (or Host / path prefix), holds requests while a model has no "
        "Ready replica and pushes the held counts to the controller.",
    )
    p.add_argument("--config", required=True, help="targets file (YAML or JSON)")
    p.add_argument("--host", default="0.0.0.0", help="listen address (default 0.0.0.0)")
    p.add_argument("--port", type=int, default=8000, help="listen port (default 8000)")
    p.add_argument("--kubeconfig", default=None, help="kubeconfig (targets with 'service')")
    p.add_argument("--context", default=None, help="kubeconfig context")
    p.add_argument(
        "--grace-s",
        type=float,
        default=30.0,
        help="on SIGTERM, how long in-flight responses may finish (default 30)",
    )
    p.set_defaults(func=run)


async def _main(args: argparse.Namespace) -> int:
    from autoscaler.activator.config import load_config
    from autoscaler.activator.runtime import ActivatorProcess

    config = load_config(args.config)
    api = None
    if any(t.service is not None for t in config.targets):
        from autoscaler.kube.config import load_api_client

        api = await load_api_client(args.kubeconfig, args.context)
    proc = ActivatorProcess(
        config, host=args.host, port=args.port, kube_api=api, grace_s=args.grace_s
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        await proc.start()
        await stop.wait()
    finally:
        await proc.stop()
        if api is not None:
            await api.close()
    return 0


def run(args: argparse.Namespace) -> int:
    from autoscaler.errors import AutoscalerError

    try:
        return asyncio.run(_main(args))
    except AutoscalerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
