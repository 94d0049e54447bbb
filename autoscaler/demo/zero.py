"""The demo's second model: it sits at zero replicas behind the activator.

Its Deployment starts at 0 on a node pool of its own (one warm GPU node, so the wait is
the container cold start only). `llm-autoscaler activator` (the real one, in process)
fronts it: the demo's emulated pods publish an EndpointSlice each when Ready, which the
activator reads through its informer, as in a cluster. A client sends one request while
the model is at zero: the activator holds it and reports the held count to the
controller (``POST /v1/activator/held``), which pokes the loop and scales 0 -> 1 at once.
Once the pod is Ready the held request is forwarded and answered. After the policy's
``cooldownPeriod`` with nothing held, running or waiting, the controller scales the
model back to zero. The demo prints each of these moments in emulated seconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from autoscaler.activator.config import parse_config
from autoscaler.activator.runtime import ActivatorProcess
from autoscaler.demo.runtime import EmulatedClock
from autoscaler.kube.localapi.server import LocalKubeAPI

POOL = "zero"
ZERO_PROMPT_TOKENS = 200
ZERO_OUTPUT_TOKENS = 64
# The control loop runs in emulated time: a 60 s idle period, polled every second.
ZERO_POLICY: dict[str, Any] = {
    "minReplicaCount": 0,
    "maxReplicaCount": 2,
    "pollingInterval": 1,
    "cooldownPeriod": 60,
    "metrics": [
        {"signal": "waiting", "type": "AverageValue", "target": 4},
        {"signal": "running", "type": "AverageValue", "target": 48},
    ],
}


@dataclass
class ZeroRecord:
    """Emulated seconds since the demo started; None: it did not happen in the run."""

    model: str
    sent_at_s: float | None = None
    replicas_at_send: int | None = None
    scaled_up_at_s: float | None = None
    answered_at_s: float | None = None  # the held request's answer arrived
    held_s: float | None = None  # the activator's X-Activator-Held-Seconds, emulated
    status: int | None = None
    tokens: int = 0
    back_to_zero_at_s: float | None = None
    error: str | None = None


def activator_config(namespace: str, model: str, controller_url: str) -> dict[str, Any]:
    return {
        "controller": {"url": controller_url, "resendS": 1},
        "targets": [
            {"model": model, "namespace": namespace, "service": model, "autoscaler": model}
        ],
    }


async def start_activator(
    namespace: str, model: str, controller_url: str, kube_api: Any
) -> ActivatorProcess:
    act = ActivatorProcess(
        parse_config(activator_config(namespace, model, controller_url), "demo activator"),
        host="127.0.0.1",
        port=0,
        identity="demo-activator",
        kube_api=kube_api,
        grace_s=1.0,
    )
    await act.start()
    return act


class ZeroModel:
    """The client side of the scenario and the record of what happened."""

    def __init__(
        self,
        namespace: str,
        model: str,
        kube: LocalKubeAPI,
        clock: EmulatedClock,
        note: Callable[[str], None],
    ) -> None:
        self.namespace = namespace
        self.model = model
        self.kube = kube
        self.clock = clock
        self.note = note
        self.record = ZeroRecord(model)

    def replicas(self) -> int:
        dep = self.kube.get("deployments", self.namespace, self.model, group="apps")
        return int(dep["spec"]["replicas"]) if dep is not None else 0

    def _t(self) -> float:
        return round(self.clock.now(), 1)

    async def _until_emulated(self, t_s: float) -> None:
        while self.clock.now() < t_s:
            await self.clock.sleep(min(1.0, t_s - self.clock.now()))

    async def run(self, activator_url: str, send_at_s: float) -> None:
        """At ``send_at_s`` (emulated) one request to the activator; then watch
        for the scale-up, the answer and the return to zero."""
        rec = self.record
        await self._until_emulated(send_at_s)
        rec.sent_at_s, rec.replicas_at_send = self._t(), self.replicas()
        what = "held by the activator" if rec.replicas_at_send == 0 else "sent to the activator"
        self.note(
            f"t={rec.sent_at_s:.0f} s: request to {self.model} (at {rec.replicas_at_send} "
            f"replicas) {what}"
        )
        watch = asyncio.create_task(self._watch_scale_up())
        try:
            await self._send(activator_url)
        finally:
            watch.cancel()
        if rec.answered_at_s is None:
            return
        held = f"held {rec.held_s:.0f} s" if rec.held_s is not None else "hold time unknown"
        self.note(f"t={rec.answered_at_s:.0f} s: {self.model} answered it ({held}, cold start)")
        while self.replicas() > 0:
            await self.clock.sleep(1.0)
        rec.back_to_zero_at_s = self._t()
        self.note(f"t={rec.back_to_zero_at_s:.0f} s: {self.model} idle, back to 0 replicas")

    async def _watch_scale_up(self) -> None:
        while self.replicas() == 0:
            await self.clock.sleep(0.5)
        self.record.scaled_up_at_s = self._t()
        self.note(f"t={self.record.scaled_up_at_s:.0f} s: {self.model} scaled 0 -> 1 for it")

    async def _send(self, url: str) -> None:
        """One non-streamed completion: the activator answers it with the time it was
        held in ``X-Activator-Held-Seconds`` (a streamed one gets ``: held`` heartbeats
        instead, and its headers go out before the hold ends)."""
        rec = self.record
        body = {
            "model": self.model,
            "prompt": "w " * ZERO_PROMPT_TOKENS,
            "max_tokens": ZERO_OUTPUT_TOKENS,
            "ignore_eos": True,
        }
        try:
            async with (
                aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http,
                http.post(url + "/v1/completions", json=body) as resp,
            ):
                rec.status = resp.status
                if resp.status != 200:
                    rec.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                    self.note(f"{self.model}: request failed: {rec.error}")
                    return
                doc = await resp.json()
                rec.answered_at_s = self._t()
                rec.tokens = int(doc["usage"]["completion_tokens"])
                held = resp.headers.get("X-Activator-Held-Seconds")
                if held is not None:  # real seconds at the activator -> emulated
                    rec.held_s = round(float(held) * self.clock.fleet.speed, 1)
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as err:
            rec.error = f"{type(err).__name__}: {err}"
            self.note(f"{self.model}: request failed: {rec.error}")

    def summary(self) -> dict[str, Any]:
        return asdict(self.record)
