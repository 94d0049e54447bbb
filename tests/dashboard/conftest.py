from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from typing import Any

import pytest
import uvicorn
from fastapi import FastAPI

from autoscaler.api.dashboard import dashboard_router
from autoscaler.control.state import ControllerState, TargetStatus
from autoscaler.domain import (
    Decision,
    Forecast,
    MetricRecommendation,
    Observation,
    Reason,
    TargetRef,
)
from autoscaler.policy.schema import Policy
from autoscaler.target import TargetSpec

REF = TargetRef("demo", "llama-3-8b")


def decision(t: float, current: int, desired: int, reason: Reason) -> Decision:
    return Decision(
        t=t,
        current_replicas=current,
        desired_replicas=desired,
        reason=reason,
        message=f"waiting {desired * 4} over target 4 per replica",
        active=True,
        metrics=(
            MetricRecommendation(
                "waiting", "AverageValue", 4.0, desired * 4.0, desired, desired * 5.0, desired + 1
            ),
        ),
        numbers={"waiting": desired * 4.0, "bogus": float("nan")},
    )


async def populate(state: ControllerState, ticks: int = 30) -> None:
    """A burst: load rises at tick 10, the controller scales 1 -> 3."""
    state.targets[REF] = TargetStatus(spec=TargetSpec(ref=REF, policy=Policy()))
    state.targets[REF].warm_pool_replicas = 2
    state.ready = True
    for i in range(ticks):
        t = 1000.0 + i
        burst = i >= 10
        replicas = 1 if i < 12 else 3
        signals = {
            "arrival_rate_per_s": 20.0 if burst else 2.0,
            "waiting": 12.0 if burst else 0.0,
            "running": 40.0 if burst else 4.0,
            "kv_cache_usage": 0.7 if burst else 0.1,
            "ttft_p50_s": 0.3 if burst else 0.05,
            "ttft_p95_s": 0.9 if burst else 0.08,
        }
        if i == 5:
            signals.pop("ttft_p95_s")  # missing data: must be a gap, not a zero
        obs = Observation(
            t=t,
            current_replicas=replicas,
            ready_replicas=replicas,
            signals=signals,
            forecast=Forecast(horizon_s=60.0, signals={"arrival_rate_per_s": 25.0}, model="holt"),
        )
        if i == 10:
            dec = decision(t, 1, 3, Reason.SCALE_UP)
        else:
            dec = decision(t, replicas, replicas, Reason.STEADY)
        await state.publish(REF, obs, dec)
        state.ticks += 1


def comparison_feed() -> dict[str, Any]:
    """What the demo's `Comparison.feed` returns: two fleets, one series each."""
    t = [float(i) for i in range(30)]
    return {
        "fleets": [
            {"key": "ours", "title": "llm-autoscaler", "target": "demo/llama-3-8b"},
            {"key": "keda", "title": "KEDA+HPA (seeds)", "target": "demo/llama-3-8b-keda"},
        ],
        "time": "emulated seconds since the demo started",
        "t": t,
        "ours": {
            "ttft_p95_s": [0.2 if i < 10 else 0.4 for i in range(30)],
            "gpus": [3 if i < 12 else 5 for i in range(30)],
            "ready": [1 if i < 12 else 3 for i in range(30)],
            "waiting": [0 if i < 10 else 5 for i in range(30)],
            "replicas": [1 if i < 12 else 3 for i in range(30)],
        },
        "keda": {
            "ttft_p95_s": [0.2 if i < 10 else 2.5 for i in range(30)],
            "gpus": [1 if i < 15 else 4 for i in range(30)],
            "ready": [1] * 30,
            "waiting": [0 if i < 10 else 40 for i in range(30)],
            "replicas": [1 if i < 15 else 4 for i in range(30)],
        },
    }


@pytest.fixture
async def served_state() -> AsyncIterator[tuple[ControllerState, str]]:
    state = ControllerState()
    await populate(state)
    app = FastAPI()
    app.include_router(dashboard_router(state, comparison=comparison_feed))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    for _ in range(500):
        if server.started:
            break
        await asyncio.sleep(0.01)
    try:
        yield state, f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
