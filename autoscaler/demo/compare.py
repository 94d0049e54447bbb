"""The side-by-side record of both fleets: one sample per real second, in emulated time.

TTFT is what the load generator's clients saw (first token of requests that ended in the
last `TTFT_WINDOW_S` emulated seconds), so both fleets are measured the same way whatever
their autoscaler scrapes. GPUs are those the fleet's pods request (pause pods and Pending
pods included: what is billed).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from autoscaler.control.state import ControllerState
from autoscaler.demo.cluster import gpus_held
from autoscaler.demo.fleets import FleetSpec
from autoscaler.demo.runtime import EmulatedClock, EmulatorRuntime
from autoscaler.domain import TargetRef
from autoscaler.emulator.loadgen import RequestResult
from autoscaler.kube.localapi.server import LocalKubeAPI

TTFT_WINDOW_S = 30.0  # emulated
SLO_TTFT_S = 0.5  # emulated; the simulator's default TTFT SLO (docs/simulator.md)
SAMPLES = 900


@dataclass(frozen=True)
class FleetSample:
    replicas: int | None  # the Deployment's spec.replicas
    ready: int
    gpus: int
    waiting: int
    ttft_p95_s: float | None  # emulated seconds; None: no request ended in the window
    reason: str | None
    message: str | None
    mode: str | None


class Comparison:
    def __init__(
        self,
        fleets: tuple[FleetSpec, ...],
        namespace: str,
        kube: LocalKubeAPI,
        runtime: EmulatorRuntime,
        state: ControllerState,
        clock: EmulatedClock,
        phase: Callable[[float], str] | None = None,
    ) -> None:
        self.fleets = fleets
        self.phase = phase  # emulated seconds into the load -> the load's phase name
        self.namespace = namespace
        self.kube = kube
        self.runtime = runtime
        self.state = state
        self.clock = clock
        self.ttfts: dict[str, deque[tuple[float, float]]] = {f.key: deque() for f in fleets}
        self.samples: deque[tuple[float, dict[str, FleetSample]]] = deque(maxlen=SAMPLES)
        self.ttft_all: dict[str, list[float]] = {f.key: [] for f in fleets}
        # Outcomes as requests end: the load counts even if a generator's final report
        # is not in by the end of the run (a very busy machine).
        self.outcomes: dict[str, dict[str, int]] = {}
        # Per fleet and load phase: first-token times and failures (SLO per phase).
        self.by_phase: dict[str, dict[str, tuple[list[float], list[int]]]] = {
            f.key: {} for f in fleets
        }

    def on_result(self, key: str, result: RequestResult) -> None:
        counts = self.outcomes.setdefault(key, {})
        counts[result.outcome] = counts.get(result.outcome, 0) + 1
        speed = self.clock.fleet.speed
        phase = self.by_phase[key].setdefault(
            self.phase(result.scheduled_s * speed) if self.phase else "all", ([], [0])
        )
        if result.outcome == "failed":
            phase[1][0] += 1
        if result.ttft_s is not None:
            ttft_emu = result.ttft_s * speed
            self.ttfts[key].append((self.clock.now(), ttft_emu))
            self.ttft_all[key].append(ttft_emu)
            phase[0].append(ttft_emu)

    def _ttft_p95(self, key: str, now: float) -> float | None:
        window = self.ttfts[key]
        while window and window[0][0] < now - TTFT_WINDOW_S:
            window.popleft()
        return float(np.quantile([v for _, v in window], 0.95)) if window else None

    def _fleet(self, f: FleetSpec, now: float) -> FleetSample:
        dep = self.kube.get("deployments", self.namespace, f.name, group="apps")
        status = self.state.status(TargetRef(self.namespace, f.name))
        last = status.last_decision if status is not None else None
        replicas = self.runtime.replicas(f.name)
        return FleetSample(
            replicas=int(dep["spec"]["replicas"]) if dep is not None else None,
            ready=sum(1 for r in replicas if r.ready),
            gpus=gpus_held(self.kube, f.key),
            waiting=sum(r.engine.replica.num_waiting for r in replicas),
            ttft_p95_s=self._ttft_p95(f.key, now),
            reason=str(last.reason) if last is not None else None,
            message=last.message if last is not None else None,
            mode=status.spec.mode if status is not None else None,
        )

    def sample(self) -> tuple[float, dict[str, FleetSample]]:
        now = self.clock.now()
        row = (now, {f.key: self._fleet(f, now) for f in self.fleets})
        self.samples.append(row)
        return row

    def feed(self) -> dict[str, Any]:
        """The dashboard's side-by-side block: one series per fleet and quantity."""
        out: dict[str, Any] = {
            "fleets": [
                {"key": f.key, "title": f.title, "target": f"{self.namespace}/{f.name}"}
                for f in self.fleets
            ],
            "time": "emulated seconds since the demo started",
            "ttft_window_s": TTFT_WINDOW_S,
            "t": [t for t, _ in self.samples],
        }
        for f in self.fleets:
            rows = [s[f.key] for _, s in self.samples]
            out[f.key] = {
                "replicas": [r.replicas for r in rows],
                "ready": [r.ready for r in rows],
                "gpus": [r.gpus for r in rows],
                "waiting": [r.waiting for r in rows],
                "ttft_p95_s": [r.ttft_p95_s for r in rows],
            }
        return out

    def totals(self) -> dict[str, Any]:
        """Per fleet over the whole run: GPU-seconds (emulated), TTFT quantiles, max GPUs."""
        out: dict[str, Any] = {}
        times = [t for t, _ in self.samples]
        for f in self.fleets:
            gpus = [s[f.key].gpus for _, s in self.samples]
            gpu_s = sum(g * (b - a) for g, a, b in zip(gpus, times, times[1:], strict=False))
            ttft = self.ttft_all[f.key]
            out[f.key] = {
                "title": f.title,
                "gpu_seconds": round(gpu_s, 1),
                "max_gpus": max(gpus, default=None),
                "max_replicas": max(
                    (s[f.key].replicas or 0 for _, s in self.samples), default=None
                ),
                "requests_with_first_token": len(ttft),
                "ttft_p50_s": round(float(np.quantile(ttft, 0.5)), 3) if ttft else None,
                "ttft_p95_s": round(float(np.quantile(ttft, 0.95)), 3) if ttft else None,
                "outcomes": dict(self.outcomes.get(f.key, {})),
                "slo_ttft_s": SLO_TTFT_S,
                "slo_attainment": slo_attainment(
                    ttft, self.outcomes.get(f.key, {}).get("failed", 0)
                ),
                "phases": {
                    name: {
                        "requests": len(ttfts) + failed[0],
                        "slo_attainment": slo_attainment(ttfts, failed[0]),
                    }
                    for name, (ttfts, failed) in sorted(self.by_phase[f.key].items())
                },
            }
        return out


