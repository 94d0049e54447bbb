"""The demo's second model: it sits at zero replicas behind the activator, and keeps
sleepers (vLLM sleep mode) when it idles.

Its Deployment starts at 0 on a node pool of its own (two warm GPU nodes, so a cold start
is the container start only). `llm-autoscaler activator` (the real one, in process)
fronts it: the demo's emulated pods publish an EndpointSlice each when Ready (with the
pod in ``targetRef``), which the activator reads through its informer, as in a cluster,
leaving out the pods labelled asleep. The scenario, in emulated seconds:

1. **Cold start.** A first request arrives at zero: the activator holds it and reports
   the held count to the controller (``POST /v1/activator/held``), which pokes the loop
   and scales 0 -> 1 at once. More requests arrive during the cold start (held too; the
   controller sizes the fleet for them). Once a pod is Ready the held requests are
   forwarded and answered.
2. **Asleep, not gone.** After the policy's ``cooldownPeriod`` with nothing held,
   running or waiting, the model goes to zero *awake* replicas: with ``sleep`` in its
   policy the controller puts the idle replicas to sleep (``POST /sleep``) instead of
   deleting them.
3. **A burst wakes them.** A burst arrives at zero awake: the activator holds it, the
   poke wakes the sleepers (``POST /wake_up``, seconds) instead of cold-starting pods,
   and the burst is answered.
4. **Back to zero.** Idle again, the replicas sleep again, and the sleepers are released
   (deleted: 0 replicas) when the forecast expects no burst within their TTL, or at the
   TTL.

The demo prints each moment with what it measured (hold times from the activator's
``X-Activator-Held-Seconds``, wake time from the pods' labels).
"""

from __future__ import annotations

import asyncio
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp

from autoscaler.activator.config import parse_config
from autoscaler.activator.runtime import ActivatorProcess
from autoscaler.demo.runtime import EmulatedClock
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import SLEEPING_LABEL

POOL = "zero"
ZERO_PROMPT_TOKENS = 200
ZERO_OUTPUT_TOKENS = 64
FOLLOW_UP_AFTER_S = 10.0  # emulated: more requests arrive during the first cold start
FOLLOW_UPS = 11
BURST = 12  # requests in the burst that wakes the sleepers
BURST_AFTER_ASLEEP_S = 10.0  # emulated seconds after the replicas went to sleep
BURST_LATEST_S = 260.0  # emulated: the burst goes then at the latest (sleepers or not)
POLL_S = 0.1  # emulated seconds between looks at the pods
# The control loop runs in emulated time: a 60 s idle period, polled every second. Up to
# 3 sleepers, released after 60 s asleep at the latest.
ZERO_POLICY: dict[str, Any] = {
    "minReplicaCount": 0,
    "maxReplicaCount": 3,
    "pollingInterval": 1,
    "cooldownPeriod": 60,
    "metrics": [
        {"signal": "waiting", "type": "AverageValue", "target": 4},
        {"signal": "running", "type": "AverageValue", "target": 48},
    ],
    "sleep": {"maxSleeping": 3, "ttlSeconds": 60},
}


