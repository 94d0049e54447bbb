"""Another revision's code beside the working tree's, for side-by-side benchmark rows.

A ``--baseline REV`` row runs ``git archive REV autoscaler`` unpacked in a temporary
directory, put first on the worker process's PYTHONPATH: the same benchmark code, that
revision's package. Shared by bench_parser, bench_planner_memory, bench_scale,
bench_scrape and bench_tick.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def extract(rev: str, into: Path) -> Path:
    """The ``autoscaler`` package as of ``rev``, unpacked under ``into``."""
    blob = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "autoscaler"], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        tar.extractall(into, filter="data")
    return into


def short_rev(rev: str) -> str:
    """``rev`` as its abbreviated commit hash (for result files and table headers)."""
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", rev],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
