"""`llm-autoscaler signals [--engine auto|vllm|sglang|tgi|trtllm] FILE...`: read saved pages.

Prints one JSON line per file with the engine's instantaneous values and cumulative
histogram/counter totals (a single page has no rates). An absent metric is ``null``,
never 0. A file that is not valid exposition text gets ``{"file", "error", "line"}`` and
the exit code is 1. Pages are parsed in strict mode (every line validated).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autoscaler.errors import ParseError
from autoscaler.metrics.engines import ENGINES, EngineSnapshot, read_snapshot


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "signals",
        help="print engine signals read from saved /metrics pages",
        description="Reads saved Prometheus /metrics pages of vLLM, SGLang, TGI or "
        "TensorRT-LLM into the canonical signals the controller decides on (absent = "
        "null, never 0).",
    )
    p.add_argument(
        "--engine",
        choices=["auto", *ENGINES],
        default="auto",
        help="engine whose metric names to read (default: auto, detected per page)",
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="saved /metrics pages")
    p.set_defaults(func=run)


def summary(path: str, snap: EngineSnapshot) -> dict[str, Any]:
    out: dict[str, Any] = {"file": path, "engine": snap.engine}
    for key in ("waiting", "running", "kv_cache_usage"):
        out[key] = snap.gauges.get(key)
    for key in ("requests", "prompt_tokens", "generation_tokens", "preemptions"):
        out[f"{key}_total"] = snap.counters.get(key)
    for key in ("ttft", "itl", "e2e", "queue"):
        h = snap.histograms.get(key)
        out[f"{key}_count"] = None if h is None else (h.count if h.count is not None else h.total)
        out[f"{key}_sum"] = None if h is None else h.sum
    return out


def run(args: argparse.Namespace) -> int:
    status = 0
    for path in args.files:
        try:
            text = Path(path).read_text(encoding="utf-8")
            line: dict[str, Any] = summary(
                path, read_snapshot(text, args.engine, strict=True, details=True)
            )
        except ParseError as exc:
            line = {"file": path, "error": str(exc), "line": exc.line}
            status = 1
        except (OSError, UnicodeDecodeError) as exc:
            line = {"file": path, "error": f"{type(exc).__name__}: {exc}", "line": None}
            status = 1
        sys.stdout.write(json.dumps(line) + "\n")
    return status
