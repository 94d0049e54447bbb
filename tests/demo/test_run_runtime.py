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
