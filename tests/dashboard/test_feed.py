"""The dashboard's JSON feed and static files (real HTTP over uvicorn)."""

from __future__ import annotations

import math
from dataclasses import replace

import aiohttp

from autoscaler.api.dashboard import dashboard_state, decision_runs
from autoscaler.control.state import ControllerState, TargetStatus
from autoscaler.domain import MetricRecommendation, Observation, Reason, TargetRef
from autoscaler.policy.schema import Policy
from autoscaler.target import TargetSpec
from tests.dashboard.conftest import comparison_feed, decision, populate


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


def test_identical_consecutive_decisions_collapse_into_one_row_with_their_span() -> None:
    held = [
        replace(decision(t, 5, 5, Reason.RATE_LIMITED), limits=(Reason.RATE_LIMITED,))
        for t in (14.0, 13.0, 12.0)
    ]
    up = decision(11.0, 1, 5, Reason.SCALE_UP)
    older = replace(decision(10.0, 5, 5, Reason.RATE_LIMITED), limits=(Reason.RATE_LIMITED,))
    runs = decision_runs([*held, up, older])  # newest first, as the history is read
    assert [(r["reason"], r["count"]) for r in runs] == [
        ("rate-limited", 3),
        ("scale-up", 1),
        ("rate-limited", 1),
    ]
    assert (runs[0]["first_t"], runs[0]["last_t"]) == (12.0, 14.0)
    assert runs[0]["limits"] == []  # not "rate-limited (rate-limited)"


def test_forecast_above_the_maximum_is_capped_for_the_chart_and_kept_for_the_tile() -> None:
    state = ControllerState()
    ref = TargetRef("demo", "x")
    policy = Policy(max_replica_count=6)
    state.targets[ref] = TargetStatus(spec=TargetSpec(ref=ref, policy=policy))
    dec = replace(
        decision(1.0, 2, 6, Reason.FORECAST),
        metrics=(MetricRecommendation("waiting", "AverageValue", 4.0, 8.0, 2, 200.0, 52),),
    )
    obs = Observation(t=1.0, current_replicas=2, ready_replicas=2, signals={})
    state.targets[ref].observations.append(obs)
    state.targets[ref].history.append(dec)
    state.targets[ref].last_decision = dec
    (t,) = dashboard_state(state)["targets"]
    assert t["forecast_replicas"] == 52 and t["forecast_replicas_capped"] == 6
    assert t["series"]["forecast_replicas"] == [6]


def test_feed_shows_the_policy_document_the_clock_and_the_side_by_side_block() -> None:
    state = ControllerState()
    ref = TargetRef("demo", "x")
    state.targets[ref] = TargetStatus(spec=TargetSpec(ref=ref, policy=Policy(max_replica_count=7)))
    feed = dashboard_state(state, comparison=comparison_feed, clock_note="emulated seconds")
    (t,) = feed["targets"]
    assert t["policy"]["document"]["maxReplicaCount"] == 7
    assert t["policy"]["patch_path"] == "/v1/targets/demo/x/policy"
    assert feed["clock"] == "emulated seconds"
    assert [f["key"] for f in feed["comparison"]["fleets"]] == ["ours", "keda"]
    assert dashboard_state(state)["comparison"] is None
