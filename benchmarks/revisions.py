"""Another revision's code beside the working tree's, for side-by-side benchmark rows.

A ``--baseline REV`` row runs ``git archive REV autoscaler`` unpacked in a temporary
directory, put first on the worker process's PYTHONPATH: the same benchmark code, that
revision's package. Shared by bench_parser, bench_planner_memory, bench_scale,
bench_scrape, bench_tick and bench_prometheus_scale; `compared_table` is the
before/after table of bench_scale and bench_prometheus_scale.
"""

from __future__ import annotations

import io
import math
import statistics
import subprocess
import tarfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def extract(rev: str, into: Path) -> Path:
    """The ``autoscaler`` package as of ``rev``, unpacked under ``into``."""
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "autoscaler"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def git(*argv: str) -> str:
    """``git -C <repository> *argv``'s output, stripped."""
    return subprocess.run(
        ["git", "-C", str(ROOT), *argv], check=True, capture_output=True, text=True
    ).stdout.strip()


def short_rev(rev: str) -> str:
    """``rev`` as its abbreviated commit hash (for result files and table headers)."""
    return git("rev-parse", "--short", rev)


def tree_rev() -> str:
    """The working tree as ``git describe --always --dirty`` names it (the after side)."""
    return git("describe", "--always", "--dirty")


def compared_table(
    title: str,
    before: Sequence[dict[str, Any]],
    after: Sequence[dict[str, Any]],
    compared: Sequence[tuple[str, str]],
    rev: str,
    head: str,
) -> tuple[list[dict[str, float | str]], str]:
    """The median of each ``(label, key)`` over the ``before`` and ``after`` runs, as
    result rows and as a markdown table under ``title`` (shared by bench_scale and
    bench_prometheus_scale)."""
    rows: list[dict[str, float | str]] = []
    for label, key in compared:
        b = round(statistics.median(r[key] for r in before), 3)
        a = round(statistics.median(r[key] for r in after), 3)
        rows.append({"metric": label, "before": b, "after": a})
    part = f"{title}\n\n| metric | {rev} | {head} | after / before |\n|---|---|---|---|\n"
    part += "".join(
        f"| {r['metric']} | {r['before']} | {r['after']} | "
        f"{float(r['after']) / float(r['before']) if r['before'] else math.nan:.2f} |\n"
        for r in rows
    )
    return rows, part
