"""Import only what the controller image installs, in a development virtualenv.

The image installs deploy/requirements.lock and nothing else; a development venv also has
the dev extras, and some runtime packages import them when they are there:
kubernetes_asyncio's dynamic client imports kubernetes_validate (and through it
jsonschema, referencing, rpds: ~5.6 MB of RSS), grpc imports grpc_tools. Each such import
is optional (guarded by ``except ImportError``), so in the image they are simply absent.
A memory benchmark of the controller measures the image's process: `block` makes those
top-level packages (`dev_only_modules`) unimportable (``None`` in ``sys.modules``, what
the import system reads as "not installed") before anything imports them.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from pathlib import Path

LOCK = Path(__file__).parents[1] / "deploy" / "requirements.lock"
PROJECT = "llm-autoscaler"


def image_distributions(lock: Path = LOCK) -> set[str]:
    """The distributions the image installs (canonical names, as scripts/gen_lock.py
    writes them), from the lock."""
    from packaging.utils import canonicalize_name  # dev-only: never in the measured child

    out: set[str] = set()
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            out.add(canonicalize_name(line.split("==", 1)[0].split("[", 1)[0]))
    if not out:
        raise ValueError(f"{lock}: no 'name==version' line: not a requirements lock")
    return out


def dev_only_modules(lock: Path = LOCK) -> list[str]:
    """Top-level modules installed here whose every distribution is missing from the
    image (the project itself excepted)."""
    import importlib.metadata  # here: the measured child imports this module too

    from packaging.utils import canonicalize_name

    image = image_distributions(lock) | {PROJECT}
    out = []
    for top, dists in importlib.metadata.packages_distributions().items():
        if not any(canonicalize_name(d) in image for d in dists):
            out.append(top)
    return sorted(out)


def block(modules: Iterable[str]) -> list[str]:
    """Make ``modules`` unimportable in this process, as if not installed; returns those
    already imported, which stay (the venv's ``.pth`` files load setuptools'
    ``_distutils_hack`` at start-up, a few KB)."""
    loaded = []
    for m in modules:
        if sys.modules.get(m) is not None:
            loaded.append(m)
        else:
            sys.modules[m] = None  # type: ignore[assignment]  # ImportError on import
    return loaded
