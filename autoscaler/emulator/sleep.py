"""vLLM's sleep mode for the emulated replica: ``POST /sleep``, ``POST /wake_up``,
``GET /is_sleeping``.

vLLM exposes these only with ``VLLM_SERVER_DEV_MODE=1`` and ``--enable-sleep-mode``
(``vllm/entrypoints/serve/sleep/api_router.py``); `ReplicaConfig.sleep_mode` stands for
both, and without it the routes do not exist (404), as on a vLLM without dev mode.

What the emulator copies from vLLM (``EngineCore.sleep``/``pause_scheduler``):
- ``POST /sleep?level=1&mode=abort`` pauses the scheduler, then offloads the weights and
  discards the KV cache. ``mode=abort`` (the default) ends every request in flight with
  finish_reason ``abort``; ``mode=wait`` lets them finish first. It answers 200 with an
  empty body. Only level 1 is emulated (level 2 needs a weight reload to come back).
- While asleep, a completion request is accepted but not scheduled: it waits, and runs
  after ``POST /wake_up`` ("resume the scheduler and flush any requests queued while
  paused"). Older vLLM crashed on such a request (vllm#15483), so nothing should route to
  a sleeper; the emulator holds rather than crashes.
- The engine does no steps while asleep, so /metrics shows no load: nothing running or
  waiting, an empty KV cache. ``/health`` stays 200 (vLLM's health check only asks whether
  the engine process is alive): readiness alone does not keep traffic off a sleeper.
- ``POST /wake_up`` takes `ReplicaConfig.wake_s` emulated seconds and answers 200 when the
  weights are back. ``?tags=weights`` / ``?tags=kv_cache`` restore one part; the replica
  serves again, and ``GET /is_sleeping`` answers ``{"is_sleeping": false}``, once both are.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Final, Literal

from aiohttp import web

from autoscaler.emulator.clock import EmuClock

# calibration.md section 3, "Sleep mode (warm pool)" row, and the section 6 cold-start
# table's "sleep-mode wake" row: Level-1 wake 0.5-3 s for an 8B model (median 0.5 s,
# p90 3 s), 3-6 s for 70B TP4 (vLLM blog _posts/2025-10-26-sleep-mode.md; llm-d PR #2492
# measured a 4.0 s "hot" start for Qwen3-32B on H100).
WAKE_S_8B: Final = 0.5
TAGS: Final = frozenset({"weights", "kv_cache"})
SleepMode = Literal["abort", "wait"]


class SleepState:
    """Which memory tags are offloaded, and an event set while the replica may serve."""

    def __init__(self, clock: EmuClock, wake_s: float) -> None:
        self.clock = clock
        self.wake_s = wake_s
        self.asleep: set[str] = set()
        self.pausing = False  # a mode=wait sleep is waiting for in-flight requests
        self.awake = asyncio.Event()
        self.awake.set()
        self._waking: asyncio.Task[None] | None = None
        self.sleeps = 0
        self.wakes = 0

    @property
    def is_sleeping(self) -> bool:
        return bool(self.asleep) or self.pausing

    async def wait_awake(self) -> None:
        """Until the replica schedules requests again (at once when awake)."""
        await self.awake.wait()

    async def sleep(
        self,
        mode: SleepMode,
        abort_all: Callable[[], object],
        wait_idle: Callable[[], Awaitable[None]],
    ) -> None:
        if self.is_sleeping:
            return  # sleeping an already sleeping engine is a no-op in vLLM
        self.awake.clear()
        if mode == "wait":
            self.pausing = True
            try:
                await wait_idle()
            finally:
                self.pausing = False
        abort_all()  # mode=abort ends requests in flight; after a wait: resets the KV cache
        self.asleep = set(TAGS)
        self.sleeps += 1

    async def wake_up(self, tags: frozenset[str]) -> None:
        """Restore ``tags``; the weights take ``wake_s`` emulated seconds (one copy at a
        time: concurrent calls wait for the same restore)."""
        if "weights" in tags and "weights" in self.asleep:
            if self._waking is None:
                self._waking = asyncio.create_task(self._restore_weights())
            task = self._waking
            await asyncio.shield(task)
        self.asleep -= tags - {"weights"}
        if not self.asleep and not self.pausing and not self.awake.is_set():
            self.awake.set()
            self.wakes += 1

    async def _restore_weights(self) -> None:
        try:
            await asyncio.sleep(self.clock.real_duration(self.wake_s))
            self.asleep.discard("weights")
        finally:
            self._waking = None


def _bad(message: str) -> web.Response:
    body = {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    return web.json_response(body, status=400)


def add_routes(
    app: web.Application,
    state: SleepState,
    abort_all: Callable[[], object],
    wait_idle: Callable[[], Awaitable[None]],
) -> None:
    """The three dev-mode routes, with vLLM's request and response shapes."""

    async def sleep(request: web.Request) -> web.Response:
        level = request.query.get("level", "1")
        if level != "1":
            return _bad(f"level: value {level!r} is not emulated; only level 1 is")
        mode = request.query.get("mode", "abort")
        if mode not in ("abort", "wait"):
            return _bad(f"mode: value {mode!r} is not emulated; 'abort' or 'wait'")
        await state.sleep("abort" if mode == "abort" else "wait", abort_all, wait_idle)
        return web.Response(status=200)

    async def wake_up(request: web.Request) -> web.Response:
        raw = request.query.getall("tags", [])
        unknown = sorted(set(raw) - TAGS)
        if unknown:
            return _bad(f"tags: value {unknown[0]!r} must be one of {', '.join(sorted(TAGS))}")
        await state.wake_up(frozenset(raw) if raw else TAGS)
        return web.Response(status=200)

    async def is_sleeping(_: web.Request) -> web.Response:
        return web.json_response({"is_sleeping": state.is_sleeping})

    app.router.add_post("/sleep", sleep)
    app.router.add_post("/wake_up", wake_up)
    app.router.add_get("/is_sleeping", is_sleeping)
