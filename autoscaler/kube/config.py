"""Building a kubernetes-asyncio `ApiClient`: in-cluster, kubeconfig, or a given host.

In-cluster config wins when the service-account environment is present and no kubeconfig
was asked for; otherwise the kubeconfig (``KUBECONFIG`` honoured, read at call time, not at
import time as kubernetes-asyncio's default does) is used.
"""

from __future__ import annotations

import os
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


def api_client_for(host: str) -> ApiClient:
    """An ApiClient for a plain-HTTP endpoint such as `LocalKubeAPI.url` (tests, demo)."""
    cfg = Configuration(host=host)
    cfg.verify_ssl = False
    return ApiClient(configuration=cfg)
