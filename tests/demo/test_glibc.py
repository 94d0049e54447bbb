"""The allocator knobs of the controller and its scrape workers (autoscaler/commands/glibc.py):
one malloc arena for every thread, unless the user set MALLOC_ARENA_MAX."""

from __future__ import annotations

import ctypes
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from autoscaler.commands import glibc

# Four threads allocating at once, then glibc's own report of its heaps (one per arena).
_PROBE = textwrap.dedent(
    """
    import ctypes, sys, threading
    from autoscaler.commands import glibc
    if sys.argv[1] == "limit":
        assert glibc.limit_malloc_arenas({})
    barrier = threading.Barrier(4)
    kept = []
    def work():
        barrier.wait()  # all four hold the allocator at the same time
        kept.append([bytearray(3000) for _ in range(200)])
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    libc = ctypes.CDLL("libc.so.6")
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    fp = libc.fopen(sys.argv[2].encode(), b"w")
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    """
)


def _heaps(tmp_path: Path, mode: str) -> int:
    report = tmp_path / f"{mode}.xml"
    env = {"PATH": "/usr/bin:/bin"}  # no MALLOC_ARENA_MAX from the test's environment
    subprocess.run(
        [sys.executable, "-c", _PROBE, mode, str(report)], check=True, env=env, timeout=60
    )
    return report.read_text().count("<heap nr=")


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc arenas are glibc's")
def test_threads_share_one_malloc_arena_once_limited(tmp_path: Path) -> None:
    assert _heaps(tmp_path, "default") > 1  # the control: glibc gives threads their own
    assert _heaps(tmp_path, "limit") == 1


def test_a_user_set_arena_limit_is_left_as_set(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, int]] = []

    class Libc:
        def __init__(self, name: str) -> None:
            assert name == "libc.so.6"

        @property
        def mallopt(self) -> object:
            def mallopt(param: int, value: int) -> int:
                calls.append((param, value))
                return 1

            return mallopt

    monkeypatch.setattr(ctypes, "CDLL", Libc)
    assert not glibc.limit_malloc_arenas({"MALLOC_ARENA_MAX": "4"})
    assert calls == []
    assert glibc.limit_malloc_arenas({})
    assert calls == [(glibc.M_ARENA_MAX, 1)]


def test_without_glibc_the_knobs_do_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_libc(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert not glibc.limit_malloc_arenas({})
    assert glibc.malloc_trim() is None


def test_the_controller_limits_the_arenas_before_its_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autoscaler.commands import run as run_command

    order: list[str] = []

    def limit() -> bool:
        order.append("arenas")
        return True

    monkeypatch.setattr(glibc, "limit_malloc_arenas", limit)

    async def main() -> str:
        order.append("loop")
        return "done"

    assert run_command.run_loop(main(), "asyncio") == "done"
    assert order == ["arenas", "loop"]
