"""The activator process: the HTTP server, the endpoint sources and the held-count
reporter, started and stopped as one object (tests run two against one controller).

Shutdown order: stop accepting (readyz 503), answer every held request with a retryable
503 at once (`Gate.close`), let in-flight responses finish for up to ``grace_s``, then
tell the controller this activator holds nothing (``leaving``) and close.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from autoscaler.activator.config import ActivatorConfig
from autoscaler.activator.endpoints import ProbedEndpoints, SliceEndpoints
from autoscaler.activator.reporter import HeldReporter
from autoscaler.activator.server import Activator
from autoscaler.errors import ConfigError
from autoscaler.logging import get_logger

log = get_logger(__name__)

CONTROLLER_KEY = "@controller"  # the controller's Service among the watched ones


def default_identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def _read_token(path: str) -> str | None:
    """The controller API token; a missing file means none (an optional Secret)."""
    try:
        return Path(path).read_text(encoding="utf-8").strip() or None
    except FileNotFoundError:
        log.info("no controller token file; reporting without a token", path=path)
        return None
    except OSError as err:
        raise ConfigError(
            f"controller.tokenFile: value {path!r}: cannot read ({err.strerror})"
        ) from None


@dataclass
class ActivatorProcess:
    config: ActivatorConfig
    host: str = "0.0.0.0"
    port: int = 8000
    identity: str = field(default_factory=default_identity)
    kube_api: Any = None  # kubernetes-asyncio ApiClient, needed when a target names a service
    probe_interval_s: float = 1.0
    grace_s: float = 30.0
    activator: Activator | None = None
    reporter: HeldReporter | None = None
    sources: list[Any] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _controllers: list[str] = field(default_factory=list)  # controller pods, "ip:port"
    _site: web.TCPSite | None = None

    def _set_ready(self, key: str, ready: list[str]) -> None:
        if key == CONTROLLER_KEY:
            self._controllers = ready
            assert self.reporter is not None
            self.reporter.changed()  # a new controller replica learns the counts at once
        elif self.activator is not None:
            self.activator.set_ready(key, ready)

    def _controller_urls(self) -> list[str]:
        link = self.config.controller
        if link.url:
            return [link.url]
        return [f"http://{ep}" for ep in self._controllers]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        self.activator = act = Activator(self.config)
        link = self.config.controller
        if link.url or link.service:
            token = _read_token(link.token_file) if link.token_file else None
            self.reporter = HeldReporter(
                self._controller_urls, self.identity, act.counts, token=token,
                resend_s=link.resend_s, on_hold_caps=act.set_hold_caps,
            )  # fmt: skip
            act.on_counts_change = self.reporter.changed
            self.reporter.start()
        fixed = {t.key: t.endpoints for t in self.config.targets if t.endpoints}
        if fixed:
            probed = ProbedEndpoints(fixed, act.set_ready, interval_s=self.probe_interval_s)
            probed.start()
            self.sources.append(probed)
        services = {
            (t.namespace, t.service): (t.key, t.port)
            for t in self.config.targets
            if t.service is not None
        }
        if link.service:
            services[(link.namespace, link.service)] = (CONTROLLER_KEY, link.port)
        if services:
            if self.kube_api is None:
                raise ConfigError(
                    "targets name a 'service' but no Kubernetes API client is configured "
                    "(run in a cluster, or give --kubeconfig)"
                )
            from kubernetes_asyncio.client import CoreV1Api, DiscoveryV1Api

            slices = SliceEndpoints(
                DiscoveryV1Api(self.kube_api).list_endpoint_slice_for_all_namespaces,
                services,
                self._set_ready,
                # sleepers (docs/policy.md#sleepers) keep Ready but serve nothing
                list_pods=CoreV1Api(self.kube_api).list_pod_for_all_namespaces,
            )
            slices.start()
            self.sources.append(slices)
        # handler_cancellation: a client that disconnects cancels its handler, so a
        # held request leaves the queue at once (aiohttp >= 3.9 defaults to False).
        self._runner = web.AppRunner(act.app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        self._site = web.TCPSite(self._runner, self.host, self.port, backlog=4096)
        await self._site.start()
        if self.port == 0:
            server = self._site._server
            assert server is not None
            self.port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        log.info(
            "activator started",
            port=self.port,
            targets=len(self.config.targets),
            identity=self.identity,
            controller=link.url or f"{link.namespace}/{link.service}",
        )

    async def stop(self) -> None:
        act = self.activator
        if act is not None:
            act.drain()
            deadline = asyncio.get_running_loop().time() + self.grace_s
            while any(g.in_flight for g in act.gates.values()):
                if asyncio.get_running_loop().time() > deadline:
                    break
                await asyncio.sleep(0.05)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        for src in self.sources:
            await src.stop()
        self.sources.clear()
        if self.reporter is not None:
            await self.reporter.stop()
            self.reporter = None
