"""Import only what the controller image installs, in a development virtualenv.

The image installs deploy/requirements.lock and nothing else; a development venv also has
the dev extras, and some runtime packages import them when they are there:
kubernetes_asyncio's dynamic client imports kubernetes_validate (and through it
jsonschema, referencing, rpds: ~5.6 MB of RSS), grpc imports grpc_tools. Each such import
is optional (guarded by ``except ImportError``), so in the image they are simply absent.
A memory benchmark of the controller measures the image's process: `block_dev_only`
makes those top-level packages unimportable (``None`` in ``sys.modules``, what the
import system reads as "not installed") before anything imports them.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

LOCK = Path(__file__).parents[1] / "deploy" / "requirements.lock"
PROJECT = "llm-autoscaler"


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def image_distributions(lock: Path = LOCK) -> set[str]:
    """The distributions the image installs (normalised names), from the lock."""
    out: set[str] = set()
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            out.add(_norm(line.split("==", 1)[0].split("[", 1)[0]))
    if not out:
        raise ValueError(f"{lock}: no 'name==version' line: not a requirements lock")
    return out


def dev_only_modules(lock: Path = LOCK) -> list[str]:
    """Top-level modules installed here whose every distribution is missing from the
    image (the project itself excepted)."""
    import importlib.metadata  # here: the measured child imports this module too

    image = image_distributions(lock) | {PROJECT}
    out = []
    for top, dists in importlib.metadata.packages_distributions().items():
        if not any(_norm(d) in image for d in dists):
            out.append(top)
    return sorted(out)


def block_dev_only(lock: Path = LOCK) -> tuple[list[str], list[str]]:
    """Make every dev-only top-level module not yet imported unimportable in this
    process. Returns (blocked, already imported): the second are the ones the venv's
    ``.pth`` files load at start-up (setuptools' ``_distutils_hack``), a few KB."""
    blocked, loaded = [], []
    for m in dev_only_modules(lock):
        if sys.modules.get(m) is not None:
            loaded.append(m)
        else:
            sys.modules[m] = None  # type: ignore[assignment]  # ImportError on import
            blocked.append(m)
    return blocked, loaded
