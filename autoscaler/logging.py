"""Structured logs through structlog: JSON by default, console renderer on a TTY."""

from __future__ import annotations

import logging
import sys
from typing import Literal, TextIO


def _import_structlog_without_rich() -> None:
    """structlog.dev imports rich and through it pygments (~3 MB of RSS in every
    controller process, issue 16) when rich is installed, only for its pretty tracebacks,
    which this configuration never asks for: ``format_exc_info`` renders an exception to
    text before either renderer sees it. rich stays importable afterwards (the demo and
    the simulator's report use it)."""
    if "structlog" in sys.modules:
        return
    block = "rich" not in sys.modules
    if block:
        sys.modules["rich"] = None  # type: ignore[assignment]  # ImportError inside structlog
    try:
        import structlog  # noqa: F401
    finally:
        if block and sys.modules.get("rich", False) is None:
            del sys.modules["rich"]


_import_structlog_without_rich()

import structlog  # noqa: E402

LogFormat = Literal["auto", "json", "console"]


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at call time, so a logger configured once
    survives stderr being swapped (test capture, daemonisation) instead of writing to a
    closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(
    fmt: str | None = None, level: str | None = None, stream: TextIO | None = None
) -> None:
    """Configure structlog and the stdlib root logger once, to stderr (or ``stream``:
    the demo sends its logs to a file so the terminal shows only its table)."""
    from autoscaler.errors import ConfigError
    from autoscaler.settings import Settings

    try:
        settings = Settings.load()
    except ConfigError:  # the command reports it (field, value, rule); log with defaults
        settings = Settings.model_construct()
    chosen = fmt or settings.log_format
    lvl = (level or settings.log_level).upper()
    if chosen == "auto":
        chosen = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.typing.Processor = (
        structlog.dev.ConsoleRenderer(colors=False)
        if chosen == "console"
        else structlog.processors.JSONRenderer()
    )
    logging.basicConfig(stream=stream or sys.stderr, level=lvl, format="%(message)s", force=True)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(lvl)),
        logger_factory=structlog.PrintLoggerFactory(file=stream or _CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )


def get_logger(name: str) -> structlog.typing.FilteringBoundLogger:
    logger: structlog.typing.FilteringBoundLogger = structlog.get_logger(name)
    return logger
