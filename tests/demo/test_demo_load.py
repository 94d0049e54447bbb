"""The demo's load and the model at zero, piece by piece: a ramp of long prompts whose
rate rises, a step on top of its peak, per-phase SLO lines, the zero model's summary line,
and the EndpointSlice each Ready pod of the model at zero publishes for the activator."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.commands.demo import _summary_line
from autoscaler.demo.compare import phase_line
from autoscaler.demo.load import (
    PROMPT_MEDIAN_TOKENS,
    RAMP_PEAK_PER_S,
    RAMP_S,
    STEP_S,
    demo_load,
    ramp_requests,
)
from autoscaler.demo.runtime import EmulatorRuntime
from autoscaler.demo.zero import ZERO_POLICY
from autoscaler.emulator.fleet import EmulatorFleet
from autoscaler.sim.traces import from_arrays
from tests.support.waiting import until


def test_the_ramp_rises_to_its_peak_with_long_prompts_that_fit_the_context() -> None:
    ramp = ramp_requests(RAMP_S, 0.5, RAMP_PEAK_PER_S, hold_s=STEP_S)
    quarter = RAMP_S / 4
    first = np.count_nonzero(ramp.arrival_s < quarter) / quarter
    last = np.count_nonzero((ramp.arrival_s >= 3 * quarter) & (ramp.arrival_s < RAMP_S)) / quarter
    held = np.count_nonzero(ramp.arrival_s >= RAMP_S) / STEP_S
    assert last > 3 * first
    assert 0.8 * RAMP_PEAK_PER_S < held < 1.2 * RAMP_PEAK_PER_S
    assert np.median(ramp.prompt_tokens) > 0.9 * PROMPT_MEDIAN_TOKENS
    assert int((ramp.prompt_tokens + ramp.output_tokens).max()) <= 8192


def test_the_burst_arrives_as_a_step_after_the_ramp_and_phases_follow_the_clock() -> None:
    burst = from_arrays("burst", [0.0, 1.0, STEP_S - 1, STEP_S + 5], [11, 12, 13, 14], [1] * 4)
    load = demo_load(burst)
    short = load.trace.prompt_tokens < 100  # the burst's requests (the ramp's are long)
    assert sorted(load.trace.prompt_tokens[short].tolist()) == [11, 12, 13]  # first STEP_S s
    assert float(load.trace.arrival_s[short].min()) == RAMP_S
    assert [load.phase(t) for t in (0.0, RAMP_S - 0.1, RAMP_S, RAMP_S + STEP_S)] == [
        "ramp",
        "ramp",
        "step",
        "after",
    ]


def _fleet(ramp: float | None, step: float) -> dict[str, Any]:
    phases: dict[str, Any] = {"step": {"requests": 10, "slo_attainment": step}}
    if ramp is not None:
        phases["ramp"] = {"requests": 10, "slo_attainment": ramp}
    return {"phases": phases}


def test_phase_line_gives_each_fleets_attainment_or_nothing_when_one_is_unknown() -> None:
    fleets = {"ours": _fleet(0.9, 0.1), "keda": _fleet(0.5, 0.05)}
    assert phase_line(fleets, "ramp") == "ramp: ours 90.0%, keda 50.0%"
    assert phase_line({"ours": _fleet(None, 0.1), "keda": _fleet(0.5, 0.0)}, "ramp") is None


def test_summary_says_when_the_held_request_was_answered_and_when_it_went_back_to_zero() -> None:
    zero = {"model": "m", "sent_at_s": 30.0, "answered_at_s": 91.2, "held_s": 60.5}
    s: dict[str, Any] = {
        "headline": None,
        "decisions": 1,
        "scale_ups": 0,
        "scale_downs": 0,
        "max_replicas": 1,
        "fleets": {},
        "zero": {**zero, "back_to_zero_at_s": 160.0},
    }
    text = _summary_line(s, Path("s.json"), Path("d.log"))
    assert "m: request held at t=30 s, answered at t=91 s (held 60.5 s)" in text
    assert "back to 0 replicas at t=160 s" in text
    assert "burst" not in text  # no burst in the run: no burst line
    s["zero"] |= {
        "burst_sent_at_s": 170.0,
        "burst": 12,
        "woken": 3,
        "woken_in_s": 0.7,
        "burst_answered": 12,
        "burst_held_p50_s": 0.6,
        "burst_held_max_s": 0.8,
    }
    text = _summary_line(s, Path("s.json"), Path("d.log"))
    assert (
        "burst of 12 at t=170 s: 3 sleepers woken in 0.7 s, 12 answered, held p50 0.6 s / max 0.8 s"
    ) in text
    s["zero"] = {"model": "m", "answered_at_s": None, "error": "HTTP 404: nope"}
    assert "m: not answered in the run (HTTP 404: nope)" in _summary_line(
        s, Path("s.json"), Path("d.log")
    )


def test_the_zero_models_policy_may_idle_to_zero() -> None:
    assert ZERO_POLICY["minReplicaCount"] == 0
    assert ZERO_POLICY["sleep"]["maxSleeping"] >= 2  # idle replicas sleep, a burst wakes them
    assert any(m["signal"] == "waiting" for m in ZERO_POLICY["metrics"])  # held -> waiting


class _Slices:
    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}

    def create(self, plural: str, obj: dict[str, Any], group: str = "") -> dict[str, Any]:
        assert (plural, group) == ("endpointslices", "discovery.k8s.io")
        self.objects[(obj["metadata"]["namespace"], obj["metadata"]["name"])] = obj
        return obj

    def delete(self, plural: str, namespace: str | None, name: str, group: str = "") -> None:
        del self.objects[(namespace or "", name)]


def _pod(name: str, app: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "demo", "labels": {"app": app}}}


async def test_a_ready_pod_of_the_model_at_zero_publishes_its_slice_and_withdraws_it() -> None:
    fleet = EmulatorFleet(speed=1000.0)
    runtime = EmulatorRuntime(fleet, cold_start_s=0.0, apps=frozenset({"zero", "other"}))
    runtime.sliced, runtime.slices = frozenset({"zero"}), (slices := _Slices())
    runtime.models["zero"] = "zero"
    try:
        await runtime.start(_pod("zero-1", "zero"))
        await runtime.start(_pod("other-1", "other"))
        assert list(slices.objects) == [("demo", "zero-1")]  # only the model at zero
        obj = slices.objects[("demo", "zero-1")]
        replica = fleet.replicas["zero-1"]
        assert obj["metadata"]["labels"] == {"kubernetes.io/service-name": "zero"}
        assert obj["ports"][0]["port"] == replica.port
        # the pod behind the address: the activator leaves a sleeper out by its name
        assert obj["endpoints"][0]["targetRef"] == {
            "kind": "Pod",
            "namespace": "demo",
            "name": "zero-1",
        }
        assert replica.config.model == "zero"  # the name the activator routes by
        stopping = asyncio.create_task(runtime.stop(_pod("zero-1", "zero")))
        await until(lambda: not slices.objects, 5, "the slice withdrawn as the pod leaves")
        await stopping
    finally:
        await fleet.stop_all()


def test_the_zero_models_moments_print_within_80_columns_headless_and_under_the_live_table() -> (
    None
):
    from rich.console import Console

    from autoscaler.demo.view import COLUMNS, DemoView

    titles = {"ours": "ours", "keda": "keda"}
    note = "t=30 s: request to mistral-7b (at 0 replicas) held by the activator"
    out = io.StringIO()
    with DemoView(out, False, titles=titles, cold_start_s=60) as view:
        view.note(note)
    assert f"zero: {note}" in out.getvalue()
    assert max(len(line) for line in out.getvalue().splitlines()) <= COLUMNS
    live = DemoView(io.StringIO(), True, titles=titles, cold_start_s=60)
    live.note(note)
    shown = io.StringIO()
    Console(file=shown, width=COLUMNS, force_terminal=False).print(live._table())
    assert "held by the activator" in shown.getvalue()
