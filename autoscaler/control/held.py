"""Requests held (and in flight) at the activators, as the controller sees them.

Each activator replica pushes its own counts per target (``POST /v1/activator/held``) on
every change and again every second or so, with a time-to-live. `HeldCounts` keeps the
latest report per activator, sums the live ones per target and forgets a reporter whose
report is older than its TTL (a crashed activator) or that said it is leaving. Knative's
activator works the same way (stats pushed to the autoscaler, keyed by pod).

Two effects on the control loop:

- the first held request for a target at zero (summed held going 0 -> > 0) pokes the loop:
  that target is reconciled at once, not at its next tick (`ControlLoop.poke`);
- `adjust` adds the held count to the target's ``waiting`` signal (so the policy
  sizes the scale-up for the queue) and keeps ``running`` at least the activators' in-flight
  count (so a target with a response still streaming is active and is never scaled to
  zero). At zero pods nothing else can be read, so the held count *is* the ``waiting``
  signal there; with pods whose ``waiting`` is unread it stays missing (never zero).
  The counts also go into the observation (``held``, ``in_flight``): the policy core sizes
  the first scale-up for the held queue and never goes to zero while either is non-zero.

A cold start is timed here, from the reports themselves (no tick in the measurement). It
starts when a target's held sum leaves zero. It is opened then if ``on_rise`` says the
target was at zero, or later by the loop's scale-up from zero (`scaled_from_zero`: a
request that arrived while the scale-down was still being written). It closes at the
first report in which an activator's ``forwarded`` counter (held requests ever handed to a
Ready pod) grows: ``on_answered(ref, held, after_s)`` then gets the most requests held
meanwhile and the seconds from the first held report to that one (what the
``ScaledFromZero`` Event says). A cold start whose held requests all left unanswered
(clients gone, 503 after the hold timeout) closes without a call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from autoscaler.control.clock import Clock, MonotonicClock
from autoscaler.control.ports import SignalReading, TargetView
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef

MAX_TTL_S = 300.0


@dataclass(frozen=True, slots=True)
class HeldReport:
    """One activator's counts for one target."""

    ref: TargetRef
    held: int
    in_flight: int
    forwarded: int = 0  # held requests ever handed to a Ready pod (cumulative)


@dataclass(slots=True)
class _Reporter:
    t: float
    ttl_s: float
    counts: dict[TargetRef, tuple[int, int, int]]  # held, in flight, forwarded


@dataclass(slots=True)
class _ColdStart:
    t0: float
    peak_held: int


