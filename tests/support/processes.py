"""Process checks for tests that start real child processes."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """The process exists (a zombie counts: not reaped is a leak too)."""
    return Path(f"/proc/{pid}").exists()
