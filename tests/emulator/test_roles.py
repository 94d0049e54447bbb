"""The emulated replica's ``role`` (prefill/decode disaggregation): which work it does."""

from __future__ import annotations

import asyncio

import pytest

from autoscaler.emulator.clock import EmuClock
from autoscaler.emulator.engine import EmulatedEngine, RequestRejected, RequestState, Role
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig
from autoscaler.errors import ConfigError
from autoscaler.sim.replica import PROFILES

H100 = PROFILES["8b-h100"]


async def _serve(role: Role, prompt: int, max_tokens: int) -> tuple[RequestState, EmulatedEngine]:
    # 1000x emulated time: a ~0.3 emulated-second request is ~0.3 real milliseconds
    engine = EmulatedEngine(H100, EmuClock(speed=1000.0), role=role)
    engine.start()
    try:
        st = engine.submit(prompt, max_tokens, stream=False)
        await asyncio.wait_for(engine.wait_idle(), 5.0)
    finally:
        await engine.close()
    return st, engine


async def test_prefill_role_computes_the_prompt_and_one_token() -> None:
    st, engine = await _serve("prefill", 6000, 50)
    assert st.finish_reason == "length"
    assert st.max_tokens == 1 and st.tokens(engine.steps) == 1
    assert st.finished_emu is not None and st.first_token_emu == st.finished_emu
    # the whole 6000-token prefill (~0.2 s), then nothing
    assert st.finished_emu - st.arrival_emu == pytest.approx(H100.idle_ttft_s(6000), rel=0.05)


async def test_decode_role_skips_the_prompt() -> None:
    both, _ = await _serve("both", 6000, 11)
    dec, engine = await _serve("decode", 6000, 11)
    assert dec.finish_reason == both.finish_reason == "length"
    assert dec.tokens(engine.steps) == 11
    assert engine.replica.prompt_tokens_total == 0  # no prefill was computed
    assert both.finished_emu is not None and dec.finished_emu is not None
    both_s = both.finished_emu - both.arrival_emu
    dec_s = dec.finished_emu - dec.arrival_emu
    # ten ~7 ms decode steps instead of a ~0.2 s prefill plus those steps
    assert dec_s < 0.1 < both_s
    assert both_s - dec_s == pytest.approx(H100.idle_ttft_s(6000), rel=0.1)


def test_decode_role_refuses_a_one_token_request_naming_the_field() -> None:
    engine = EmulatedEngine(H100, EmuClock(), role="decode")
    with pytest.raises(RequestRejected, match="max_tokens: value 1 must be >= 2") as err:
        engine.submit(100, 1, stream=False)
    assert err.value.status == 400


def test_role_reaches_the_engine_and_is_validated() -> None:
    rep = EmulatedReplica("p", ReplicaConfig(profile=H100, role="prefill"), EmuClock())
    assert rep.engine.role == "prefill"
    assert ReplicaConfig().role == "both"
    with pytest.raises(ConfigError, match="role: value 'mixed' must be one of"):
        ReplicaConfig(role="mixed")  # type: ignore[arg-type]
