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

from kubernetes_asyncio import config as kconfig
from kubernetes_asyncio.client import ApiClient, Configuration

from autoscaler.errors import ConfigError


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
        return ApiClient(configuration=cfg)
    path = path or str(Path.home() / ".kube" / "config")
    try:
        await kconfig.load_kube_config(config_file=path, context=context, client_configuration=cfg)
    except (kconfig.ConfigException, OSError) as err:
        raise ConfigError(
            f"kubeconfig: cannot load {path!r} (context {context!r}): {err}; "
            "set KUBECONFIG or run in-cluster"
        ) from None
    return ApiClient(configuration=cfg)


def api_client_for(host: str, *, pool_maxsize: int | None = None) -> ApiClient:
    """An ApiClient for a plain-HTTP endpoint such as `LocalKubeAPI.url` (tests, demo)."""
    cfg = Configuration(host=host)
    cfg.verify_ssl = False
    if pool_maxsize is not None:
        cfg.connection_pool_maxsize = pool_maxsize
    return ApiClient(configuration=cfg)


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
    return ApiClient(configuration=cfg)


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
