"""Which replicas to wake, start, put to sleep or delete when a target has sleepers.

A sleeper is a vLLM replica in sleep mode (level 1: weights in host RAM, GPU memory
freed, CUDA graphs and compiled kernels kept). Waking one takes seconds where a cold
start takes a minute or more (calibration.md section 3), so a scale-up wakes sleepers
first and cold-starts only the rest; a scale-down puts idle replicas to sleep while fewer
than the sleeping budget sleep, and deletes the rest. A sleeper asleep for longer than
its TTL is deleted, which bounds what an unused sleeper costs (it still holds its GPU
unless the GPU is shared).

Pure: the simulator's sleeping tier (`autoscaler/sim/serverless.py`) decides with it, so
a controller that does the same agrees with what the benchmark measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from autoscaler.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Fleet:
    """A target's replicas as the sleeper planner counts them."""

    awake: int  # starting, waking or Ready: what serves now or soon
    idle_ready: int  # awake, Ready and with no request in flight: removable now
    asleep: int

    def __post_init__(self) -> None:
        if min(self.awake, self.idle_ready, self.asleep) < 0 or self.idle_ready > self.awake:
            raise ConfigError(
                f"fleet: awake {self.awake}, idle_ready {self.idle_ready} and asleep "
                f"{self.asleep} must be >= 0, with idle_ready <= awake"
            )


@dataclass(frozen=True, slots=True)
class SleepPlan:
    """Counts of replicas to act on; at most one of the up/down pairs is non-zero."""

    wake: int = 0
    start: int = 0
    sleep: int = 0
    delete: int = 0


def plan(desired: int, fleet: Fleet, sleeping_budget: int) -> SleepPlan:
    """Move ``fleet`` toward ``desired`` awake replicas.

    Up: wake sleepers first, cold-start the rest. Down: only idle Ready replicas leave
    (never one starting or with a request in flight); each sleeps while the sleepers are
    fewer than ``sleeping_budget``, else it is deleted."""
    if desired < 0:
        raise ConfigError(f"desired: value {desired} must be >= 0")
    if sleeping_budget < 0:
        raise ConfigError(f"sleeping_budget: value {sleeping_budget} must be >= 0")
    if desired > fleet.awake:
        need = desired - fleet.awake
        wake = min(need, fleet.asleep)
        return SleepPlan(wake=wake, start=need - wake)
    leave = min(fleet.awake - desired, fleet.idle_ready)
    sleep = min(leave, max(0, sleeping_budget - fleet.asleep))
    return SleepPlan(sleep=sleep, delete=leave - sleep)


def expired(asleep_since_s: Sequence[float], now_s: float, ttl_s: float | None) -> list[int]:
    """Indexes of the sleepers asleep for ``ttl_s`` or longer (none without a TTL)."""
    if ttl_s is None:
        return []
    if not ttl_s > 0:
        raise ConfigError(f"ttl_s: value {ttl_s} must be > 0")
    return [i for i, since in enumerate(asleep_since_s) if now_s - since >= ttl_s]
