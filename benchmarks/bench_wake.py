"""Wake a sleeper or cold-start a pod: what a request held at zero awake waits for its
first token (issue 38).

Side by side on the same harness, all real sockets and real processes' code paths in one
process: the local Kubernetes API runs the Deployment's pods as emulated vLLM replicas
(`autoscaler.demo.runtime.EmulatorRuntime`: each Ready pod publishes an EndpointSlice),
the controller (`autoscaler.app.Controller`, as ``llm-autoscaler run``) scales the target
to zero awake after a 1 s idle period, and the activator (as ``llm-autoscaler
activator``, reading the EndpointSlices and the sleeping pods through its informers)
fronts it. Each repetition waits until the target is at zero awake and the activator
sees no Ready endpoint, then sends one streamed completion and times it, at the client,
to its first token.

Rows (emulated durations at speed 1, so they pass in real time; from the calibration the
simulator uses, `autoscaler.sim.cluster.COLD_START_PRESETS` and
`autoscaler.sim.serverless.SLEEP_PRESETS`, docs/simulator.md):

- ``sleeper woken (median wake)``: ``sleep: {maxSleeping: 1}``; the replica sleeps when
  idle and the held request's poke wakes it; the wake takes 0.5 s (8B, Level 1 median);
- ``sleeper woken (p90 wake)``: the same, 3 s (8B p90);
- ``cold start (warm node)``: no ``sleep``; the pod is deleted when idle and the held
  request's poke creates one, Ready after 57 s (8B on a warm node with a cached image,
  local weights and a compile cache: the sum of the phase medians).

The ratio is the cold start's p50 over the median-wake sleeper's p50. Prints a table and
writes ``benchmarks/results/wake.json``.

    .venv/bin/python benchmarks/bench_wake.py [--quick] [--reps 5] [--cold-reps 2]

``--quick`` (the smoke test) shortens the cold start to 3 s: its ratio is not the
calibrated one.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from autoscaler.activator.config import parse_config
from autoscaler.activator.runtime import ActivatorProcess
from autoscaler.app import Controller
from autoscaler.demo.cluster import deployment, node
from autoscaler.demo.runtime import EmulatorRuntime
from autoscaler.domain import TargetRef
from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.server import ReplicaConfig
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.logging import configure_logging
from autoscaler.names import AWAKE_LABEL, CRD_GROUP, CRD_PLURAL, SLEEPING_LABEL
from autoscaler.policy.schema import load_policy
from autoscaler.settings import GrpcSettings, HttpSettings, Settings
from autoscaler.sim.cluster import COLD_START_PRESETS
from autoscaler.sim.report import publish
from autoscaler.sim.serverless import SLEEP_PRESETS
from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "wake.json"
NS, APP, POOL = "llm", "llama", "bench"
COLD_START_S = COLD_START_PRESETS["default"].warm_median_s  # 57 s
WAKE_MEDIAN_S = SLEEP_PRESETS["8b"].wake.median_s  # 0.5 s
WAKE_P90_S = SLEEP_PRESETS["8b"].wake.p90_s  # 3 s
QUICK_COLD_START_S = 3.0
PROMPT_TOKENS, OUTPUT_TOKENS = 200, 16


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    sleep: bool
    wake_s: float
    cold_start_s: float
    reps: int


def policy(sleep: bool) -> dict[str, Any]:
    return {
        "minReplicaCount": 0,
        "maxReplicaCount": 1,
        "pollingInterval": 0.2,
        "scaleToZero": {"enabled": True, "idlePeriodSeconds": 1},
        "metrics": [{"signal": "waiting", "type": "AverageValue", "target": 4}],
        "prediction": None,
        **({"sleep": {"maxSleeping": 1}} if sleep else {}),
    }


class Harness:
    """One row's cluster: local API, emulated pods, controller, activator."""

    def __init__(self, row: Row) -> None:
        self.row = row
        config = ReplicaConfig(wake_s=row.wake_s, model=APP)
        self.fleet = EmulatorFleet(speed=1.0, defaults=config)
        self.runtime = EmulatorRuntime(
            self.fleet, row.cold_start_s, apps=frozenset({APP}), pre_stop_s=0.0
        )
        self.runtime.models[APP] = APP
        self.runtime.sleep_mode = frozenset({APP}) if row.sleep else frozenset()
        self.kube = LocalKubeAPI(controller=True, runtime=self.runtime)
        self.runtime.sliced, self.runtime.slices = frozenset({APP}), self.kube
        self.ctl: Controller | None = None
        self.act: ActivatorProcess | None = None
        self._apis: list[Any] = []

    async def start(self) -> None:
        await self.kube.start()
        self.kube.create("nodes", node("gpu-1", POOL, 2))
        dep = deployment(NS, APP, POOL, replicas=1, template_labels={AWAKE_LABEL: "true"})
        self.kube.create("deployments", dep, group="apps")
        spec = TargetSpec(
            ref=TargetRef(NS, APP),
            policy=load_policy(policy(self.row.sleep)),
            scale_target_ref=ScaleTargetRef(name=APP),
        )
        self.kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
        settings = Settings(
            http=HttpSettings(host="127.0.0.1", port=0),
            grpc=GrpcSettings(host="127.0.0.1", port=0),
            tick_interval_s=0.2,
            lease_duration_s=1.5,
            namespace=NS,
            leader_election=False,
        )
        api = api_client_for(self.kube.url)
        self._apis.append(api)
        self.ctl = Controller(settings, api, identity="bench-wake")
        await self.ctl.start()
        assert self.ctl.http is not None
        config = {
            "controller": {"url": self.ctl.http.url, "resendS": 0.2},
            "targets": [{"model": APP, "namespace": NS, "service": APP, "autoscaler": APP}],
        }
        kube_api = api_client_for(self.kube.url)
        self._apis.append(kube_api)
        self.act = ActivatorProcess(
            parse_config(config, "bench activator"),
            host="127.0.0.1",
            port=0,
            identity="bench-activator",
            kube_api=kube_api,
            grace_s=1.0,
        )
        await self.act.start()

    async def stop(self) -> None:
        if self.act is not None:
            await self.act.stop()
        if self.ctl is not None:
            await self.ctl.stop()
        for api in self._apis:
            await api.close()
        self.runtime.stopping = True
        await self.fleet.stop_all(drain=False)
        await self.kube.close()

    def _pods(self) -> list[dict[str, Any]]:
        return [
            p
            for p in self.kube.list_objects("pods", NS)
            if not p["metadata"].get("deletionTimestamp")
        ]

    def at_zero_awake(self) -> bool:
        """Asleep (engine and label) or gone, and the activator routes nowhere."""
        assert self.act is not None and self.act.activator is not None
        gate = self.act.activator.gates[f"{NS}/{APP}"]
        if gate.ready:
            return False
        pods = self._pods()
        if not self.row.sleep:
            return not pods and not self.fleet.replicas
        asleep = [
            p for p in pods if (p["metadata"].get("labels") or {}).get(SLEEPING_LABEL) == "true"
        ]
        engines = [self.fleet.replicas.get(p["metadata"]["name"]) for p in asleep]
        return len(pods) == len(asleep) == 1 and all(
            e is not None and e.sleep.is_sleeping for e in engines
        )

    async def first_token_s(self, http: aiohttp.ClientSession) -> float:
        """One streamed completion through the activator: seconds to its first token."""
        assert self.act is not None
        body = {
            "model": APP,
            "prompt": "w " * PROMPT_TOKENS,
            "max_tokens": OUTPUT_TOKENS,
            "ignore_eos": True,
            "stream": True,
        }
        start = time.perf_counter()
        first: float | None = None
        async with http.post(self.act.url + "/v1/completions", json=body) as resp:
            if resp.status != 200:
                raise RuntimeError(f"HTTP {resp.status}: {(await resp.text())[:200]}")
            async for line in resp.content:
                text = line.decode().strip()
                if first is None and text.startswith("data: {") and '"text"' in text:
                    first = time.perf_counter() - start
        if first is None:
            raise RuntimeError("the stream ended without a token")
        return first


