"""A TCP server on 127.0.0.1 that accepts connections and never answers (a hung peer)."""

from __future__ import annotations

import asyncio
from types import TracebackType


class HangingServer:
    """``async with HangingServer() as srv``: ``srv.url``; ``srv.accepted`` counts clients."""

    def __init__(self) -> None:
        self.accepted = 0
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []
        self._release = asyncio.Event()
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        self._writers.append(writer)
        await self._release.wait()  # read nothing, answer nothing, until the test ends

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def __aenter__(self) -> HangingServer:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._release.set()
        for w in self._writers:
            w.close()
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()
