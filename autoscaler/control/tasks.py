"""Named, guarded asyncio tasks (kopf-style): every background task has a name, its
failure is logged (never silently lost), and `stop` cancels and awaits them all so no
task leaks past the component that started it."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from autoscaler.logging import get_logger

log = get_logger(__name__)


class TaskGroup:
    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[Any]] = set()
        self.failures: list[tuple[str, BaseException]] = []

    def spawn(self, name: str, coro: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"{self.name}/{name}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        exc = task.exception()
        if exc is not None:
            self.failures.append((task.get_name(), exc))
            log.error("task failed", task=task.get_name(), error=repr(exc))

    @property
    def running(self) -> list[str]:
        return sorted(t.get_name() for t in self._tasks if not t.done())

    async def stop(self) -> None:
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()