async def until(pred: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not reached in {timeout_s:.0f} s")
        await asyncio.sleep(0.05)


async def run_row(row: Row) -> list[float]:
    h = Harness(row)
    out: list[float] = []
    try:
        await h.start()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
            for i in range(row.reps):
                await until(h.at_zero_awake, 60 + 2 * row.cold_start_s, "zero awake")
                await asyncio.sleep(0.3)  # settled: the activator's held report is 0
                ttft = await h.first_token_s(http)
                out.append(ttft)
                print(f"  {row.name}: rep {i + 1}/{row.reps}: {ttft:.3f} s", file=sys.stderr)
    finally:
        await h.stop()
    return out


def summary(row: Row, samples: list[float]) -> dict[str, Any]:
    return {
        "row": row.name,
        "wake_s": row.wake_s if row.sleep else None,
        "cold_start_s": None if row.sleep else row.cold_start_s,
        "reps": len(samples),
        "ttft_p50_s": round(statistics.median(samples), 3),
        "ttft_min_s": round(min(samples), 3),
        "ttft_max_s": round(max(samples), 3),
        # what the path adds to the emulated wake or cold start (control + routing)
        "overhead_p50_s": round(
            statistics.median(samples) - (row.wake_s if row.sleep else row.cold_start_s), 3
        ),
        "samples_s": [round(s, 4) for s in samples],
    }


def markdown(rows: list[dict[str, Any]], ratio: float) -> str:
    lines = [
        "| held at zero awake, then | emulated wait (s) | first token p50 (s) | min / max (s) "
        "| path overhead p50 (s) | n |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        wait = r["wake_s"] if r["wake_s"] is not None else r["cold_start_s"]
        lines.append(
            f"| {r['row']} | {wait:g} | {r['ttft_p50_s']:.2f} | {r['ttft_min_s']:.2f} / "
            f"{r['ttft_max_s']:.2f} | {r['overhead_p50_s']:.2f} | {r['reps']} |"
        )
    lines.append("")
    lines.append(f"cold start p50 / woken sleeper (median wake) p50: **{ratio:.0f}x**")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="3 s cold start, 2 / 1 repetitions")
    ap.add_argument("--reps", type=int, default=5, help="repetitions per sleeper row")
    ap.add_argument("--cold-reps", type=int, default=2, help="repetitions of the cold start")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    for name in ("reps", "cold_reps"):
        if getattr(args, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: value {getattr(args, name)} must be >= 1")
    configure_logging(fmt="console", level="WARNING")
    reps, cold_reps = (2, 1) if args.quick else (args.reps, args.cold_reps)
    cold_s = QUICK_COLD_START_S if args.quick else COLD_START_S
    rows = [
        Row("sleeper woken (median wake)", True, WAKE_MEDIAN_S, cold_s, reps),
        Row("sleeper woken (p90 wake)", True, WAKE_P90_S, cold_s, reps),
        Row("cold start (warm node)", False, WAKE_MEDIAN_S, cold_s, cold_reps),
    ]
    results = [summary(row, asyncio.run(run_row(row))) for row in rows]
    ratio = results[2]["ttft_p50_s"] / results[0]["ttft_p50_s"]
    doc = {
        "benchmark": "wake",
        "command": "python benchmarks/bench_wake.py" + (" --quick" if args.quick else ""),
        "quick": args.quick,
        "calibration": {
            "cold_start_warm_node_median_s": COLD_START_S,
            "wake_8b_median_s": WAKE_MEDIAN_S,
            "wake_8b_p90_s": WAKE_P90_S,
            "source": "autoscaler/sim/cluster.py COLD_START_PRESETS['default'], "
            "autoscaler/sim/serverless.py SLEEP_PRESETS['8b'] (docs/simulator.md)",
        },
        "rows": results,
        "cold_over_wake_p50": round(ratio, 1),
        "markdown": markdown(results, ratio),
    }
    publish(args.out, doc)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
