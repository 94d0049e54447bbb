"""A TCP server on 127.0.0.1 that accepts connections and never answers (a hung peer), or,
with ``close_at_once``, drops each connection unanswered (a peer that resets)."""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType


class HangingServer:
    """``async with HangingServer() as srv``: ``srv.url``; ``srv.accepted`` counts clients."""

    def __init__(self, *, close_at_once: bool = False) -> None:
        self.accepted = 0
        self.close_at_once = close_at_once
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._release = asyncio.Event()
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        if self.close_at_once:
            writer.close()
            return
        self._writers.append(writer)
        await self._release.wait()  # read nothing, answer nothing, until the test ends

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        self._release.set()
        for w in self._writers:
            w.close()
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)

    async def __aenter__(self) -> HangingServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()
