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

from collections.abc import Mapping, Sequence
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


# -- sleep or zero: the outlook for the next burst ----------------------------------------
MIN_GAPS = 3  # past quiet periods before the outlook may release sleepers early
KEEP_ABOVE = 0.5  # keep while at least this share of comparable quiet periods ended in time
KEEP, RELEASE, NO_FORECAST = "burst-expected", "no-burst-expected", "no-forecast"
_CODES = {KEEP: 1.0, RELEASE: 0.0, NO_FORECAST: -1.0}


@dataclass(frozen=True, slots=True)
class QuietGap:
    """One past quiet period of a target with sleepers: from the moment replicas were put
    to sleep to the next scale-up (``ended``), or as long as it was seen (not ended: the
    controller lost track of it, e.g. the target changed)."""

    length_s: float
    ended: bool = True


@dataclass(frozen=True, slots=True)
class Outlook:
    """Whether a target's sleepers are worth keeping: the next burst is expected within
    their TTL (keep), or not (release them now: delete, the target goes to zero)."""

    reason: str  # KEEP, RELEASE or NO_FORECAST (keep until the TTL, as without it)
    quiet_s: float  # how long this quiet period has lasted
    ttl_s: float
    comparable: int = 0  # past quiet periods at least as long as this one so far
    ended_within_ttl: int = 0  # of those, ended by a scale-up within ttl_s
    gaps: int = 0  # past quiet periods seen

    @property
    def keep(self) -> bool:
        return self.reason != RELEASE

    @property
    def message(self) -> str:
        ttl = f"ttlSeconds {self.ttl_s:g}"
        seen = (
            f"{self.ended_within_ttl} of {self.comparable} past quiet periods longer than "
            f"{self.quiet_s:.0f} s ended by a scale-up within {self.ttl_s:g} s"
        )
        if self.reason == NO_FORECAST:
            return (
                f"no forecast of the next burst yet ({self.gaps} past quiet periods, "
                f"{MIN_GAPS} needed): sleepers kept up to {ttl}"
            )
        if self.reason == KEEP:
            return f"next burst expected within {ttl}: {seen}; sleepers kept"
        return f"no burst expected within {ttl}: {seen}; sleepers released"

    def numbers(self) -> dict[str, float]:
        """``sleepers.outlook.*`` for the decision (status condition, /metrics)."""
        return {
            "sleepers.outlook": _CODES[self.reason],
            "sleepers.outlook.quiet_s": self.quiet_s,
            "sleepers.outlook.ttl_s": self.ttl_s,
            "sleepers.outlook.comparable": float(self.comparable),
            "sleepers.outlook.ended_within_ttl": float(self.ended_within_ttl),
            "sleepers.outlook.gaps": float(self.gaps),
        }

    @classmethod
    def from_numbers(cls, numbers: Mapping[str, float]) -> Outlook | None:
        code = numbers.get("sleepers.outlook")
        if code is None:
            return None
        reason = next((r for r, c in _CODES.items() if c == code), NO_FORECAST)
        return cls(
            reason,
            numbers.get("sleepers.outlook.quiet_s", 0.0),
            numbers.get("sleepers.outlook.ttl_s", 0.0),
            int(numbers.get("sleepers.outlook.comparable", 0)),
            int(numbers.get("sleepers.outlook.ended_within_ttl", 0)),
            int(numbers.get("sleepers.outlook.gaps", 0)),
        )


def outlook(
    now_s: float,
    quiet_since_s: float,
    gaps: Sequence[QuietGap],
    ttl_s: float,
    *,
    min_gaps: int = MIN_GAPS,
    keep_above: float = KEEP_ABOVE,
) -> Outlook:
    """Keep the sleepers while the next burst is expected within ``ttl_s`` of the start of
    this quiet period, release them when it is not.

    The forecast is the target's own history of quiet periods: of the past ones that
    lasted at least as long as this one so far (``now_s - quiet_since_s``), the share
    that ended with a scale-up within ``ttl_s`` is the chance that this one does too (a
    conditional empirical survival estimate; one not ended counts as not ending in time
    only when it was seen past ``ttl_s``). Keep at ``keep_above`` or more. With fewer
    than ``min_gaps`` past periods there is no forecast, and the TTL alone decides, as
    without the outlook. Pure: time is passed in."""
    if not ttl_s > 0:
        raise ConfigError(f"ttl_s: value {ttl_s} must be > 0")
    if min_gaps < 1:
        raise ConfigError(f"min_gaps: value {min_gaps} must be >= 1")
    if not 0 < keep_above <= 1:
        raise ConfigError(f"keep_above: value {keep_above} must be in (0, 1]")
    quiet = max(0.0, now_s - quiet_since_s)
    if len(gaps) < min_gaps:
        return Outlook(NO_FORECAST, quiet, ttl_s, gaps=len(gaps))
    # comparable: lasted past `quiet`, and its outcome within the TTL is known
    known = [g for g in gaps if g.length_s > quiet and (g.ended or g.length_s >= ttl_s)]
    hits = sum(1 for g in known if g.ended and g.length_s <= ttl_s)
    chance = hits / len(known) if known else 0.0
    reason = KEEP if known and chance >= keep_above else RELEASE
    return Outlook(reason, quiet, ttl_s, len(known), hits, len(gaps))