class HeldCounts:
    def __init__(
        self,
        clock: Clock | None = None,
        on_rise: Callable[[TargetRef], object] | None = None,
        on_answered: Callable[[TargetRef, int, float], object] | None = None,
    ) -> None:
        self.clock = clock or MonotonicClock()
        # called when a target's summed held count leaves zero; a true result means the
        # target was at zero: a cold start opens (module docstring)
        self.on_rise = on_rise
        self.on_answered = on_answered
        self._reporters: dict[str, _Reporter] = {}
        self._cold: dict[TargetRef, _ColdStart] = {}
        self._risen_at: dict[TargetRef, float] = {}  # when the held sum last left zero
        self.reports = 0

    def _live(self) -> Iterable[_Reporter]:
        now = self.clock.now()
        stale = [k for k, r in self._reporters.items() if now - r.t > r.ttl_s]
        for k in stale:
            del self._reporters[k]
        return self._reporters.values()

    def totals(self, ref: TargetRef) -> tuple[int, int]:
        """(held, in flight) summed over the live activators."""
        held = in_flight = 0
        for r in self._live():
            h, f, _ = r.counts.get(ref, (0, 0, 0))
            held += h
            in_flight += f
        return held, in_flight

    def report(
        self,
        activator: str,
        counts: Iterable[HeldReport],
        *,
        ttl_s: float,
        leaving: bool = False,
    ) -> list[TargetRef]:
        """Replace ``activator``'s counts; returns the targets whose held sum left zero
        (after calling ``on_rise`` for each)."""
        self.reports += 1
        new = {
            c.ref: (c.held, c.in_flight, c.forwarded)
            for c in counts
            if c.held or c.in_flight or c.forwarded
        }
        old = self._reporters.get(activator)
        touched = set(new) | (set(old.counts) if old is not None else set())
        before = {ref: self.totals(ref)[0] for ref in touched}
        if leaving:
            self._reporters.pop(activator, None)
        else:
            ttl = min(max(ttl_s, 0.0), MAX_TTL_S)
            self._reporters[activator] = _Reporter(self.clock.now(), ttl, new)
        risen = [ref for ref in touched if before[ref] == 0 and self.totals(ref)[0] > 0]
        for ref in touched:
            if ref in risen:
                self._risen_at[ref] = self.clock.now()
            elif self.totals(ref)[0] == 0:
                self._risen_at.pop(ref, None)
        if self.on_rise is not None:
            for ref in risen:
                if self.on_rise(ref) is True and ref not in self._cold:
                    self._cold[ref] = _ColdStart(self.clock.now(), self.totals(ref)[0])
        for ref in touched & self._cold.keys():
            self._cold_step(ref, old, new)
        return risen

    def scaled_from_zero(self, ref: TargetRef) -> None:
        """The loop scaled ``ref`` from zero for held requests: open its cold start (from
        when the held sum left zero) unless one is open."""
        if ref not in self._cold:
            held = self.totals(ref)[0]
            if held > 0:
                t0 = self._risen_at.get(ref, self.clock.now())
                self._cold[ref] = _ColdStart(t0, held)

    def _cold_step(
        self,
        ref: TargetRef,
        old: _Reporter | None,
        new: dict[TargetRef, tuple[int, int, int]],
    ) -> None:
        """Advance ``ref``'s open cold start with one activator's report."""
        cold = self._cold[ref]
        held = self.totals(ref)[0]
        cold.peak_held = max(cold.peak_held, held)
        before = old.counts.get(ref, (0, 0, 0))[2] if old is not None else None
        after = new.get(ref, (0, 0, 0))[2]
        if before is not None and after > before:
            del self._cold[ref]
            if self.on_answered is not None:
                self.on_answered(ref, cold.peak_held, self.clock.now() - cold.t0)
        elif held == 0:
            del self._cold[ref]  # every held request left unanswered

    def snapshot(self) -> dict[str, object]:
        """What ``GET /v1/activator/held`` shows: per activator, per target."""
        live = list(self._live())
        now = self.clock.now()
        return {
            name: {
                "age_s": round(now - r.t, 3),
                "ttl_s": r.ttl_s,
                "targets": {
                    str(ref): {"held": h, "in_flight": f, "forwarded": n}
                    for ref, (h, f, n) in r.counts.items()
                },
            }
            for name, r in self._reporters.items()
            if r in live
        }

    def forget(self, ref: TargetRef) -> None:
        self._cold.pop(ref, None)
        self._risen_at.pop(ref, None)
        for r in self._reporters.values():
            r.counts.pop(ref, None)

    def adjust(self, ref: TargetRef, view: TargetView, reading: SignalReading) -> SignalReading:
        """``reading`` with the activators' counts added (see the module docstring)."""
        held, in_flight = self.totals(ref)
        if not held and not in_flight:
            return reading
        signals = dict(reading.signals)
        if held:
            if "waiting" in signals:
                signals["waiting"] += held
            elif view.ready_replicas == 0 and not view.pods:
                # nothing else to read: every waiting request is held at an activator
                signals["waiting"] = float(held)
        if in_flight and "running" in signals:
            signals["running"] = max(signals["running"], float(in_flight))
        return replace(reading, signals=signals, held=held, in_flight=in_flight)


def poke_at_zero(
    state: ControllerState, poke: Callable[[TargetRef], object]
) -> Callable[[TargetRef], bool]:
    """``on_rise`` for the controller: poke the loop for a target whose last decision saw
    or asked for 0 replicas, whose last write was 0 (a scale-down to zero written and not
    yet published: the request raced it), or that has no decision yet; return True for it
    (a cold start opens). A target already running gets its held count at its next tick."""

    def on_rise(ref: TargetRef) -> bool:
        st = state.targets.get(ref)
        if st is None:
            return False
        d = st.last_decision
        if (
            d is None
            or d.current_replicas == 0
            or d.desired_replicas == 0
            or st.applied_replicas == 0
        ):
            poke(ref)
            return True
        return False

    return on_rise
