"""The dashboard's JSON feed and static files (real HTTP over uvicorn)."""

from __future__ import annotations

import math

import aiohttp

from autoscaler.api.dashboard import dashboard_state
from autoscaler.control.state import ControllerState
from tests.dashboard.conftest import populate


async def test_feed_reports_replicas_forecast_and_decisions() -> None:
    state = ControllerState()
    await populate(state, ticks=30)
    feed = dashboard_state(state)
    (t,) = feed["targets"]
    assert t["id"] == "demo/llama-3-8b"
    assert (t["current_replicas"], t["desired_replicas"], t["warm_pool_replicas"]) == (3, 3, 2)
    assert t["forecast_replicas"] == 4 and t["forecast"]["model"] == "holt"
    assert t["slo_ttft_s"] == 0.5
    assert len(t["series"]["t"]) == 30
    assert t["series"]["desired_replicas"][10] == 3 and t["series"]["desired_replicas"][9] == 1
    reasons = [d["reason"] for d in t["decisions"]]
    assert reasons[0] == "steady" and "scale-up" in reasons  # newest first


async def test_missing_and_non_finite_values_are_null_not_zero() -> None:
    state = ControllerState()
    await populate(state, ticks=8)
    (t,) = dashboard_state(state)["targets"]
    assert t["series"]["ttft_p95_s"][5] is None
    assert t["series"]["ttft_p95_s"][4] is not None
    assert t["series"]["ttft_p99_s"] == [None] * 8  # never observed
    assert t["latest"]["itl_p95_s"] is None
    assert t["decisions"][0]["numbers"]["bogus"] is None
    for value in t["series"]["waiting"]:
        assert value is None or math.isfinite(value)


async def test_page_and_vendored_assets_are_served_locally(
    served_state: tuple[ControllerState, str],
) -> None:
    _, base = served_state
    async with aiohttp.ClientSession() as http:
        async with http.get(base + "/") as resp:
            html = await resp.text()
        assert resp.status == 200 and "uPlot.iife.min.js" in html
        assert "http://" not in html.replace("http://127.0.0.1", "")  # no CDN
        async with http.get(base + "/dashboard/static/uPlot.iife.min.js") as resp:
            assert resp.status == 200 and "javascript" in resp.headers["Content-Type"]
            assert "uPlot" in await resp.text()
        async with http.get(base + "/dashboard/static/../dashboard.py") as resp:
            assert resp.status == 404
        async with http.get(base + "/v1/dashboard/state") as resp:
            body = await resp.json()
        assert body["targets"][0]["id"] == "demo/llama-3-8b"
