"""KubeCluster turns a blind tick into the MetricsAvailable and Fallback conditions of
the status it writes, and into a Warning Event that is deduplicated (same reason: once
per interval, fake clock) and followed by a Normal one when sight returns."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from autoscaler.control.adapters import KubeCluster
from autoscaler.control.clock import FakeClock
from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.kube.events import EventLimiter
from autoscaler.policy.status import metrics_availability
from autoscaler.target import ScaleTargetRef, TargetSpec
from autoscaler.target_status import Condition

REF = TargetRef("serving", "llama")


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool]] = []

    async def record(self, spec: TargetSpec, decision: Decision, applied: bool) -> None:
        return None

    async def emit(self, spec: TargetSpec, reason: str, message: str, *, warning: bool) -> None:
        self.events.append((reason, message, warning))


class Status:
    def __init__(self) -> None:
        self.writes: list[tuple[Condition, ...]] = []

    async def write_status(
        self, ref: TargetRef, decision: Decision | None, *, conditions: Sequence[Condition] = (),
        observed_generation: int | None = None, policy: Any = None, variants: Any = (),
    ) -> None:  # fmt: skip
        self.writes.append(tuple(conditions))

    def generation_of(self, ref: TargetRef) -> int | None:
        return 1


def _spec() -> TargetSpec:
    from autoscaler.policy.schema import load_policy

    return TargetSpec(
        ref=REF,
        policy=load_policy({"metrics": [{"signal": "waiting", "target": 4}]}),
        scale_target_ref=ScaleTargetRef(kind="Deployment", name="llama"),
    )


def _blind(errors: tuple[str, ...] = ("llama-0: connection refused",)) -> Any:
    return metrics_availability(
        source="pods", spec_replicas=1, pods=1, pods_read=0, signals_read=0, errors=errors
    )


def _seen() -> Any:
    return metrics_availability(
        source="pods", spec_replicas=1, pods=1, pods_read=1, signals_read=2, errors=()
    )


def _decision(reason: Reason = Reason.HOLD_MISSING_DATA, desired: int = 1) -> Decision:
    return Decision(t=0.0, current_replicas=1, desired_replicas=desired, reason=reason,
                    message="holding 1 replicas: no fresh data", active=False)  # fmt: skip


def _cluster(clock: FakeClock) -> tuple[KubeCluster, Recorder, Status]:
    rec, status = Recorder(), Status()
    cluster = KubeCluster(None, cache=object(), scale=object(), recorder=rec, status=status,  # type: ignore[arg-type]
                          clock=clock, blind_event_every_s=300.0)  # fmt: skip
    return cluster, rec, status


def _conds(write: tuple[Condition, ...]) -> dict[str, Condition]:
    return {c.type: c for c in write}


async def test_blind_tick_writes_metrics_false_and_active_unknown_never_idle() -> None:
    cluster, _, status = _cluster(FakeClock())
    spec = _spec()
    await cluster.record_metrics(spec, _blind())
    await cluster.record(spec, _decision(), applied=False)
    conds = _conds(status.writes[-1])
    assert conds["MetricsAvailable"].status == "False"
    assert conds["MetricsAvailable"].reason == "ScrapeErrors"
    assert "llama-0: connection refused" in conds["MetricsAvailable"].message
    assert (conds["Active"].status, conds["Active"].reason) == ("Unknown", "MetricsUnavailable")
    assert conds["Fallback"].status == "False"


async def test_fallback_driving_the_count_is_a_condition() -> None:
    cluster, _, status = _cluster(FakeClock())
    spec = _spec()
    await cluster.record_metrics(spec, _blind())
    await cluster.record(spec, _decision(Reason.FALLBACK, desired=2), applied=True)
    assert _conds(status.writes[-1])["Fallback"].status == "True"


async def test_regaining_sight_rewrites_the_status_at_once() -> None:
    cluster, _, status = _cluster(FakeClock())
    spec = _spec()
    await cluster.record_metrics(spec, _blind())
    await cluster.record(spec, _decision(), applied=False)
    await cluster.record_metrics(spec, _seen())
    await cluster.record(spec, _decision(), applied=False)  # same decision, new sight
    assert len(status.writes) == 2
    assert _conds(status.writes[-1])["MetricsAvailable"].status == "True"
    assert _conds(status.writes[-1])["Active"].reason == "Idle"


async def test_warning_event_is_deduplicated_and_rate_limited_on_the_fake_clock() -> None:
    clock = FakeClock()
    cluster, rec, _ = _cluster(clock)
    spec = _spec()
    for _ in range(10):  # ten blind ticks, one second apart, same reason
        await cluster.record_metrics(spec, _blind((f"llama-0: timeout after {_} s",)))
        await clock.advance(1.0)
    assert [(r, w) for r, _, w in rec.events] == [("MetricsUnavailable", True)]
    assert "ScrapeErrors" in rec.events[0][1]
    await cluster.record_metrics(spec, _blind(()))  # new reason (NoSignals): news
    assert len(rec.events) == 2
    await clock.advance(300.0)
    await cluster.record_metrics(spec, _blind(()))  # same reason, interval passed
    assert len(rec.events) == 3
    await cluster.record_metrics(spec, _seen())
    assert rec.events[-1][0] == "MetricsAvailable" and rec.events[-1][2] is False
    await cluster.record_metrics(spec, _blind())  # blind again: reported at once
    assert rec.events[-1][0] == "MetricsUnavailable"


def test_event_limiter_allows_a_changed_reason_at_once_and_a_repeat_per_interval() -> None:
    lim = EventLimiter(60.0)
    assert lim.allow("t", "NoPods", 0.0)
    assert not lim.allow("t", "NoPods", 59.9)
    assert lim.allow("t", "ScrapeErrors", 60.0 - 30)
    assert lim.allow("t", "ScrapeErrors", 91.0)
    assert lim.allow("other", "NoPods", 91.0)  # per key
