"""Push the held and in-flight counts to the controller (Knative's activator -> autoscaler
stat push): at once on change, and again every ``resend_s`` so a controller that restarted
or missed a post learns them anyway.

One post at a time: a change while a post is in flight marks the counts dirty and one more
post follows it, so a burst of 10,000 arrivals costs a handful of posts, each carrying the
latest counts. Every post carries this activator's identity and a time-to-live; the
controller sums the reporters and drops one that stops reporting (a crashed replica). On
shutdown a last post with ``leaving: true`` removes this reporter at once (the KEDA HTTP
add-on's tombstone idea).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from autoscaler.logging import get_logger

log = get_logger(__name__)

HELD_PATH = "/v1/activator/held"

# "namespace/name" -> (held, in_flight, forwarded): ``forwarded`` counts the held requests
# ever handed to a Ready pod (cumulative; the controller times a cold start by it).
Counts = Mapping[str, tuple[int, int, int]]


class HeldReporter:
    def __init__(
        self,
        urls: Callable[[], Sequence[str]],
        identity: str,
        counts: Callable[[], Counts],
        *,
        token: str | None = None,
        resend_s: float = 1.0,
        timeout_s: float = 2.0,
        session: aiohttp.ClientSession | None = None,
        on_hold_caps: Callable[[Mapping[str, int]], None] | None = None,
    ) -> None:
        self.urls = urls  # every controller replica (each decides; the leader writes)
        self.identity = identity
        self._counts = counts
        self._token = token
        self.resend_s = resend_s
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session = session
        self._own_session = session is None
        self._dirty = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.posts = 0
        self.failures = 0
        # the controller's answer: per target, the LLMAutoscaler's scaleToZero.holdCap
        self.on_hold_caps = on_hold_caps

    def changed(self) -> None:
        """Counts changed: post them as soon as the post in flight (if any) is done."""
        self._dirty.set()

    def start(self) -> None:
        if self._session is None:
            self._session = aiohttp.ClientSession()
        self._task = asyncio.get_running_loop().create_task(self._run(), name="held-reporter")

    def _body(self, leaving: bool = False) -> dict[str, Any]:
        targets = []
        for key, (held, in_flight, forwarded) in self._counts().items():
            namespace, _, name = key.partition("/")
            targets.append(
                {
                    "namespace": namespace,
                    "name": name,
                    "held": held,
                    "in_flight": in_flight,
                    "forwarded": forwarded,
                }
            )
        return {
            "activator": self.identity,
            "ttl_s": round(self.resend_s * 3 + 2, 3),
            "leaving": leaving,
            "targets": targets,
        }

    async def _post_all(self, body: dict[str, Any]) -> None:
        await asyncio.gather(*(self._post(u, body) for u in self.urls()))

    async def _post(self, base: str, body: dict[str, Any]) -> bool:
        assert self._session is not None
        url = base.rstrip("/") + HELD_PATH
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            async with self._session.post(
                url, json=body, headers=headers, timeout=self._timeout
            ) as resp:
                if resp.status >= 300:
                    text = (await resp.text())[:300]
                    raise aiohttp.ClientResponseError(
                        resp.request_info, (), status=resp.status, message=text
                    )
                answer = await resp.json(content_type=None)
            self.posts += 1
            caps = answer.get("holdCaps") if isinstance(answer, dict) else None
            if self.on_hold_caps is not None and isinstance(caps, dict):
                self.on_hold_caps({str(k): v for k, v in caps.items() if type(v) is int and v >= 1})
            return True
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as err:
            self.failures += 1
            if self.failures == 1 or self.failures % 60 == 0:
                log.warning("held report failed", url=url, error=str(err)[:300])
            return False

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.resend_s):
                    await self._dirty.wait()
            self._dirty.clear()
            await self._post_all(self._body())

    async def stop(self) -> None:
        """Stop, then tell the controller this activator holds nothing any more."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._session is not None:
            await self._post_all(self._body(leaving=True))
            if self._own_session:
                await self._session.close()
