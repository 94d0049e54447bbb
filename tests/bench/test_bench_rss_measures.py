"""The memory benchmark's own measures: the group RSS (each physical page once) and the
image's module set. Behaviour only; the figures are measured by benchmarks/bench_rss.py."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from tests.bench.scripts import load_bench

# A parent that fills 64 MiB, forks a child that shares those pages (never writes them),
# prints both pids and waits: the group holds the buffer once, each RSS holds it whole.
SHARED = textwrap.dedent(
    """
    import os, sys, time
    buf = bytearray(os.urandom(64 * 2**20))
    pid = os.fork()
    if pid == 0:
        time.sleep(120)
        os._exit(0)
    print(os.getpid(), pid, flush=True)
    sys.stdin.read()
    os.kill(pid, 9)
    """
)


@pytest.fixture(scope="module")
def bench_rss() -> ModuleType:
    return load_bench("bench_rss")


@pytest.fixture(scope="module")
def image_modules() -> ModuleType:
    return load_bench("image_modules")


@pytest.fixture
def shared_pair() -> Iterator[tuple[int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SHARED], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdin is not None
    parent, child = map(int, proc.stdout.readline().split())
    try:
        yield parent, child
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_group_rss_counts_pages_shared_by_a_fork_once(
    bench_rss: ModuleType, shared_pair: tuple[int, int]
) -> None:
    parent, child = shared_pair
    group = bench_rss.group_resident_mb([parent, child])
    if os.geteuid() != 0:  # frame numbers hidden: no figure, never a partial one
        assert group is None
        return
    rss_parent, rss_child = (bench_rss.proc_mb(pid)["rss"] for pid in (parent, child))
    assert rss_parent > 64 and rss_child > 64  # each RSS holds the whole buffer
    assert group is not None
    assert group < rss_parent + 16  # ... the group holds it once
    assert group >= max(rss_parent, rss_child) - 1
    # one process: its RSS, the same pid twice: the same pages
    alone = bench_rss.group_resident_mb([parent])
    assert alone is not None and abs(alone - rss_parent) < 1
    assert bench_rss.group_resident_mb([parent, parent]) == pytest.approx(alone, abs=0.5)


def test_group_rss_of_a_gone_process_is_absent_not_zero(bench_rss: ModuleType) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        text=True,
        capture_output=True,
        check=True,
    )
    assert bench_rss.group_resident_mb([int(proc.stdout)]) is None


def test_dev_only_modules_are_the_installed_ones_missing_from_the_lock(
    image_modules: ModuleType, tmp_path: Path
) -> None:
    lock = tmp_path / "requirements.lock"
    lock.write_text("# pinned\nPyYAML==6.0.1 \\\n    --hash=sha256:abc\nfastapi[all]==0.110.0\n")
    assert image_modules.image_distributions(lock) == {"pyyaml", "fastapi"}
    blocked = image_modules.dev_only_modules(lock)
    assert "yaml" not in blocked and "fastapi" not in blocked  # in the lock
    assert "pytest" in blocked and "starlette" in blocked  # installed, not in this lock
    assert "autoscaler" not in blocked  # the project itself


def test_the_shipped_lock_leaves_every_runtime_import_of_the_controller(
    image_modules: ModuleType,
) -> None:
    """Blocking what the image lacks must not block what the controller imports."""
    blocked = set(image_modules.dev_only_modules())
    assert {"kubernetes_validate", "grpc_tools", "pytest"} <= blocked
    assert not blocked & {"fastapi", "grpc", "kubernetes_asyncio", "aiohttp", "uvloop", "yaml"}


def test_blocked_modules_import_as_absent_and_loaded_ones_stay(
    image_modules: ModuleType,
) -> None:
    name = "llm_autoscaler_test_blocked_module"
    try:
        assert image_modules.block([name, "json"]) == ["json"]  # json: imported already
        with pytest.raises(ImportError):
            importlib.import_module(name)
        assert sys.modules["json"] is not None
    finally:
        sys.modules.pop(name, None)


def test_an_empty_lock_is_refused_naming_the_file(
    image_modules: ModuleType, tmp_path: Path
) -> None:
    lock = tmp_path / "empty.lock"
    lock.write_text("# nothing pinned\n")
    with pytest.raises(ValueError, match=r"empty\.lock: no 'name==version' line"):
        image_modules.image_distributions(lock)
