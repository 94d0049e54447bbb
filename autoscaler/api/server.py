"""Run the ASGI app with uvicorn as a task inside the controller's own event loop.

Why not ``uvicorn.run``: the control loop, the gRPC server and the HTTP server share one
loop and one process; uvicorn must neither own the loop nor steal SIGINT/SIGTERM from the
controller, which decides the shutdown order itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Generator
from dataclasses import dataclass

import uvicorn
from fastapi import FastAPI

from autoscaler.api.connections import (
    ConnectionGate,
    ConnectionLimits,
    Reason,
    bounded_protocol,
)
from autoscaler.errors import ConfigError


class PortInUse(ConfigError):
    """A port a server must bind is taken (commands exit 2 with this one line)."""


def check_port_free(host: str, port: int, flag: str) -> None:
    """Before starting anything: a taken port is one line naming it and the flag that
    changes it, instead of a server's traceback halfway through start-up. Port 0 (any
    free port) is always free. The port is bound and released at once (a later bind can
    still race; the servers then fail as before)."""
    if port == 0:
        return
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as err:
            why = "is already in use" if err.errno == errno.EADDRINUSE else err.strerror
            raise PortInUse(
                f"port {port} on {host} {why}; choose another with {flag} PORT (0 picks a free one)"
            ) from None


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield  # the owning process handles signals


@dataclass
class HttpServerHandle:
    """A running server: the bound port (useful with port 0) and a graceful stop."""

    host: str
    port: int
    _server: uvicorn.Server
    _task: asyncio.Task[None]
    gate: ConnectionGate | None = None

    async def stop(self, timeout_s: float = 5.0) -> None:
        self._server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(self._task), timeout_s)
        except TimeoutError:
            self._server.force_exit = True
            await self._task

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


async def serve_http(
    app: FastAPI,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    access_log: bool = False,
    limits: ConnectionLimits | None = None,
    on_close: Callable[[Reason], None] | None = None,
) -> HttpServerHandle:
    """Start serving and return once the socket is bound (port 0 picks a free port).
    Every connection has ``limits`` (default `ConnectionLimits()`): a header deadline and
    a cap on open connections (autoscaler/api/connections.py); ``on_close`` is told each
    connection those limits close."""
    gate = ConnectionGate(limits if limits is not None else ConnectionLimits(), on_close)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=access_log,  # off by default: query strings are not logged either
        lifespan="off",
        log_config=None,
        http=bounded_protocol(gate),
    )
    server = _EmbeddedServer(config)
    task = asyncio.create_task(server.serve(), name=f"http-server-{host}:{port}")
    while not server.started:
        if task.done():
            exc = task.exception()
            raise RuntimeError(f"HTTP server on {host}:{port} failed to start") from exc
        await asyncio.sleep(0.01)
    bound = port
    for srv in server.servers:
        for sock in srv.sockets:
            bound = int(sock.getsockname()[1])
            break
    return HttpServerHandle(host, bound, server, task, gate)
