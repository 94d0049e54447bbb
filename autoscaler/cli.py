"""`llm-autoscaler` / `python -m autoscaler`: one subcommand per module in `commands/`.

Each command module exposes ``register(subparsers)``; adding a command is adding a module
and one name to ``COMMANDS``, so the CLI never grows into one long function.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS: tuple[str, ...] = (
    "activator",
    "decide",
    "demo",
    "run",
    "signals",
    "simulate",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="llm-autoscaler",
        description="Autoscaler controller for LLM inference servers on Kubernetes.",
    )
    from autoscaler import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument("--log-format", choices=["auto", "json", "console"], default=None)
    parser.add_argument("--log-level", default=None)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        module = importlib.import_module(f"autoscaler.commands.{name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from autoscaler.logging import configure_logging

    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(fmt=args.log_format, level=args.log_level)
    try:
        result: int = args.func(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head` and closed: not an error
        sys.stderr.close()
        return 0
    return result


if __name__ == "__main__":
    sys.exit(main())
