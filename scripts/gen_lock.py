"""Write deploy/requirements.lock: the transitive closure of pyproject's runtime
dependencies (no extras), pinned at the versions installed in this venv.

The closure is computed from each distribution's metadata (Requires-Dist with markers
evaluated for this interpreter and no extra), not from ``pip freeze``: a dev venv holds
test tools and the ``sim`` extra, which must not reach the controller image.

    .venv/bin/python scripts/gen_lock.py          # rewrite the lock
    .venv/bin/python scripts/gen_lock.py --check  # exit 1 if the lock differs
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "deploy" / "requirements.lock"
HEADER = """\
# Pinned runtime dependencies of the container image (Dockerfile): the transitive closure
# of pyproject.toml's [project] dependencies (no extras: matplotlib & co. are the `sim`
# extra), computed from package metadata by scripts/gen_lock.py (Python 3.11, linux
# x86_64). Regenerate after changing dependencies; tests/deploy checks that every runtime
# dependency is pinned here, satisfies pyproject's specifier, and that the lock is closed.
"""


def closure(roots: list[str]) -> dict[str, str]:
    """canonical name -> installed version, for ``roots`` and everything they require."""
    pins: dict[str, str] = {}
    todo = [Requirement(r) for r in roots]
    while todo:
        req = todo.pop()
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in pins:
            continue
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            sys.exit(f"{req.name} is required but not installed: run make install first")
        pins[name] = dist.version
        todo.extend(Requirement(r) for r in dist.requires or [])
    return pins


def render() -> str:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = closure(deps)
    return HEADER + "".join(f"{n}=={v}\n" for n, v in sorted(pins.items()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare instead of writing")
    text = render()
    if ap.parse_args().check:
        return 0 if LOCK.read_text() == text else 1
    LOCK.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
