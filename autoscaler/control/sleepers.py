"""Sleepers in the controller: vLLM sleep mode instead of removing a replica
(docs/policy.md#sleepers).

For a target with ``policy.sleep``, the policy core's desired count is the number of
*awake* replicas; the workload's replicas count the sleepers too. Each tick that may
write, `SleeperController.reconcile` moves the awake replicas toward the decision with
the pure planner `autoscaler.policy.sleepers.plan` (the one the simulator measures):

- down: idle Ready replicas are labelled asleep (``autoscaling.llmscaler.io/sleeping=
  true`` and ``autoscaling.llmscaler.io/awake=false``, so the activator and a Service
  selecting ``awake=true`` stop routing to them), then, `SETTLE_S` later, put to sleep
  (``POST /sleep``, ``mode=wait``: requests in flight finish first), while fewer than
  ``maxSleeping``
  sleep; the others leave: their ``controller.kubernetes.io/pod-deletion-cost`` is set to
  `DELETE_COST` and the workload's replicas are lowered by as many;
- up: sleepers are woken first (``POST /wake_up``, then the sleeping label is removed
  and ``awake`` set to ``"true"``: traffic arrives once the engine serves), oldest
  first; only the rest are cold-started (the replicas raised);
- sleep or zero: while sleepers wait, `autoscaler.policy.sleepers.outlook` forecasts the
  next burst from the target's past quiet periods (sleep to next scale-up); when none is
  expected within ``ttlSeconds`` the sleepers are released at once (``SleepersReleased``)
  instead of at the TTL (when one is: ``SleepersKept``, once per quiet period), and the
  decision's ``sleepers.outlook.*`` numbers say which and why (the status's
  ``SleeperOutlook`` condition);
- a sleeper asleep ``ttlSeconds`` or longer, one whose wake failed `MAX_WAKE_FAILURES`
  times, and sleepers beyond ``maxSleeping`` (lowered, or ``sleep`` unset) are deleted
  the same way (deletion cost, replicas lowered).

Failures never cost capacity: a sleep that fails leaves the pod awake and unlabelled when
the engine says it is awake (retried at the next tick, since the decision still asks for
fewer), and counted as a sleeper otherwise (a wake brings it back); a wake that fails
cold-starts a replica instead; a pod whose deletion cost could not be set is not
counted as leaving (the ReplicaSet might remove another). Each is reported: a Warning
Event (``SleepFailed``, ``WakeFailed``, at most one per reason every five minutes) and
``llm_autoscaler_sleeper_actions_total{action}``.

Sleepers are left out of the signals and of ``ready_replicas`` (`KubeCluster.observe`):
they serve nothing, and their idle metrics are neither load nor missing data.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from autoscaler.control.ports import Replica, SleepOutcome, TargetView
from autoscaler.domain import TargetRef
from autoscaler.errors import AutoscalerError
from autoscaler.kube.events import EventLimiter
from autoscaler.logging import get_logger
from autoscaler.metrics.source import PodEndpoint
from autoscaler.names import (
    ASLEEP_SINCE_ANNOTATION,
    AWAKE_LABEL,
    POD_DELETION_COST_ANNOTATION,
    SLEEPING_LABEL,
)
from autoscaler.policy.schema import Sleep
from autoscaler.policy.sleepers import KEEP, Fleet, Outlook, QuietGap, expired, outlook, plan
from autoscaler.target import TargetSpec

log = get_logger(__name__)

SLEEPER_COST = -100  # a sleeper goes before any awake replica when replicas drop
DELETE_COST = -1000  # chosen to leave: goes first
MAX_WAKE_FAILURES = 3  # consecutive failed wakes before a sleeper is deleted instead
GAPS_KEPT = 50  # past quiet periods per target the outlook learns from
MARK_TTL_S = 30.0  # own marks overlay the cache at most this long (watch lag)
FAILURE_EVENT_EVERY_S = 300.0
# Between the labels (out of the activator's and the Service's endpoints) and the sleep
# call: what routers saw before the label change reaches the pod and runs (mode=wait).
SETTLE_S = 1.0
NO_SLEEP = Sleep(max_sleeping=0)  # sleep unset: sleepers left from before go


class SleepIO(Protocol):
    """The engine calls and pod patches (`autoscaler.kube.sleep.PodSleepClient`)."""

    async def sleep(self, engine_url: str) -> None: ...

    async def wake(self, engine_url: str) -> None: ...

    async def is_sleeping(self, engine_url: str) -> bool | None: ...

    async def mark(
        self,
        namespace: str,
        name: str,
        *,
        labels: Mapping[str, str | None],
        annotations: Mapping[str, str | None],
    ) -> None: ...


class EventPort(Protocol):
    async def emit(self, spec: TargetSpec, reason: str, message: str, *, warning: bool) -> None: ...


class SleeperObserver(Protocol):
    def observe_sleeper_action(self, ref: TargetRef, action: str, count: int) -> None: ...


@dataclass(frozen=True, slots=True)
class Actions:
    """What one reconcile does, by pod name (pure: `choose`)."""

    wake: tuple[str, ...] = ()
    start: int = 0  # cold starts (replicas raised)
    sleep: tuple[str, ...] = ()
    delete_awake: tuple[str, ...] = ()
    delete_sleepers: tuple[str, ...] = ()
    sleeping_before: int = 0
    released: bool = False  # the sleepers go early: no burst expected within their TTL

    @property
    def empty(self) -> bool:
        return not (
            self.wake or self.start or self.sleep or self.delete_awake or self.delete_sleepers
        )


def choose(
    replicas: Sequence[Replica],
    spec_replicas: int,
    desired: int,
    sleep: Sleep | None,
    now_s: float,
    given_up: frozenset[str] = frozenset(),
    release: bool = False,
) -> Actions:
    """Which pods to wake, sleep or delete, and how many to cold-start, to reach
    ``desired`` awake replicas. ``given_up``: sleepers whose wakes kept failing;
    ``release``: no burst is expected within the TTL (`outlook`), the sleepers not woken
    in this step go now."""
    cfg = sleep or NO_SLEEP
    sleepers = sorted(
        (r for r in replicas if r.sleeping),
        key=lambda r: (now_s if r.asleep_since_s is None else r.asleep_since_s, r.name),
    )
    since = [now_s if r.asleep_since_s is None else r.asleep_since_s for r in sleepers]
    old = set(expired(since, now_s, cfg.ttl_seconds))
    gone = [r for i, r in enumerate(sleepers) if i in old or r.name in given_up]
    keep = [r for r in sleepers if r not in gone]
    awake = max(0, spec_replicas - len(sleepers))
    idle = sorted((r for r in replicas if r.ready and not r.sleeping), key=lambda r: r.name)
    fleet = Fleet(awake=awake, idle_ready=min(len(idle), awake), asleep=len(keep))
    step = plan(desired, fleet, cfg.max_sleeping)
    wakeable = [r for r in keep if r.engine_url]
    wake = wakeable[: step.wake]
    # the budget bounds the sleepers left after this step (maxSleeping lowered, or unset)
    surplus = max(0, len(keep) - len(wake) - cfg.max_sleeping)
    left = [r for r in keep if r not in wake]
    gone += left if release else left[:surplus]
    start = step.start + step.wake - len(wake)
    if start:  # replicas go up: the ReplicaSet would not remove one; deleted once they don't
        gone = []
    # the last by name leave first; one without an address cannot sleep, so it leaves
    sleep_now = [r for r in reversed(idle) if r.engine_url][: step.sleep]
    others = [r for r in reversed(idle) if r not in sleep_now]
    leaving = others[: step.delete + step.sleep - len(sleep_now)]
    return Actions(
        wake=tuple(r.name for r in wake),
        start=start,
        sleep=tuple(r.name for r in sleep_now),
        delete_awake=tuple(r.name for r in leaving),
        delete_sleepers=tuple(r.name for r in gone),
        sleeping_before=len(sleepers),
        released=release and len(gone) > 0,
    )


@dataclass(frozen=True, slots=True)
class _Mark:
    sleeping: bool
    since_s: float | None
    at_s: float


class SleeperController:
    """`SleeperPort`: the orchestration above over `SleepIO` (engine calls, pod patches),
    with Events through ``events`` and counts through ``observer``."""

    def __init__(
        self,
        io: SleepIO,
        *,
        events: EventPort | None = None,
        observer: SleeperObserver | None = None,
        wall: Callable[[], float] = time.time,
        failure_event_every_s: float = FAILURE_EVENT_EVERY_S,
        settle_s: float = SETTLE_S,
        pause: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.io = io
        self.events = events
        self.observer = observer
        self.wall = wall
        self._marks: dict[TargetRef, dict[str, _Mark]] = {}
        self._wake_failures: dict[TargetRef, dict[str, int]] = {}
        self._failure_events = EventLimiter(failure_event_every_s)
        self.settle_s = settle_s
        self._pause = pause
        # Sleep or zero (`outlook`): when the current quiet period started (replicas put
        # to sleep) and the past ones, per target; the last outlook, for the decision.
        self._quiet_since: dict[TargetRef, float] = {}
        self._gaps: dict[TargetRef, deque[QuietGap]] = {}
        self._outlook: dict[TargetRef, Outlook] = {}
        self._kept: dict[TargetRef, float] = {}  # SleepersKept told (once per quiet period)

    # -- the view ---------------------------------------------------------------------------
    def wants(self, spec: TargetSpec, view: TargetView) -> bool:
        return spec.policy.sleep is not None or view.sleeping_replicas > 0

    def adjust(self, spec: TargetSpec, view: TargetView) -> TargetView:
        marks = self._marks.get(spec.ref)
        if not marks:
            return view
        now = self.wall()
        changed = False
        out: list[Replica] = []
        for r in view.replicas:
            mark = marks.get(r.name)
            if mark is None:
                out.append(r)
            elif mark.sleeping == r.sleeping or now - mark.at_s > MARK_TTL_S:
                del marks[r.name]  # the cache shows it (or never will): drop the mark
                out.append(r)
            else:
                changed = True
                out.append(replace(r, sleeping=mark.sleeping, asleep_since_s=mark.since_s))
        for name in set(marks) - {r.name for r in view.replicas}:
            del marks[name]  # the pod is gone
        if not marks:
            self._marks.pop(spec.ref, None)
        if not changed:
            return view
        return replace(
            view,
            replicas=tuple(out),
            sleeping_replicas=sum(1 for r in out if r.sleeping),
            ready_replicas=sum(1 for r in out if r.ready and not r.sleeping),
            pods=tuple(
                PodEndpoint(r.name, r.metrics_url)
                for r in out
                if r.ready and not r.sleeping and r.metrics_url
            ),
        )

    # -- acting -----------------------------------------------------------------------------
    async def reconcile(self, spec: TargetSpec, view: TargetView, desired: int) -> SleepOutcome:
        ref = spec.ref
        now = self.wall()
        failures = self._wake_failures.setdefault(ref, {})
        names = {r.name for r in view.replicas}
        for name in set(failures) - names:
            del failures[name]
        given_up = frozenset(n for n, k in failures.items() if k >= MAX_WAKE_FAILURES)
        look = self._look_ahead(spec, view, desired, now)
        release = look is not None and not look.keep
        if look is not None and look.reason == KEEP:
            await self._announce_kept(spec, look)
        acts = choose(
            view.replicas, view.spec_replicas, desired, spec.policy.sleep, now, given_up, release
        )
        if acts.empty:
            return SleepOutcome(view.spec_replicas, sleeping=view.sleeping_replicas)
        by_name = {r.name: r for r in view.replicas}
        ns = ref.namespace
        deleted_awake, deleted_sleepers = await asyncio.gather(
            self._mark_all(ns, acts.delete_awake, _cost(DELETE_COST)),
            self._mark_all(ns, acts.delete_sleepers, _cost(DELETE_COST)),
        )
        woken, wake_failed = await self._wake_all(spec, [by_name[n] for n in acts.wake])
        slept, still_asleep, sleep_failed = await self._sleep_all(
            spec, [by_name[n] for n in acts.sleep], now
        )
        replicas = (
            view.spec_replicas
            + acts.start
            + len(wake_failed)
            - len(deleted_awake)
            - len(deleted_sleepers)
        )
        sleeping = (
            acts.sleeping_before
            - len(woken)
            - len(deleted_sleepers)
            + len(slept)
            + len(still_asleep)
        )
        if (slept or still_asleep) and ref not in self._quiet_since:
            self._quiet_since[ref] = now  # a quiet period starts: the outlook's clock
        await self._report(
            spec, acts, woken, wake_failed, slept, sleep_failed, deleted_sleepers, sleeping, look
        )
        acted = bool(woken or slept or still_asleep or replicas != view.spec_replicas)
        return SleepOutcome(max(0, replicas), acted=acted, sleeping=max(0, sleeping))

    def _look_ahead(
        self, spec: TargetSpec, view: TargetView, desired: int, now: float
    ) -> Outlook | None:
        """Close the quiet period on a scale-up (a burst came: its length is history);
        while it lasts with sleepers and a TTL, the outlook: keep them or release them."""
        ref = spec.ref
        if desired > view.awake_replicas:
            since = self._quiet_since.pop(ref, None)
            if since is not None:
                self._gaps.setdefault(ref, deque(maxlen=GAPS_KEPT)).append(
                    QuietGap(max(0.0, now - since))
                )
            self._outlook.pop(ref, None)
            self._kept.pop(ref, None)
            return None
        sleep = spec.policy.sleep
        sleepers = [r for r in view.replicas if r.sleeping]
        if sleep is None or sleep.ttl_seconds is None or not sleepers:
            self._outlook.pop(ref, None)
            return None
        if ref not in self._quiet_since:  # e.g. after a restart: since the oldest sleeper
            known = [r.asleep_since_s for r in sleepers if r.asleep_since_s is not None]
            self._quiet_since[ref] = min(known, default=now)
        look = outlook(
            now, self._quiet_since[ref], tuple(self._gaps.get(ref, ())), sleep.ttl_seconds
        )
        self._outlook[ref] = look
        return look

    async def _announce_kept(self, spec: TargetSpec, look: Outlook) -> None:
        """``SleepersKept`` once per quiet period, when the outlook first expects a burst
        within the TTL (a release says ``SleepersReleased``; no forecast says nothing)."""
        if spec.ref in self._kept:
            return
        self._kept[spec.ref] = self.wall()
        message = f"keeping sleepers after {look.quiet_s:.0f} s quiet: {look.message}"
        log.info("sleepers", target=str(spec.ref), reason="SleepersKept", message=message)
        if self.events is not None:
            try:
                await self.events.emit(spec, "SleepersKept", message, warning=False)
            except AutoscalerError as err:
                log.warning("sleeper event not written", target=str(spec.ref), error=str(err))

    def numbers(self, ref: TargetRef) -> dict[str, float]:
        """``sleepers.outlook.*`` of the last reconcile while sleepers wait (else none)."""
        look = self._outlook.get(ref)
        return look.numbers() if look is not None else {}

    async def _mark_all(
        self, namespace: str, names: Sequence[str], annotations: Mapping[str, str | None]
    ) -> list[str]:
        """Names whose patch landed (only those may be counted as leaving)."""

        async def one(name: str) -> str | None:
            try:
                await self.io.mark(namespace, name, labels={}, annotations=annotations)
            except AutoscalerError as err:
                log.warning("deletion cost not set", pod=f"{namespace}/{name}", error=str(err))
                return None
            return name

        done = await asyncio.gather(*(one(n) for n in names))
        return [n for n in done if n is not None]

    async def _wake_all(
        self, spec: TargetSpec, pods: Sequence[Replica]
    ) -> tuple[list[str], list[tuple[str, str]]]:
        ns = spec.ref.namespace
        failures = self._wake_failures.setdefault(spec.ref, {})

        async def one(r: Replica) -> str | None:
            assert r.engine_url is not None  # choose() wakes only pods with an address
            try:
                await self.io.wake(r.engine_url)
                await self.io.mark(
                    ns,
                    r.name,
                    labels={SLEEPING_LABEL: None, AWAKE_LABEL: "true"},  # serves from now
                    annotations={ASLEEP_SINCE_ANNOTATION: None, POD_DELETION_COST_ANNOTATION: None},
                )
            except AutoscalerError as err:
                failures[r.name] = failures.get(r.name, 0) + 1
                return str(err)
            failures.pop(r.name, None)
            self._mark(spec.ref, r.name, _Mark(False, None, self.wall()))
            return None

        errors = await asyncio.gather(*(one(r) for r in pods))
        woken = [r.name for r, e in zip(pods, errors, strict=True) if e is None]
        failed = [(r.name, e) for r, e in zip(pods, errors, strict=True) if e is not None]
        return woken, failed

    async def _sleep_all(
        self, spec: TargetSpec, pods: Sequence[Replica], now: float
    ) -> tuple[list[str], list[str], list[tuple[str, str]]]:
        """(slept, failed but left counted as asleep, failed and back awake)."""
        ns = spec.ref.namespace
        asleep_marks = {SLEEPING_LABEL: "true", AWAKE_LABEL: "false"}
        annotations = {
            ASLEEP_SINCE_ANNOTATION: f"{now:.3f}",
            POD_DELETION_COST_ANNOTATION: str(SLEEPER_COST),
        }
        awake_marks: dict[str, str | None] = {SLEEPING_LABEL: None, AWAKE_LABEL: "true"}
        awake_annotations: dict[str, str | None] = {
            ASLEEP_SINCE_ANNOTATION: None,
            POD_DELETION_COST_ANNOTATION: None,
        }

        async def one(r: Replica) -> tuple[str, str | None]:
            assert r.engine_url is not None
            try:  # out of the activator's endpoints first, then asleep
                await self.io.mark(ns, r.name, labels=asleep_marks, annotations=annotations)
            except AutoscalerError as err:
                return "failed", str(err)
            if self.settle_s > 0:  # routers drop it first; what they sent before finishes
                await self._pause(self.settle_s)
            try:
                await self.io.sleep(r.engine_url)
            except AutoscalerError as err:
                if await self.io.is_sleeping(r.engine_url) is False:
                    try:  # certainly awake: serve again
                        await self.io.mark(
                            ns, r.name, labels=awake_marks, annotations=awake_annotations
                        )
                    except AutoscalerError:
                        pass  # labelled and awake: counted asleep, woken when needed
                    else:
                        return "failed", str(err)
                self._mark(spec.ref, r.name, _Mark(True, now, self.wall()))
                return "held", str(err)
            self._mark(spec.ref, r.name, _Mark(True, now, self.wall()))
            return "slept", None

        results = await asyncio.gather(*(one(r) for r in pods))
        slept = [r.name for r, (k, _) in zip(pods, results, strict=True) if k == "slept"]
        held = [r.name for r, (k, _) in zip(pods, results, strict=True) if k == "held"]
        failed = [
            (r.name, e or "")
            for r, (k, e) in zip(pods, results, strict=True)
            if k in ("failed", "held")
        ]
        return slept, held, failed

    def _mark(self, ref: TargetRef, name: str, mark: _Mark) -> None:
        self._marks.setdefault(ref, {})[name] = mark

    # -- reporting --------------------------------------------------------------------------
    async def _report(
        self,
        spec: TargetSpec,
        acts: Actions,
        woken: list[str],
        wake_failed: list[tuple[str, str]],
        slept: list[str],
        sleep_failed: list[tuple[str, str]],
        deleted_sleepers: list[str],
        sleeping: int,
        look: Outlook | None = None,
    ) -> None:
        ref = spec.ref
        counts = {
            "woken": len(woken),
            "wake_failed": len(wake_failed),
            "slept": len(slept),
            "sleep_failed": len(sleep_failed),
            "deleted": len(deleted_sleepers),
        }
        if self.observer is not None:
            for action, n in counts.items():
                if n:
                    self.observer.observe_sleeper_action(ref, action, n)
        budget = spec.policy.sleep.max_sleeping if spec.policy.sleep is not None else 0
        out: list[tuple[str, str, bool]] = []
        if woken:
            cold = acts.start + len(wake_failed)
            out.append(
                (
                    "ReplicasWoken",
                    f"woke {len(woken)} sleeper(s) ({_names(woken)}) instead of a cold start; "
                    f"cold-starting {cold}; {sleeping} asleep",
                    False,
                )
            )
        if slept:
            out.append(
                (
                    "ReplicasSlept",
                    f"put {len(slept)} replica(s) to sleep ({_names(slept)}); {sleeping} asleep "
                    f"(maxSleeping {budget})",
                    False,
                )
            )
        if deleted_sleepers and acts.released and look is not None:
            out.append(
                (
                    "SleepersReleased",
                    f"deleting {len(deleted_sleepers)} sleeper(s) ({_names(deleted_sleepers)}) "
                    f"after {look.quiet_s:.0f} s quiet: {look.message}",
                    False,
                )
            )
        elif deleted_sleepers:
            ttl = spec.policy.sleep.ttl_seconds if spec.policy.sleep is not None else None
            why = f"ttlSeconds {ttl:g}, maxSleeping {budget}" if ttl else f"maxSleeping {budget}"
            out.append(
                (
                    "SleepersDeleted",
                    f"deleting {len(deleted_sleepers)} sleeper(s) ({_names(deleted_sleepers)}): "
                    f"past {why} or not waking",
                    False,
                )
            )
        now = self.wall()
        if wake_failed and self._failure_events.allow((ref, "wake"), "WakeFailed", now):
            name, err = wake_failed[0]
            out.append(
                (
                    "WakeFailed",
                    f"{len(wake_failed)} sleeper(s) did not wake ({name}: {err}); cold-starting "
                    f"as many instead; a sleeper is deleted after {MAX_WAKE_FAILURES} failed wakes",
                    True,
                )
            )
        if sleep_failed and self._failure_events.allow((ref, "sleep"), "SleepFailed", now):
            name, err = sleep_failed[0]
            out.append(
                (
                    "SleepFailed",
                    f"{len(sleep_failed)} replica(s) not put to sleep ({name}: {err}); kept "
                    "awake when the engine says so, retried at the next scale-down",
                    True,
                )
            )
        for reason, message, warning in out:
            (log.warning if warning else log.info)(
                "sleepers", target=str(ref), reason=reason, message=message
            )
            if self.events is not None:
                try:
                    await self.events.emit(spec, reason, message, warning=warning)
                except AutoscalerError as err:
                    log.warning("sleeper event not written", target=str(ref), error=str(err))

    def forget(self, ref: TargetRef) -> None:
        self._marks.pop(ref, None)
        self._quiet_since.pop(ref, None)
        self._gaps.pop(ref, None)
        self._outlook.pop(ref, None)
        self._kept.pop(ref, None)
        self._wake_failures.pop(ref, None)
        for what in ("wake", "sleep"):
            self._failure_events.reset((ref, what))


def _cost(value: int) -> dict[str, str | None]:
    return {POD_DELETION_COST_ANNOTATION: str(value)}


def _names(names: Sequence[str], most: int = 5) -> str:
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")
