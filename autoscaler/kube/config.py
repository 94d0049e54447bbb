"""Building a kubernetes-asyncio `ApiClient`: in-cluster, kubeconfig, or a given host.

In-cluster config wins when the service-account environment is present and no kubeconfig
was asked for; otherwise the kubeconfig (``KUBECONFIG`` honoured, read at call time, not at
import time as kubernetes-asyncio's default does) is used.
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientTimeout
from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import ApiClient, Configuration

from autoscaler import __version__
from autoscaler.errors import ConfigError

# Who we are to the API server: audit logs and API Priority and Fairness see the user agent,
# managedFields the field manager. The manager carries no version, so an upgrade does not
# leave a second owner of the same fields behind.
USER_AGENT = f"llm-autoscaler/{__version__}"
FIELD_MANAGER = "llm-autoscaler"
_MANAGED_WRITES = frozenset({"POST", "PUT", "PATCH"})


class _ControllerApiClient(ApiClient):
    """An ApiClient that names the controller: its user agent on every call, its field
    manager on every write (kubernetes-asyncio sends ``OpenAPI-Generator/...`` otherwise)."""

    def __init__(self, configuration: Configuration) -> None:
        super().__init__(configuration=configuration)
        self.user_agent = USER_AGENT

    def request(
        self,
        method: Any,
        url: Any,
        query_params: Any | None = None,
        headers: dict[Any, Any] | None = None,
        post_params: dict[Any, Any] | None = None,
        body: Any | None = None,
        _preload_content: bool = True,
        _request_timeout: float | tuple[float] | ClientTimeout | None = None,
    ) -> Any:
        if method in _MANAGED_WRITES:
            params = list(query_params or [])
            if not any(k == "fieldManager" for k, _ in params):
                params.append(("fieldManager", FIELD_MANAGER))
            query_params = params
        return super().request(
            method,
            url,
            query_params,
            headers,
            post_params,
            body,
            _preload_content,
            _request_timeout,
        )


async def load_api_client(kubeconfig: str | None = None, context: str | None = None) -> ApiClient:
    """An ApiClient for the current cluster; raises `ConfigError` when none is configured."""
    cfg = Configuration()
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    path = kubeconfig or os.environ.get("KUBECONFIG")
    if in_cluster and path is None:
        try:
            kconfig.load_incluster_config(client_configuration=cfg)  # type: ignore[no-untyped-call]
        except kconfig.ConfigException as err:
            raise ConfigError(f"in-cluster config: {err}") from None
        return _ControllerApiClient(cfg)
    if path is None:
        default = Path.home() / ".kube" / "config"
        if not default.exists():
            raise ConfigError(
                f"no kubeconfig and not in a cluster: KUBECONFIG is unset, {default} does not "
                "exist and KUBERNETES_SERVICE_HOST is unset; pass --kubeconfig PATH, set "
                "KUBECONFIG, or run the controller in a pod"
            )
        path = str(default)
    try:
        await kconfig.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    except (kconfig.ConfigException, OSError) as err:
        raise ConfigError(
            f"kubeconfig: cannot load {path!r} (context {context!r}): {err}; "
            "set KUBECONFIG or run in-cluster"
        ) from None
    return _ControllerApiClient(cfg)


def api_client_for(host: str, *, pool_maxsize: int | None = None) -> ApiClient:
    """An ApiClient for a plain-HTTP endpoint such as `LocalKubeAPI.url` (tests, demo)."""
    cfg = Configuration(host=host)
    cfg.verify_ssl = False
    if pool_maxsize is not None:
        cfg.connection_pool_maxsize = pool_maxsize
    return _ControllerApiClient(cfg)


# Connection pools per role (aiohttp ``limit``): the informers' few long-lived watches,
# leader election (never waits behind anything), and every other call (reads, scale
# patches, status, Events), each in its own pool so no role can starve another.
WATCH_POOL = 16
LEASE_POOL = 2
DEFAULT_POOL = 32


def pooled_client(api: ApiClient, maxsize: int) -> ApiClient:
    """A new ApiClient for the same cluster and credentials with a pool of ``maxsize``."""
    cfg = copy.copy(api.configuration)
    cfg.connection_pool_maxsize = maxsize
    return _ControllerApiClient(cfg)


@dataclass
class KubeClients:
    """One ApiClient per role (see the pool sizes above); `close` closes those it made."""

    api: ApiClient
    watch: ApiClient
    lease: ApiClient
    _owned: list[ApiClient] = field(default_factory=list)

    @classmethod
    def split(cls, api: ApiClient) -> KubeClients:
        watch, lease = pooled_client(api, WATCH_POOL), pooled_client(api, LEASE_POOL)
        return cls(api, watch, lease, [watch, lease])

    async def close(self) -> None:
        for c in self._owned:
            await c.close()
        self._owned.clear()
