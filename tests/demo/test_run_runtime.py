"""`llm-autoscaler run`'s runtime: the event loop it runs on and its GC settings."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from autoscaler.commands import run as run_command
from autoscaler.errors import AutoscalerError


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


def test_auto_runs_on_uvloop_when_it_is_installed() -> None:
    pytest.importorskip("uvloop")
    assert run_command.run_loop(_loop_module(), "auto") == "uvloop"


def test_asyncio_runs_on_the_standard_loop() -> None:
    assert run_command.loop_factory("asyncio") is None
    assert run_command.run_loop(_loop_module(), "asyncio") == "asyncio.unix_events"


def test_an_unknown_event_loop_is_refused_naming_the_choices() -> None:
    with pytest.raises(AutoscalerError, match=r"'tokio': must be one of auto, uvloop, asyncio"):
        run_command.loop_factory("tokio")


def test_uvloop_asked_for_but_missing_is_an_error_not_a_silent_fallback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import builtins

    real_import = builtins.__import__

    def no_uvloop(name: str, *args: object, **kwargs: object) -> object:
        if name == "uvloop":
            raise ImportError("no uvloop")
        return real_import(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(builtins, "__import__", no_uvloop)
    assert run_command.loop_factory("auto") is None
    with pytest.raises(AutoscalerError, match="uvloop package is not installed"):
        run_command.loop_factory("uvloop")


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restore_gc")
def test_tune_gc_freezes_startup_objects_and_raises_the_young_threshold() -> None:
    kept = [[n] for n in range(10)]  # alive at startup: frozen, never walked again
    assert any(o is kept[0] for o in gc.get_objects())
    run_command.tune_gc()
    assert not any(o is kept[0] for o in gc.get_objects())
    assert gc.get_threshold() == run_command.GC_THRESHOLDS
    assert run_command.GC_THRESHOLDS[0] > 700  # above CPython's default


def test_free_memory_is_released_with_glibc_and_skipped_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ctypes

    calls: list[int] = []

    class Libc:
        def __init__(self, name: str) -> None:
            if name != "libc.so.6":
                raise OSError(name)

        @property
        def malloc_trim(self) -> object:
            def trim(pad: int) -> int:
                calls.append(pad)
                return 1

            return trim

    monkeypatch.setattr(run_command, "_malloc_trim", None)
    monkeypatch.setattr(ctypes, "CDLL", Libc)
    assert run_command.release_free_memory() and run_command.release_free_memory()
    assert calls == [0, 0]

    def no_libc(name: str) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(run_command, "_malloc_trim", None)
    monkeypatch.setattr(ctypes, "CDLL", no_libc)
    assert not run_command.release_free_memory()
    assert not run_command.release_free_memory()  # looked up once
