"""Prefill/decode roles sized independently within a ratio band (policy/roles.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.errors import ConfigError
from autoscaler.policy.roles import RoleSignals, RoleState, RoleTargets, size_roles

T = RoleTargets(prompt_tokens_per_s_per_prefill=10_000.0, running_per_decode=64.0)


def sig(**kw: float | None) -> RoleSignals:
    base: dict[str, float | None] = {
        "prompt_tokens_per_s": 20_000.0,
        "waiting": 0.0,
        "ttft_p90_s": 0.2,
        "running": 128.0,
        "kv_usage": 0.5,
        "itl_p90_s": 0.02,
    }
    base.update(kw)
    return RoleSignals(**base)  # type: ignore[arg-type]


def test_prefill_follows_the_prompt_token_rate_and_decode_the_running_requests() -> None:
    r = size_roles(sig(prompt_tokens_per_s=35_000.0, running=300.0), T, RoleState(2), RoleState(2))
    assert (r.prefill, r.decode) == (4, 5)


def test_decode_grows_on_kv_usage_even_with_few_running() -> None:
    r = size_roles(sig(running=10.0, kv_usage=0.95), T, RoleState(2), RoleState(4))
    assert r.decode == 5  # 4 x 0.95 / 0.8 = 4.75


def test_slo_pressure_adds_a_replica_to_its_own_role_only() -> None:
    t = RoleTargets(10_000.0, 64.0, ttft_slo_s=0.5, itl_slo_s=0.05)
    r = size_roles(sig(ttft_p90_s=0.9, waiting=3.0), t, RoleState(2), RoleState(2))
    assert (r.prefill, r.decode) == (3, 2)
    r = size_roles(sig(itl_p90_s=0.08), t, RoleState(2), RoleState(2))
    assert (r.prefill, r.decode) == (2, 3)


def test_a_missing_signal_holds_that_role_and_says_so() -> None:
    r = size_roles(sig(prompt_tokens_per_s=None), T, RoleState(5), RoleState(2))
    assert r.prefill == 5 and any("missing, holding" in n for n in r.notes)
    r = size_roles(sig(running=None, kv_usage=None), T, RoleState(2), RoleState(7))
    assert r.decode == 7


def test_pending_prefill_pods_never_stall_decode_scale_down() -> None:
    # prefill wants more but has Pending pods; decode has far too many
    r = size_roles(
        sig(prompt_tokens_per_s=60_000.0, running=64.0, kv_usage=0.1),
        T,
        RoleState(3, pending=1),
        RoleState(8),
    )
    assert r.prefill == 3  # no growth while its pods cannot place
    assert r.decode == 1  # the other role still shrinks


def test_the_ratio_band_raises_the_lagging_role_never_cuts_one() -> None:
    t = RoleTargets(10_000.0, 64.0, ratio_band=(0.5, 1.0))
    r = size_roles(sig(prompt_tokens_per_s=5_000.0, running=640.0), t, RoleState(1), RoleState(10))
    assert (r.prefill, r.decode) == (5, 10)
    r = size_roles(sig(prompt_tokens_per_s=80_000.0, running=64.0), t, RoleState(1), RoleState(1))
    assert (r.prefill, r.decode) == (8, 8)


def test_bad_targets_name_field_value_and_rule() -> None:
    with pytest.raises(ConfigError, match=r"roles.running_per_decode: value 0.0 must be > 0"):
        RoleTargets(1.0, 0.0)
    with pytest.raises(ConfigError, match=r"roles.ratio_band: value \(2.0, 1.0\)"):
        RoleTargets(1.0, 1.0, ratio_band=(2.0, 1.0))


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.floats(0, 1e6),
    running=st.floats(0, 5000),
    kv=st.floats(0, 1),
    p=st.integers(0, 20),
    d=st.integers(0, 20),
    band=st.one_of(st.none(), st.tuples(st.floats(0.1, 1.0), st.floats(1.0, 4.0))),
    max_p=st.one_of(st.none(), st.integers(1, 30)),
    max_d=st.one_of(st.none(), st.integers(1, 30)),
)
def test_roles_stay_within_bounds_and_cover_their_own_need(
    tokens: float,
    running: float,
    kv: float,
    p: int,
    d: int,
    band: tuple[float, float] | None,
    max_p: int | None,
    max_d: int | None,
) -> None:
    t = RoleTargets(10_000.0, 64.0, max_prefill=max_p, max_decode=max_d, ratio_band=band)
    r = size_roles(
        sig(prompt_tokens_per_s=tokens, running=running, kv_usage=kv), t, RoleState(p), RoleState(d)
    )
    assert r.prefill >= 1 and (max_p is None or r.prefill <= max_p)
    assert r.decode >= 1 and (max_d is None or r.decode <= max_d)
    # never below its own need (the band only raises)
    if max_p is None:
        assert r.prefill * 10_000.0 >= tokens - 1e-6
    if max_d is None:
        assert r.decode * 64.0 >= running - 1e-6
    if band is not None and max_p is None and max_d is None:
        lo, hi = band
        # lo <= 1 <= hi here, so whole replicas can always meet the band
        assert lo * r.decode - 1e-9 <= r.prefill <= hi * r.decode + 1e-9


# ------------------------------------------------------------ step_role: HPA per role
from autoscaler.policy.core import initial_state  # noqa: E402
from autoscaler.policy.roles import step_role  # noqa: E402
from autoscaler.policy.schema import Behavior  # noqa: E402


def _behavior(down_window_s: int, per_period: int = 10, period_s: int = 15) -> Behavior:
    rules = {"policies": [{"type": "Pods", "value": per_period, "periodSeconds": period_s}]}
    return Behavior.model_validate(
        {
            "scaleUp": {"stabilizationWindowSeconds": 0, **rules},
            "scaleDown": {"stabilizationWindowSeconds": down_window_s, **rules},
        }
    )


def test_step_role_holds_a_scale_down_for_its_window_then_follows() -> None:
    b = _behavior(down_window_s=30)
    s = initial_state(4, 0.0)
    step = step_role(b, 1, 4, 4, s, 10.0)
    assert (step.desired, step.limits) == (4, ("stabilized",))  # the 4 at t=0 is in window
    step = step_role(b, 1, 4, 4, step.state, 31.0)
    assert step.desired == 1


def test_step_role_rate_limits_growth_and_keeps_the_floor_on_the_way_down() -> None:
    b = _behavior(down_window_s=0, per_period=1, period_s=60)
    step = step_role(b, 5, 2, 2, initial_state(2, 0.0), 0.0, cold_start_guard=False)
    assert (step.desired, step.limits) == (3, ("rate-limited",))
    # the write happened: observed next tick, the period counts it
    step = step_role(b, 5, 3, 3, step.state, 10.0, cold_start_guard=False)
    assert (step.desired, step.limits) == (3, ("rate-limited",))
    down = step_role(b, 0, 3, 3, initial_state(3, 0.0), 0.0, floor=2)
    assert down.desired == 2


def test_step_role_waits_for_ready_replicas_when_the_guard_is_on() -> None:
    b = _behavior(down_window_s=0, per_period=4, period_s=15)
    step = step_role(b, 8, 4, 1, initial_state(4, 0.0), 0.0)  # 1 of 4 ready: 1 + 4 = 5
    assert (step.desired, step.limits) == (5, ("waiting-for-ready",))