@dataclass
class ZeroRecord:
    """Emulated seconds since the demo started; None: it did not happen in the run."""

    model: str
    sent_at_s: float | None = None
    replicas_at_send: int | None = None
    scaled_up_at_s: float | None = None
    answered_at_s: float | None = None  # the first held request's answer arrived
    held_s: float | None = None  # its X-Activator-Held-Seconds, emulated
    status: int | None = None
    tokens: int = 0
    follow_ups: int = 0  # requests sent during the cold start
    follow_ups_answered: int = 0
    asleep_at_s: float | None = None  # idle: 0 awake, the replicas asleep
    sleepers: int = 0  # replicas asleep then
    burst_sent_at_s: float | None = None
    burst: int = 0
    awake_at_burst: int | None = None
    asleep_at_burst: int | None = None
    woken: int = 0  # sleepers woken for the burst
    woken_in_s: float | None = None  # burst sent -> the last of them serving (label off)
    burst_answered: int = 0
    burst_held_p50_s: float | None = None
    burst_held_max_s: float | None = None
    burst_done_at_s: float | None = None
    back_to_zero_at_s: float | None = None  # the Deployment at 0 replicas (released)
    error: str | None = None
    burst_held_s: list[float] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int | None
    at_s: float | None
    held_s: float | None
    tokens: int = 0
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

    def asleep(self) -> list[str]:
        """Pods of the model labelled asleep (not terminating)."""
        return sorted(
            p["metadata"]["name"]
            for p in self.kube.list_objects("pods", self.namespace)
            if (p["metadata"].get("labels") or {}).get("app") == self.model
            and (p["metadata"].get("labels") or {}).get(SLEEPING_LABEL) == "true"
            and not p["metadata"].get("deletionTimestamp")
        )

    def awake(self) -> int:
        return max(0, self.replicas() - len(self.asleep()))

    def _asleep_or_gone(self) -> bool:
        return not self.replicas() or (self.awake() == 0 and bool(self.asleep()))

    def _t(self) -> float:
        return round(self.clock.now(), 1)

    async def _until_emulated(self, t_s: float) -> None:
        while self.clock.now() < t_s:
            await self.clock.sleep(min(1.0, t_s - self.clock.now()))

    async def _until(self, pred: Callable[[], bool], every_s: float = 1.0) -> None:
        while not pred():
            await self.clock.sleep(every_s)

    async def run(self, activator_url: str, send_at_s: float) -> None:
        """The four moments of the module docstring, in order."""
        if not await self._cold_start(activator_url, send_at_s):
            return
        await self._until(
            lambda: (self.awake() == 0 and bool(self.asleep())) or not self.replicas()
        )
        rec = self.record
        rec.asleep_at_s, rec.sleepers = self._t(), len(self.asleep())
        if rec.sleepers:
            self.note(
                f"t={rec.asleep_at_s:.0f} s: {self.model} idle: {rec.sleepers} replicas put "
                "to sleep, 0 awake"
            )
        await self._until_emulated(min(rec.asleep_at_s + BURST_AFTER_ASLEEP_S, BURST_LATEST_S))
        await self._burst(activator_url)
        await self._until(lambda: self.replicas() == 0)
        rec.back_to_zero_at_s = self._t()
        self.note(f"t={rec.back_to_zero_at_s:.0f} s: {self.model} sleepers released: 0 replicas")

    async def _cold_start(self, url: str, send_at_s: float) -> bool:
        rec = self.record
        await self._until_emulated(send_at_s)
        rec.sent_at_s, rec.replicas_at_send = self._t(), self.replicas()
        what = "held by the activator" if rec.replicas_at_send == 0 else "sent to the activator"
        self.note(
            f"t={rec.sent_at_s:.0f} s: request to {self.model} (at {rec.replicas_at_send} "
            f"replicas) {what}"
        )
        watch = asyncio.create_task(self._watch_scale_up())
        first = asyncio.create_task(self._send(url))
        await self._until_emulated(send_at_s + FOLLOW_UP_AFTER_S)
        more = [asyncio.create_task(self._send(url)) for _ in range(FOLLOW_UPS)]
        rec.follow_ups = FOLLOW_UPS
        if not first.done():
            self.note(f"t={self._t():.0f} s: {FOLLOW_UPS} more held during its cold start")
        try:
            answer = await first
        finally:
            watch.cancel()
        rec.status, rec.tokens, rec.error = answer.status, answer.tokens, answer.error
        rec.answered_at_s, rec.held_s = answer.at_s, answer.held_s
        rest = await asyncio.gather(*more)
        rec.follow_ups_answered = sum(1 for a in rest if a.status == 200)
        if answer.error is not None or rec.answered_at_s is None:
            self.note(f"{self.model}: request failed: {answer.error}")
            return False
        held = f"held {rec.held_s:.0f} s" if rec.held_s is not None else "hold time unknown"
        self.note(f"t={rec.answered_at_s:.0f} s: {self.model} answered it ({held}, cold start)")
        return True

    async def _burst(self, url: str) -> None:
        rec = self.record
        sleepers = self.asleep()
        rec.burst_sent_at_s, rec.burst = self._t(), BURST
        rec.awake_at_burst, rec.asleep_at_burst = self.awake(), len(sleepers)
        self.note(
            f"t={rec.burst_sent_at_s:.0f} s: burst of {BURST} to {self.model} at "
            f"{rec.awake_at_burst} awake, {len(sleepers)} asleep"
        )
        start = self.clock.now()
        watch = asyncio.create_task(self._watch_wake(set(sleepers), start))
        answers = await asyncio.gather(*(self._send(url) for _ in range(BURST)))
        await asyncio.wait({watch}, timeout=self.clock.fleet.clock.real_duration(5.0))
        watch.cancel()
        ok = [a for a in answers if a.status == 200]
        rec.burst_answered = len(ok)
        rec.burst_done_at_s = max((a.at_s for a in ok if a.at_s is not None), default=None)
        held = sorted(a.held_s for a in ok if a.held_s is not None)
        rec.burst_held_s = held
        if held:
            rec.burst_held_p50_s = round(statistics.median(held), 2)
            rec.burst_held_max_s = round(held[-1], 2)
        if rec.woken and rec.woken_in_s is not None:
            self.note(
                f"{rec.woken} sleepers woken in {rec.woken_in_s:.1f} s for a burst of {BURST}"
            )
        if held:
            cold = f"{rec.held_s:.0f}" if rec.held_s is not None else "?"
            self.note(
                f"{len(ok)}/{BURST} answered, held p50 {rec.burst_held_p50_s:.1f} s, max "
                f"{rec.burst_held_max_s:.1f} s (cold start: {cold} s)"
            )
        else:
            self.note(f"burst: {len(ok)}/{BURST} answered")

    async def _watch_wake(self, sleepers: set[str], start: float) -> None:
        """Until every pod asleep at the burst is serving again (its label off) or gone."""
        if not sleepers:
            return
        while True:
            await self.clock.sleep(POLL_S)
            pods = {
                p["metadata"]["name"]: p for p in self.kube.list_objects("pods", self.namespace)
            }
            still = self.asleep()
            woken = [
                n
                for n in sleepers
                if n in pods and n not in still and not pods[n]["metadata"].get("deletionTimestamp")
            ]
            self.record.woken = len(woken)
            if not set(still) & sleepers:
                self.record.woken_in_s = round(self.clock.now() - start, 2)
                return

    async def _watch_scale_up(self) -> None:
        while self.replicas() == 0:
            await self.clock.sleep(0.5)
        self.record.scaled_up_at_s = self._t()
        self.note(
            f"t={self.record.scaled_up_at_s:.0f} s: {self.model} scaled 0 -> "
            f"{self.replicas()} for it"
        )

    async def _send(self, url: str) -> Answer:
        """One non-streamed completion: the activator answers it with the time it was
        held in ``X-Activator-Held-Seconds`` (a streamed one gets ``: held`` heartbeats
        instead, and its headers go out before the hold ends)."""
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
                if resp.status != 200:
                    err = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                    return Answer(resp.status, None, None, error=err)
                doc = await resp.json()
                held = resp.headers.get("X-Activator-Held-Seconds")
                # real seconds at the activator -> emulated
                held_s = round(float(held) * self.clock.fleet.speed, 2) if held else None
                tokens = int(doc["usage"]["completion_tokens"])
                return Answer(200, self._t(), held_s, tokens)
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as err:
            return Answer(None, None, None, error=f"{type(err).__name__}: {err}")

    def summary(self) -> dict[str, Any]:
        return asdict(self.record)
