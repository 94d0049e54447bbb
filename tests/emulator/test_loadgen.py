"""The load generator: conservation, balancing, bounds, loopback-only, real trace replay."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.loadgen import LoadGenerator, LoadReport, check_loopback
from autoscaler.errors import ConfigError
from autoscaler.sim.traces import from_arrays, load_trace, speed_up

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"


def assert_conserved(report: LoadReport, scheduled: int) -> None:
    assert len(report.results) == scheduled
    assert [r.index for r in report.results] == list(range(scheduled))
    assert report.ok + report.failed + report.not_sent + report.count("cancelled") == scheduled
    for r in report.results:
        if r.outcome == "ok":
            assert r.status == 200 and r.completion_tokens == r.output_tokens
            assert r.latency_s is not None and r.sent_s is not None
        elif r.outcome == "failed":
            assert r.error
        else:
            assert r.sent_s is None and r.target is None


def uniform(n: int, span_s: float) -> list[float]:
    return [span_s * i / n for i in range(n)]


async def test_every_request_completes_or_is_counted_failed(fleet: EmulatorFleet) -> None:
    good = await fleet.start_replica("good")
    cold = await fleet.start_replica("cold", cold_start_s=3600.0)  # 503 throughout
    n = 30
    trace = from_arrays("t", uniform(n, 0.6), [20] * n, [10] * n)
    gen = LoadGenerator([good.url, cold.url], balance="round-robin", max_concurrency=8)
    report = await gen.run(trace)
    assert_conserved(report, n)
    assert report.ok == n // 2 and report.failed == n // 2
    assert {r.status for r in report.results if r.outcome == "failed"} == {503}
    assert report.per_target() == {good.url: n // 2, cold.url: n // 2}
    ok_ttft = [r.ttft_s for r in report.results if r.outcome == "ok"]
    assert all(t is not None and t > 0 for t in ok_ttft)
    summary = report.summary()
    assert summary["ok"] == n // 2 and summary["ttft_p50_s"] is not None


async def test_least_outstanding_avoids_the_busy_replica(fleet: EmulatorFleet) -> None:
    a = await fleet.start_replica("a")
    b = await fleet.start_replica("b")
    # Request 0 is long (~5 s of decoding); the short ones after it should all go to the
    # other replica while it runs. They are 0.5 s apart so each has ended before the next
    # is sent even on a loaded machine (else 1:1 ties rotate, by design).
    trace = from_arrays("t", [0.0, 0.5, 1.0, 1.5, 2.0, 2.5], [10] * 6, [800, 5, 5, 5, 5, 5])
    gen = LoadGenerator([a.url, b.url], balance="least-outstanding", stream=False)
    report = await gen.run(trace)
    assert_conserved(report, 6)
    busy = report.results[0].target
    assert all(r.target != busy for r in report.results[1:])


async def test_bounded_in_time_and_count(fleet: EmulatorFleet) -> None:
    rep = await fleet.start_replica("a")
    n = 40
    trace = from_arrays("t", uniform(n, 2.0), [10] * n, [2] * n)
    report = await LoadGenerator([rep.url], max_duration_s=0.5).run(trace)
    assert_conserved(report, n)
    assert 0 < report.not_sent < n and report.failed == 0
    assert all(r.scheduled_s >= 0.45 for r in report.results if r.outcome == "not-sent")
    counted = await LoadGenerator([rep.url], max_requests=7).run(trace)
    assert len(counted.results) == 7 and counted.ok == 7


async def test_stop_cuts_the_run_and_still_reports_every_request(fleet: EmulatorFleet) -> None:
    rep = await fleet.start_replica("a")
    n = 20
    # Long answers so some are in flight when stopped; the rest are scheduled far later.
    trace = from_arrays("t", [0.0] * 4 + [3600.0] * (n - 4), [10] * n, [4000] * n)
    stop = asyncio.Event()
    gen = LoadGenerator([rep.url])
    run = asyncio.create_task(gen.run(trace, stop=stop))
    while sum(gen.outstanding.values()) < 4:  # noqa: ASYNC110 (all four in flight)
        await asyncio.sleep(0.01)
    stop.set()
    report = await asyncio.wait_for(run, 10)
    assert_conserved(report, n)
    assert report.count("cancelled") == 4 and report.not_sent == n - 4
    assert report.summary()["cancelled"] == 4


async def test_callable_targets_follow_the_ready_set(fleet: EmulatorFleet) -> None:
    n = 6
    trace = from_arrays("t", uniform(n, 0.1), [10] * n, [3] * n)
    gen = LoadGenerator(fleet.ready_urls, max_concurrency=4)
    empty = await gen.run(trace)
    assert_conserved(empty, n)
    assert empty.failed == n and {r.error for r in empty.results} == {"no ready target"}
    await fleet.start_replica("a")
    full = await gen.run(trace)
    assert full.ok == n


def test_refuses_non_loopback_targets() -> None:
    for url in ("http://10.0.0.1:8000", "http://example.com", "ftp://127.0.0.1"):
        with pytest.raises(ConfigError, match="127.0.0.1"):
            LoadGenerator([url])
    assert check_loopback("http://localhost:8000/") == "http://localhost:8000"
    assert check_loopback("http://[::1]:9") == "http://[::1]:9"


async def test_replays_a_window_of_the_shared_azure_trace(fleet: EmulatorFleet) -> None:
    trace = load_trace(TRACES / "AzureLLMInferenceTrace_code.csv.gz")
    window = speed_up(trace.window(0.0, 20.0), 20.0)  # 20 s of traffic in 1 s
    assert len(window) > 5
    a = await fleet.start_replica("a")
    b = await fleet.start_replica("b")
    fleet.set_speed(20.0)
    report = await LoadGenerator([a.url, b.url], max_requests=60, api="chat").run(window)
    assert_conserved(report, min(60, len(window)))
    assert report.ok == len(report.results)
    assert [r.prompt_tokens for r in report.results] == window.prompt_tokens[:60].tolist()
