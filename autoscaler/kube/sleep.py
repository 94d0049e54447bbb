"""The I/O of sleepers (docs/policy.md#sleepers): vLLM's sleep-mode endpoints on a pod's
engine port, and the label/annotation patches that mark a pod asleep.

vLLM serves ``POST /sleep?level=1&mode=wait`` (finish the requests in flight, then offload
the weights), ``POST /wake_up`` and ``GET /is_sleeping`` on its API port with
``--enable-sleep-mode`` and ``VLLM_SERVER_DEV_MODE=1``; without them the routes are 404.
`autoscaler/emulator/sleep.py` implements the same three routes.

Every failure is an `ActuationError` naming the pod's URL, the call and what answered; the
orchestration (`autoscaler/control/sleepers.py`) decides what a failure means.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import aiohttp
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient
from kubernetes_asyncio.client.exceptions import ApiException

from autoscaler.errors import ActuationError
from autoscaler.retry import describe

MERGE_PATCH = "application/merge-patch+json"


class PodSleepClient:
    """Sleep, wake and mark pods. One aiohttp session (made on first use) for the engine
    calls; the pod patches go through kubernetes-asyncio."""

    def __init__(
        self,
        api: ApiClient,
        *,
        session: aiohttp.ClientSession | None = None,
        sleep_timeout_s: float = 120.0,
        wake_timeout_s: float = 120.0,
        probe_timeout_s: float = 5.0,
        request_timeout_s: float = 10.0,
    ) -> None:
        self._core: Any = client.CoreV1Api(api)
        self._session = session
        self._own_session = session is None
        self.sleep_timeout_s = sleep_timeout_s  # mode=wait: requests in flight finish first
        self.wake_timeout_s = wake_timeout_s
        self.probe_timeout_s = probe_timeout_s
        self.request_timeout_s = request_timeout_s

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        return self._session

    async def _post(self, url: str, timeout_s: float) -> None:
        try:
            async with self._http().post(
                url, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as resp:
                if resp.status != 200:
                    text = (await resp.text())[:200]
                    hint = (
                        " (sleep mode off: start vLLM with --enable-sleep-mode and "
                        "VLLM_SERVER_DEV_MODE=1)"
                        if resp.status == 404
                        else ""
                    )
                    raise ActuationError(f"POST {url}: HTTP {resp.status}{hint}: {text}")
        except (aiohttp.ClientError, TimeoutError, OSError) as err:
            raise ActuationError(f"POST {url}: {describe(err)}") from None

    async def sleep(self, engine_url: str) -> None:
        """Level 1, ``mode=wait``: the engine finishes what it serves, then sleeps."""
        await self._post(f"{engine_url}/sleep?level=1&mode=wait", self.sleep_timeout_s)

    async def wake(self, engine_url: str) -> None:
        await self._post(f"{engine_url}/wake_up", self.wake_timeout_s)

    async def is_sleeping(self, engine_url: str) -> bool | None:
        """What the engine says (None: no answer, or not one of vLLM's)."""
        url = f"{engine_url}/is_sleeping"
        try:
            async with self._http().get(
                url, timeout=aiohttp.ClientTimeout(total=self.probe_timeout_s)
            ) as resp:
                if resp.status != 200:
                    return None
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError):
            return None
        value = body.get("is_sleeping") if isinstance(body, dict) else None
        return value if isinstance(value, bool) else None

    async def mark(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None:
        """Merge-patch the pod's labels and annotations (None removes a key)."""
        body = {"metadata": {"labels": dict(labels), "annotations": dict(annotations)}}
        try:
            await self._core.patch_namespaced_pod(
                name,
                namespace,
                body,
                _content_type=MERGE_PATCH,
                _request_timeout=self.request_timeout_s,
            )
        except (ApiException, TimeoutError, OSError) as err:
            raise ActuationError(f"patch pod {namespace}/{name}: {describe(err)}") from None

    async def close(self) -> None:
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None
