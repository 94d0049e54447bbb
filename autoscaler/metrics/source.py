"""The metrics source API the control loop calls, shared by every source.

    reading = await source.read(key, pods, now)      # -> TargetReading
    Observation(..., signals=reading.signals, pods_read=reading.pods_read)

``key`` names the target (e.g. ``"ns/deploy"``) so a source can keep per-target state
(previous scrapes for rates and quantiles); ``pods`` are the target's ready pods (the pod
scrape source reads them; the Prometheus source, which reads the target as a whole,
uses only their count); ``now`` is the caller's clock in seconds. A source never raises
for one failed pod: the pod is left out of ``pods_read`` and named in ``errors``. A
signal no pod reported is absent from ``signals`` (missing data), never 0. A pod (or,
for Prometheus, an answer) holding a value out of range is not read: ``rejected`` counts
those by reason (`signals.REJECT_REASONS`), so they show in decisions and metrics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class PodEndpoint:
    """A ready pod and the URL of its metrics page."""

    name: str
    url: str


@dataclass(frozen=True, slots=True)
class TargetReading:
    """What a source read about one target at ``t``."""

    t: float
    signals: Mapping[str, float] = field(default_factory=dict)
    pods_read: int = 0
    pods_expected: int = 0
    errors: tuple[str, ...] = ()
    rejected: Mapping[str, int] = field(default_factory=dict)  # reason -> pods (or answers)
    # prompt-length histogram over the window (upper bound in tokens -> cumulative requests,
    # summed over pods); empty: not read (variants' length classes, policy/variants.py)
    length_buckets: Mapping[float, float] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return self.pods_read >= self.pods_expected


class MetricSource(Protocol):
    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        """Read one target's signals; see the module docstring."""
        ...

    async def close(self) -> None: ...
