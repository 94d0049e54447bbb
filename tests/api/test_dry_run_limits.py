"""Dry-run admission over a real socket: read token, per-client token bucket, CPU caps.

Before: an anonymous dry-run cost ~250 ms of CPU and nothing limited how many ran, so 8
clients pushed /healthz p50 from 7 to 144 ms (benchmarks/bench_api.py --dry-run shows it).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError

from autoscaler.api.app import create_app
from autoscaler.api.limits import DryRunGate, DryRunLimits, TokenBuckets, TooManyRequests
from autoscaler.api.security import ApiSettings
from autoscaler.api.server import HttpServerHandle, serve_http
from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.settings import Settings
from autoscaler.store.file import FilePolicyStore
from tests.api.conftest import READ
from tests.api.support import READ_TOKEN, WRITE_TOKEN, decision, observation, register, spec

URL = "/v1/targets/llm/chat/dry-run"
REF = TargetRef("llm", "chat")
CANDIDATE = {"policy": {"maxReplicaCount": 5}}


class FakeClock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


async def _state(ticks: int = 20) -> ControllerState:
    state = ControllerState()
    register(state, spec())
    for i in range(ticks):
        await state.publish(REF, observation(float(i), 2, waiting=40.0), decision(float(i), 2, 2))
    return state


@contextlib.asynccontextmanager
async def serving(
    tmp_path: Path,
    limits: DryRunLimits,
    clock: FakeClock,
    read_token: str | None = None,
    ticks: int = 20,
) -> AsyncIterator[HttpServerHandle]:
    settings = ApiSettings(write_token=WRITE_TOKEN, read_token=read_token, dry_run=limits)
    app = create_app(
        await _state(ticks), FilePolicyStore(tmp_path / "p.yaml"), settings, clock=clock
    )
    handle = await serve_http(app)
    try:
        yield handle
    finally:
        await handle.stop()


def _client(handle: HttpServerHandle, source: str = "127.0.0.1") -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return httpx.AsyncClient(base_url=handle.url, transport=transport)


async def test_dry_run_needs_the_read_token_when_one_is_configured(tmp_path: Path) -> None:
    async with (
        serving(tmp_path, DryRunLimits(), FakeClock(), read_token=READ_TOKEN) as h,
        _client(h) as c,
    ):
        assert (await c.post(URL, json=CANDIDATE)).status_code == 401
        bad = {"Authorization": "Bearer made-up"}
        assert (await c.post(URL, json=CANDIDATE, headers=bad)).status_code == 403
        assert (await c.post(URL, json=CANDIDATE, headers=READ)).status_code == 200


async def test_dry_run_is_rate_limited_per_client_with_retry_after(tmp_path: Path) -> None:
    clock = FakeClock()
    limits = DryRunLimits(rate_per_s=0.5, burst=3)
    async with (
        serving(tmp_path, limits, clock) as h,
        _client(h, "127.0.0.1") as first,
        _client(h, "127.0.0.2") as second,
    ):
        codes = [(await first.post(URL, json=CANDIDATE)).status_code for _ in range(3)]
        assert codes == [200, 200, 200]
        limited = await first.post(URL, json=CANDIDATE)
        assert limited.status_code == 429
        assert limited.headers["retry-after"] == "2"  # one token at 0.5/s
        assert "per client" in limited.json()["detail"]
        # another client address has its own bucket
        assert (await second.post(URL, json=CANDIDATE)).status_code == 200
        clock.now_s += 2.0
        assert (await first.post(URL, json=CANDIDATE)).status_code == 200
        assert (await first.post(URL, json=CANDIDATE)).status_code == 429
        # other reads are not limited
        assert (await first.get("/v1/targets/llm/chat/decisions")).status_code == 200


async def test_with_a_read_token_the_bucket_follows_the_token_not_made_up_ones(
    tmp_path: Path,
) -> None:
    limits = DryRunLimits(rate_per_s=0.5, burst=1)
    async with (
        serving(tmp_path, limits, FakeClock(), read_token=READ_TOKEN) as h,
        _client(h, "127.0.0.1") as first,
        _client(h, "127.0.0.2") as second,
    ):
        assert (await first.post(URL, json=CANDIDATE, headers=READ)).status_code == 200
        # same token from another address: same client, same bucket
        assert (await second.post(URL, json=CANDIDATE, headers=READ)).status_code == 429
        write = {"Authorization": f"Bearer {WRITE_TOKEN}"}
        assert (await second.post(URL, json=CANDIDATE, headers=write)).status_code == 200


async def test_dry_run_replays_at_most_max_ticks_and_stops_at_the_cpu_budget(
    tmp_path: Path,
) -> None:
    limits = DryRunLimits(rate_per_s=None, max_ticks=7)
    async with serving(tmp_path, limits, FakeClock(), ticks=30) as h, _client(h) as c:
        body = (await c.post(URL, json=CANDIDATE)).json()
        assert body["observations"] == 7
        assert [d["t"] for d in body["decisions"]] == [float(t) for t in range(23, 30)]
        assert body["stoppedEarly"] is False
        assert body["limits"]["maxTicks"] == 7
    starved = DryRunLimits(rate_per_s=None, cpu_budget_s=1e-9)
    async with serving(tmp_path, starved, FakeClock(), ticks=30) as h, _client(h) as c:
        body = (await c.post(URL, json=CANDIDATE)).json()
        assert 1 <= body["observations"] < 30
        assert body["stoppedEarly"] is True
        assert body["summary"]["final_desired_replicas"] >= 1


async def test_replays_beyond_the_queue_are_429_not_piled_up() -> None:
    gate = DryRunGate(DryRunLimits(concurrency=1, max_waiting=1), FakeClock())
    release = asyncio.Event()

    async def hold() -> None:
        async with gate.slot():
            await release.wait()

    running = asyncio.create_task(hold())
    await asyncio.sleep(0)
    queued = asyncio.create_task(hold())
    await asyncio.sleep(0)
    with pytest.raises(TooManyRequests) as err:
        async with gate.slot():
            pass
    assert err.value.status_code == 429
    assert err.value.headers == {"Retry-After": "1"}
    release.set()
    await asyncio.gather(running, queued)
    async with gate.slot():
        pass


def test_token_buckets_forget_the_least_recent_clients_beyond_the_cap() -> None:
    clock = FakeClock()
    buckets = TokenBuckets(rate_per_s=1.0, burst=1, clock=clock, max_clients=100)
    for i in range(1000):
        assert buckets.take(f"addr:{i}") == 0.0
    assert len(buckets) == 100
    assert buckets.take("addr:999") == pytest.approx(1.0)  # still remembered


async def test_a_cancelled_dry_run_keeps_its_slot_until_its_replay_thread_ends() -> None:
    gate = DryRunGate(DryRunLimits(concurrency=1, max_waiting=0), FakeClock())
    started, finish = threading.Event(), threading.Event()

    def replay() -> str:
        started.set()
        finish.wait(timeout=30)
        return "done"

    first = asyncio.create_task(gate.run_in_thread(replay))
    await asyncio.to_thread(started.wait, 30)
    first.cancel()
    await asyncio.sleep(0)
    # the client went away, its replay still runs: nobody else may start one
    with pytest.raises(TooManyRequests):
        await gate.run_in_thread(lambda: "second")
    finish.set()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert await gate.run_in_thread(lambda: "third") == "third"


def test_limits_come_from_the_process_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOSCALER_API_MAX_BODY_BYTES", "2048")
    monkeypatch.setenv("AUTOSCALER_API_DRY_RUN_RATE_PER_S", "2")
    monkeypatch.setenv("AUTOSCALER_API_DRY_RUN_BURST", "5")
    monkeypatch.setenv("AUTOSCALER_API_DRY_RUN_MAX_TICKS", "120")
    monkeypatch.setenv("AUTOSCALER_API_DRY_RUN_CPU_BUDGET_S", "0.25")
    api = ApiSettings.from_env(Settings(), env={})
    assert api.max_body_bytes == 2048
    assert api.dry_run == DryRunLimits(
        rate_per_s=2.0, burst=5, concurrency=1, max_ticks=120, cpu_budget_s=0.25
    )
    monkeypatch.setenv("AUTOSCALER_API_MAX_BODY_BYTES", "10")
    with pytest.raises(ValidationError, match="api_max_body_bytes"):
        Settings()
