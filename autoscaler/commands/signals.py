"""`llm-autoscaler signals [--engine auto|vllm|sglang|tgi|trtllm] FILE...`: read saved pages.

Prints one JSON line per file with the engine's instantaneous values and cumulative
histogram/counter totals (a single page has no rates). An absent metric is ``null``,
never 0. A file that is not valid exposition text gets ``{"file", "error", "line"}`` and
the exit code is 1, and so does a page the controller would leave unread: larger than
the scraper's page limit (read no further, so ``/dev/zero`` ends) or holding a value out of
range (``+Inf``, NaN, a negative count; the output is strict JSON). Pages are parsed in
strict mode (every line validated).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from autoscaler.errors import ParseError
from autoscaler.metrics.engines import ENGINES, EngineSnapshot, read_snapshot
from autoscaler.metrics.pod_scrape import ScrapeConfig
from autoscaler.metrics.signals import snapshot_violation

MAX_PAGE_BYTES = ScrapeConfig().max_page_bytes  # what the scraper accepts from a pod


class _Refused(Exception):
    """A page the controller would not read (too large, a value out of range)."""


def _read_page(path: str) -> str:
    with Path(path).open("rb") as f:
        data = f.read(MAX_PAGE_BYTES + 1)
    if len(data) > MAX_PAGE_BYTES:
        raise _Refused(f"page larger than {MAX_PAGE_BYTES} bytes (the scraper's limit)")
    return data.decode("utf-8", errors="strict")


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
            snap = read_snapshot(_read_page(path), args.engine, strict=True, details=True)
            violation = snapshot_violation(snap)
            if violation is not None:
                raise _Refused(f"rejected {violation}")
            line: dict[str, Any] = summary(path, snap)
        except _Refused as exc:
            line = {"file": path, "error": str(exc), "line": None}
            status = 1
        except ParseError as exc:
            line = {"file": path, "error": str(exc), "line": exc.line}
            status = 1
        except (OSError, UnicodeDecodeError) as exc:
            line = {"file": path, "error": f"{type(exc).__name__}: {exc}", "line": None}
            status = 1
        sys.stdout.write(json.dumps(line, allow_nan=False) + "\n")
    return status
