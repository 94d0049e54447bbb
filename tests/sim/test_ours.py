"""``ours`` in the simulator: planner wiring and forecast-driven scale-up."""

from __future__ import annotations

import numpy as np

from autoscaler.domain import Forecast, Reason
from autoscaler.policy.schema import ColdStartGuard
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.policies import Ours, ours, ours_capacity_policy, ours_policy
from autoscaler.sim.replica import PROFILES
from autoscaler.sim.simulator import SimView, simulate
from autoscaler.sim.traces import Trace, from_arrays

CFG = ClusterConfig(profile=PROFILES["8b-h100"])


def ramp(r0: float, r1: float, t0: float, t1: float, duration_s: float, seed: int = 0) -> Trace:
    """Poisson arrivals whose rate goes linearly from r0 (before t0) to r1 (after t1)."""
    rng = np.random.default_rng(seed)
    top = max(r0, r1)
    t, out = 0.0, []
    while t < duration_s:
        t += float(rng.exponential(1 / top))
        rate = r0 if t < t0 else r1 if t > t1 else r0 + (r1 - r0) * (t - t0) / (t1 - t0)
        if rng.random() < rate / top:
            out.append(t)
    n = len(out)
    return from_arrays("ramp", np.asarray(out), [1000] * n, [150] * n)


def test_planner_forecast_reaches_every_decision_with_the_learned_horizon() -> None:
    policy = ours(1)
    simulate(ramp(2, 60, 120, 600, 700), policy, CFG, seed=0)
    assert policy.planner is not None
    last = policy.decisions[-1]
    assert last.numbers["forecast_horizon_s"] > 0
    assert "forecast.running" in last.numbers
    numbers = policy.planner.planner.numbers()
    # Pods started during the ramp, so the horizon is learned, not the 90 s prior.
    assert numbers["forecast.cold_start_learned"] == 1.0
    assert numbers["forecast.horizon_s"] != ours_policy().prediction.cold_start_prior_seconds  # type: ignore[union-attr]
    assert any(m.forecast_value is not None for m in last.metrics)


def test_forecast_hook_scales_before_the_ramp_reaches_its_peak() -> None:
    trace = ramp(1, 40, 300, 900, 1000)

    def foresee(view: SimView, now: float, horizon_s: float) -> Forecast:
        # An oracle for the ramp: running at now + horizon by Little's law (~3 s each).
        t = now + horizon_s
        rate = 1 if t < 300 else 40 if t > 900 else 1 + 39 * (t - 300) / 600
        return Forecast(horizon_s=horizon_s, signals={"running": rate * 3.0}, model="oracle")

    seeing = ours(1, forecaster=foresee)
    blind = ours(1, policy=ours_policy().model_copy(update={"prediction": None}))
    simulate(trace, seeing, CFG, seed=0)
    simulate(trace, blind, CFG, seed=0)

    def first_up(p: Ours) -> float:
        return min(d.t for d in p.decisions if d.desired_replicas > d.current_replicas)

    assert any(d.reason == Reason.FORECAST for d in seeing.decisions)
    assert first_up(seeing) < first_up(blind)
    assert first_up(seeing) < 900  # before the ramp's peak


def test_cold_start_guard_stops_overshoot_on_a_step_during_a_long_cold_start() -> None:
    # A step from 2 to 30 req/s with one replica; about 5 replicas serve 30 req/s. The
    # queue grows for a whole cold start: HPA's Percent policy alone compounds on
    # replicas that are not serving yet.
    trace = ramp(2, 30, 60, 61, 420)
    cfg = ClusterConfig(profile=PROFILES["8b-h100"])  # new pods need a new node: ~5 min
    guarded = ours(1)
    unguarded = ours(
        1,
        policy=ours_policy().model_copy(update={"cold_start_guard": ColdStartGuard(enabled=False)}),
    )
    simulate(trace, guarded, cfg, seed=0)
    simulate(trace, unguarded, cfg, seed=0)

    def peak_before_ready(p: Ours) -> int:
        # New pods need a new node (~4-5 min): nothing new is ready before t = 250 s.
        return max(d.desired_replicas for d in p.decisions if d.t < 250)

    assert peak_before_ready(guarded) <= 5  # 1 ready + one Pods-4 step
    assert peak_before_ready(unguarded) >= 32  # 1 -> 64 compounding on unready pods
    assert any(Reason.WAITING_FOR_READY in d.limits for d in guarded.decisions)


def test_learned_prompt_capacity_scales_a_prefill_bound_ramp_the_queue_targets_miss() -> None:
    # 3000-token prompts, 20-token answers: few sequences run at once, so running/waiting
    # stay under their targets while prefill saturates and TTFT climbs.
    base = ramp(1, 8, 60, 900, 1500)
    n = len(base)
    trace = from_arrays("prefill-ramp", base.arrival_s, [3000] * n, [20] * n)
    queue_only = ours_policy().model_copy(
        update={"metrics": [m for m in ours_policy().metrics if m.signal != "prompt_tokens_per_s"]}
    )
    plain = ours(1, policy=queue_only)
    learned = ours(
        1,
        policy=ours_capacity_policy().model_copy(update={"metrics": queue_only.metrics}),
        name="ours-capacity",
    )
    default = ours(1)  # the schema's prompt-tokens target is on by default
    assert learned.name == "ours-capacity"
    a = simulate(trace, plain, CFG, seed=0).summary()
    b = simulate(trace, learned, CFG, seed=0).summary()
    c = simulate(trace, default, CFG, seed=0).summary()
    assert c["slo_misses"] * 4 < a["slo_misses"]
    assert learned.planner is not None
    cap = learned.planner.planner.learned_capacities()["prompt_tokens_per_s"]
    assert 5_000 < cap < 30_000  # an 8B model's prefill on one H100, under a 0.5 s TTFT
    last = learned.decisions[-1]
    assert [(m.signal, m.target) for m in last.metrics if m.learned] == [
        ("prompt_tokens_per_s", cap)
    ]
    assert not any(m.learned for m in plain.decisions[-1].metrics)
    assert b["slo_misses"] * 4 < a["slo_misses"]
    assert b["gpu_hours"] > a["gpu_hours"]  # the misses were saved by replicas, not luck
