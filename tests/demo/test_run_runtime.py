"""`llm-autoscaler run`'s runtime: the event loop it runs on and its GC settings."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from autoscaler.commands import run as run_command
from autoscaler.commands.gc_pacing import BACKSTOP_THRESHOLDS, GcPacer
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
    assert run_command.tune_gc() is None  # no control loop to pace the collections
    assert not any(o is kept[0] for o in gc.get_objects())
    assert gc.get_threshold() == run_command.GC_THRESHOLDS
    assert run_command.GC_THRESHOLDS[0] > 700  # above CPython's default


@pytest.mark.usefixtures("restore_gc")
def test_tune_gc_with_a_control_loop_paces_the_young_collections_between_its_ticks() -> None:
    class Loop:
        after_tick: object = None

    class Controller:
        loop = Loop()

    controller = Controller()
    pacer = run_command.tune_gc(controller)  # type: ignore[arg-type]
    assert pacer is not None
    assert controller.loop.after_tick == pacer.between_ticks
    # the automatic collector stays on as the safety bound, far above a tick's objects
    assert gc.isenabled()
    assert gc.get_threshold() == BACKSTOP_THRESHOLDS
    assert BACKSTOP_THRESHOLDS[0] > run_command.GC_THRESHOLDS[0]


class FakeGc:
    """The gc module's counts as a pacer sees them; collect(n) resets them like CPython."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.collected: list[int] = []

    def get_count(self) -> tuple[int, int, int]:
        return (self.counts[0], self.counts[1], self.counts[2])

    def collect(self, generation: int) -> int:
        self.collected.append(generation)
        for g in range(generation + 1):
            self.counts[g] = 0
        if generation < 2:
            self.counts[generation + 1] += 1
        return 0


def _pacer(fake: FakeGc, now: list[float], **kwargs: object) -> GcPacer:
    return GcPacer(
        clock=lambda: now[0],
        collect=fake.collect,
        get_count=fake.get_count,
        **kwargs,  # type: ignore[arg-type]
    )


def test_the_pacer_collects_the_young_generation_at_most_once_per_interval() -> None:
    fake, now = FakeGc(), [100.0]
    pacer = _pacer(fake, now, min_interval_s=1.0, thresholds=(1_000, 10, 30))
    fake.counts[0] = 5_000
    assert pacer.between_ticks() == 0
    fake.counts[0] = 5_000
    now[0] = 100.4  # a second tick 0.4 s later: too soon
    assert pacer.between_ticks() is None
    now[0] = 101.0
    assert pacer.between_ticks() == 0
    assert fake.collected == [0, 0]


def test_the_pacer_skips_a_young_generation_below_its_threshold() -> None:
    fake, now = FakeGc(), [0.0]
    pacer = _pacer(fake, now, thresholds=(1_000, 10, 30))
    fake.counts[0] = 999
    assert pacer.between_ticks() is None
    fake.counts[0] = 1_000
    assert pacer.between_ticks() == 0


def test_the_pacer_runs_older_generations_by_cpythons_counts() -> None:
    fake, now = FakeGc(), [0.0]
    pacer = _pacer(fake, now, min_interval_s=1.0, thresholds=(1, 3, 2))
    for _ in range(12):
        fake.counts[0] = 10
        pacer.between_ticks()
        now[0] += 1.0
    # every 3rd collection a middle one, every 2nd middle one a full one
    assert fake.collected == [0, 0, 1, 0, 0, 2, 0, 0, 1, 0, 0, 2]
    assert pacer.collections == [8, 2, 2]


def test_the_pacer_refuses_settings_that_would_never_or_always_collect() -> None:
    with pytest.raises(ValueError, match=r"min_interval_s -1: must be >= 0"):
        GcPacer(min_interval_s=-1)
    with pytest.raises(ValueError, match=r"thresholds \(0, 10, 30\): each must be >= 1"):
        GcPacer(thresholds=(0, 10, 30))


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