def slo_attainment(ttfts_s: list[float], failed: int, slo_s: float = SLO_TTFT_S) -> float | None:
    """Share of requests whose first token came within ``slo_s``; a failed request is a
    miss. None when no request ended."""
    total = len(ttfts_s) + failed
    if total == 0:
        return None
    return round(sum(1 for t in ttfts_s if t <= slo_s) / total, 4)


def headline(fleets: dict[str, dict[str, Any]]) -> str | None:
    """One line: each fleet's TTFT-SLO attainment and GPU-hours, and ours against KEDA's."""
    ours, keda = fleets.get("ours"), fleets.get("keda")
    if not ours or not keda or ours.get("slo_attainment") is None:
        return None
    if keda.get("slo_attainment") is None or not keda.get("gpu_seconds"):
        return None
    slo = ours["slo_ttft_s"]
    gpu_ratio = ours["gpu_seconds"] / keda["gpu_seconds"]
    points = 100 * (ours["slo_attainment"] - keda["slo_attainment"])
    return (
        f"TTFT <= {slo:g} s: ours {100 * ours['slo_attainment']:.1f}% on "
        f"{ours['gpu_seconds'] / 3600:.2f} GPU-h, keda {100 * keda['slo_attainment']:.1f}% on "
        f"{keda['gpu_seconds'] / 3600:.2f} GPU-h: ours at {gpu_ratio:.2f}x the GPU-hours, "
        f"{points:+.1f} points"
    )


def phase_line(fleets: dict[str, dict[str, Any]], phase: str) -> str | None:
    """One load phase's TTFT-SLO attainment per fleet, e.g. ``ramp: ours 91.2%, keda
    70.4%`` (None when a fleet has no request that ended in the phase)."""
    parts = []
    for key, f in fleets.items():
        got = (f.get("phases") or {}).get(phase) or {}
        if got.get("slo_attainment") is None:
            return None
        parts.append(f"{key} {100 * got['slo_attainment']:.1f}%")
    return f"{phase}: " + ", ".join(parts)
