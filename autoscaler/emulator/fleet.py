"""Several emulated vLLM replicas in one process, on different 127.0.0.1 ports.

All replicas share one `EmuClock`, so ``set_speed`` changes the pace of the whole fleet
and their emulated times agree (as pods on one cluster clock would).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from autoscaler.emulator.clock import EmuClock
from autoscaler.emulator.metrics import Naming
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig
from autoscaler.errors import ConfigError
from autoscaler.sim.replica import HardwareProfile


@dataclass(frozen=True, slots=True)
class QueueJump:
    """A sudden queue injected into one replica: when it happened and how big it was.

    ``t_monotonic`` (time.monotonic) and ``t_wall`` (time.time) are taken right after the
    requests entered the engine, i.e. from then on /metrics shows the jump.
    """

    replica: str
    requests: int
    prompt_tokens: int
    output_tokens: int
    t_monotonic: float
    t_wall: float
    t_emulated: float
    waiting_after: int


class EmulatorFleet:
    """Starts, stops and paces emulated replicas. Use as an async context manager."""

    def __init__(self, speed: float = 1.0, defaults: ReplicaConfig | None = None) -> None:
        self.clock = EmuClock(speed)
        self.defaults = defaults or ReplicaConfig()
        self.replicas: dict[str, EmulatedReplica] = {}

    async def __aenter__(self) -> EmulatorFleet:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.stop_all(drain=False)

    @property
    def speed(self) -> float:
        return self.clock.speed

    def set_speed(self, speed: float) -> None:
        """Emulated time = real time x ``speed`` from now on (for every replica)."""
        self.clock.set_speed(speed)

    async def start_replica(
        self,
        name: str,
        port: int = 0,
        cold_start_s: float | None = None,
        profile: HardwareProfile | str | None = None,
        *,
        model: str | None = None,
        naming: Naming | None = None,
        config: ReplicaConfig | None = None,
    ) -> EmulatedReplica:
        """Start a replica listening on 127.0.0.1:``port`` (0: ephemeral); returns its handle.

        ``cold_start_s`` is in emulated seconds: /health turns 200 after it has elapsed."""
        if name in self.replicas:
            raise ConfigError(f"replica name: value {name!r} is already running")
        if not (0 <= port <= 65535):
            raise ConfigError(f"port: value {port} must be in 0..65535")
        cfg = config or self.defaults
        changes: dict[str, object] = {}
        if cold_start_s is not None:
            changes["cold_start_s"] = cold_start_s
        if profile is not None:
            changes["profile"] = profile
        if model is not None:
            changes["model"] = model
        if naming is not None:
            changes["naming"] = naming
        cfg = replace(cfg, **changes)  # type: ignore[arg-type]
        rep = EmulatedReplica(name, cfg, self.clock)
        self.replicas[name] = rep
        try:
            await rep.start(port)
        except BaseException:
            del self.replicas[name]
            raise
        return rep

    def get(self, name: str) -> EmulatedReplica:
        try:
            return self.replicas[name]
        except KeyError:
            raise ConfigError(f"replica: value {name!r} is not running") from None

    async def stop_replica(self, name: str, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Graceful by default: stop accepting, finish in-flight requests, then close."""
        rep = self.get(name)
        try:
            await rep.stop(drain=drain, timeout_s=timeout_s)
        finally:
            self.replicas.pop(name, None)

    async def stop_all(self, drain: bool = False) -> None:
        names = list(self.replicas)
        await asyncio.gather(*(self.stop_replica(n, drain=drain) for n in names))

    def ready_urls(self) -> list[str]:
        """Base URLs of replicas whose /health is 200 (what a Service would route to)."""
        return [r.url for r in self.replicas.values() if r.ready]

    def jump_queue(
        self, name: str, requests: int, prompt_tokens: int = 1024, output_tokens: int = 128
    ) -> QueueJump:
        """Inject ``requests`` client-less requests into replica ``name`` at once."""
        rep = self.get(name)
        rep.engine.inject(requests, prompt_tokens, output_tokens)
        return QueueJump(
            replica=name,
            requests=requests,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
            t_monotonic=time.monotonic(),
            t_wall=time.time(),
            t_emulated=self.clock.now(),
            waiting_after=rep.engine.replica.num_waiting,
        )
