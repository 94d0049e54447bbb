"""Replica-model fidelity (issue 18): context limit, attention cost, SLO feasibility,
static sizing that says when its goal is unreachable, and the SLO reaching ours' planner."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from autoscaler.cli import main
from autoscaler.domain import DecisionState, Observation
from autoscaler.emulator.clock import EmuClock
from autoscaler.emulator.engine import EmulatedEngine, RequestRejected
from autoscaler.metrics.pod_scrape import ScrapeConfig
from autoscaler.metrics.signals import DEFAULT_WINDOW_S
from autoscaler.policy.core import decide
from autoscaler.policy.schema import Policy
from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import CompareConfig, build_policy, static_sizing
from autoscaler.sim.oracle import window_misses
from autoscaler.sim.policies import POLICY_NAMES, Ours, StaticPeak, ours, ours_policy
from autoscaler.sim.replica import PROFILES, Replica
from autoscaler.sim.simulator import simulate
from autoscaler.sim.traces import from_arrays, long_context_chat, poisson_trace

H100 = PROFILES["8b-h100"]
H100_128K = PROFILES["8b-h100-128k"]


def _alone_ttft(profile_name: str, prompt: int) -> float:
    rep = Replica(PROFILES[profile_name])
    assert rep.add_request(0, prompt, 1, 0.0)
    rep.run_until(1e6)
    ev = rep.drain_events()
    return ev.first_tokens[0][1]


def test_request_over_max_model_len_is_refused_by_simulator_and_emulator_alike() -> None:
    # (prompt, output): 8100 + 92 = 8192 fits Llama-3-8B's window, 8100 + 93 does not.
    cases = [(8100, 92, True), (8100, 93, False), (9000, 10, False), (500, 50, True)]
    engine = EmulatedEngine(H100, EmuClock(speed=1.0))
    for prompt, output, fits in cases:
        if fits:
            engine.submit(prompt, output, stream=False)
        else:
            with pytest.raises(RequestRejected) as err:
                engine.submit(prompt, output, stream=False)
            assert err.value.status == 400
            assert "maximum context length is 8192" in str(err.value)
    trace = from_arrays(
        "ctx", [0.1 * i for i in range(len(cases))], [c[0] for c in cases], [c[1] for c in cases]
    )
    res = simulate(trace, StaticPeak(1), ClusterConfig(profile=H100), slo_ttft_s=5.0)
    assert res.rejected.tolist() == [not c[2] for c in cases]
    s = res.summary()
    # Rejected apart from dropped and from SLO misses; attainment over admitted requests.
    assert (s["rejected"], s["dropped"], s["slo_misses"]) == (2, 0, 0)
    assert s["slo_attainment"] == 1.0


def test_emulator_reports_the_profiles_context_window_unless_overridden() -> None:
    assert EmulatedEngine(H100_128K, EmuClock()).max_model_len == 131_072
    wide = EmulatedEngine(H100, EmuClock(), max_model_len=32_768)
    wide.submit(20_000, 10, stream=False)  # the replica model takes it too


def test_prefill_cost_is_super_linear_with_the_attention_share_of_calibration() -> None:
    # calibration.md 1d: attention adds ~3% to an 8B prefill of 2k tokens (A100, Vidur).
    a100 = PROFILES["8b-a100"]
    linear_ms = a100.t0_ms + a100.gamma_ms_per_prefill_token * 2048
    full_ms = a100.idle_ttft_s(2048) * 1000 - a100.beta_ms_per_1k_ctx * 2048 / 1000
    assert full_ms / linear_ms - 1 == pytest.approx(0.03, abs=0.004)
    # Doubling a long prompt more than doubles its prefill; 126k costs ~3x linear.
    t32, t64 = H100_128K.idle_ttft_s(32_000), H100_128K.idle_ttft_s(64_000)
    assert t64 / t32 > 2.5
    assert H100_128K.idle_ttft_s(126_000) > 2.5 * 126_000 * 0.029e-3
    # The closed form is what the engine does for a request alone (chunked prefill).
    for prompt in (100, 8192, 20_000, 100_000):
        assert _alone_ttft("8b-h100-128k", prompt) == pytest.approx(
            H100_128K.idle_ttft_s(prompt), rel=1e-9
        )


def _mixed_trace() -> tuple[object, int]:
    """Short prompts plus every tenth prompt 60k tokens (over a 2 s SLO even alone)."""
    base = poisson_trace(2.0, 300.0, 2000, 100, seed=4)
    prompt = base.prompt_tokens.copy()
    prompt[::10] = 60_000
    trace = from_arrays("mixed", base.arrival_s, prompt.tolist(), base.output_tokens.tolist())
    return trace, int(np.count_nonzero(prompt == 60_000))


def test_feasibility_share_and_attainment_over_feasible_requests() -> None:
    trace, n_long = _mixed_trace()
    res = simulate(trace, StaticPeak(6), ClusterConfig(profile=H100_128K), slo_ttft_s=2.0)
    s = res.summary()
    assert H100_128K.idle_ttft_s(60_000) > 2.0 > H100_128K.idle_ttft_s(2000)
    assert s["slo_feasible_share"] == pytest.approx(1 - n_long / len(trace), abs=1e-5)
    assert s["slo_misses"] >= n_long
    assert s["slo_attainment"] <= s["slo_feasible_share"] < s["slo_attainment_feasible"]


def test_static_sizing_aims_at_goal_times_feasible_ceiling_and_says_so() -> None:
    trace, n_long = _mixed_trace()
    cfg = CompareConfig(cluster=ClusterConfig(profile=H100_128K), slo_ttft_s=2.0)
    sizing = static_sizing(trace, cfg)
    ceiling = 1 - n_long / len(trace)
    assert sizing.feasible_ceiling == pytest.approx(ceiling)
    assert sizing.target == pytest.approx(0.99 * ceiling)
    assert sizing.reached and sizing.replicas < 16  # not the silent cap of 256
    assert "unreachable" in sizing.note and "idle replica" in sizing.note
    assert sizing.as_json()["target"] == pytest.approx(0.99 * ceiling, abs=1e-5)


def test_oracle_stops_adding_replicas_once_only_infeasible_requests_miss() -> None:
    trace, _ = _mixed_trace()
    table = window_misses(trace, ClusterConfig(profile=H100_128K), max_replicas=40, slo_ttft_s=2.0)
    assert table.misses.shape[1] == 40
    assert int((table.misses[:, 20:] >= 0).sum()) == 0  # never replayed 21..40 replicas


def test_ours_planner_learns_capacity_against_the_given_slo() -> None:
    cfg = CompareConfig(cluster=ClusterConfig(profile=H100), slo_ttft_s=2.0)
    for name in ("ours", "ours-capacity", "ours-lean", "ours-cost"):
        policy = build_policy(name, 4, 2, cfg)
        assert isinstance(policy, Ours) and policy.planner is not None
        assert policy.planner.planner.config.slo_s == 2.0


def test_cli_oracle_row_and_static_sweep_with_the_sizing_in_json(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    rows = [
        {"timestamp": int(i * 200), "input_length": 300 + i % 50, "output_length": 40}
        for i in range(600)
    ]
    rows[5]["input_length"] = 9000  # over 8b-h100's 8192-token window
    trace.write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "r.json"
    args = ["simulate", "--trace", str(trace), "--policy", "keda-seed,oracle"]
    code = main([*args, "--static-sweep", "1..2", "--json", str(out), "--quiet"])
    assert code == 0
    doc = json.loads(out.read_text())
    assert list(doc["policies"]) == ["keda-seed", "static-1", "static-2", "oracle"]
    assert doc["policies"]["static-2"]["max_replicas"] == 2
    assert doc["policies"]["keda-seed"]["rejected"] == 1
    oracle = doc["policies"]["oracle"]
    assert oracle["gpu_hours"] is not None and oracle["slo_attainment"] >= 0.99
    assert set(doc["oracle"]["per_policy"]) == {"keda-seed", "static-1", "static-2"}
    # the bounds that keep the cold start, per policy: never below the free oracle's need
    keda = doc["oracle"]["per_policy"]["keda-seed"]
    for key in ("cold_start_oracle", "reactive"):
        assert doc["oracle"][key.removesuffix("_oracle") + "_frontier"]
        at = keda[f"{key}_gpu_hours_at_same_misses"]
        assert at is None or at >= keda["oracle_gpu_hours_at_same_misses"] - 1e-9
    assert doc["static_sizing"]["reached"] is True and doc["static_sizing"]["note"] == ""


def test_cli_rejects_a_bad_static_sweep_naming_the_rule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 5}\n')
    assert main(["simulate", "--trace", str(trace), "--static-sweep", "5..2"]) == 2
    assert "--static-sweep: value '5..2'" in capsys.readouterr().err


def test_default_policy_scales_on_prompt_tokens_when_queues_stay_short() -> None:
    # Long prompts, short answers: 2 replicas, few requests each, no queue, KV half
    # used, but 40k prompt tokens/s: the default prompt-tokens target (8000) asks for 5.
    policy = Policy()
    obs = Observation(
        t=100.0,
        current_replicas=2,
        ready_replicas=2,
        signals={
            "waiting": 0.0,
            "running": 6.0,
            "kv_cache_usage": 0.5,
            "prompt_tokens_per_s": 40_000.0,
        },
    )
    decision, _ = decide(policy, obs, DecisionState(), 100.0)
    assert decision.desired_replicas == 5
    without = policy.model_copy(
        update={"metrics": [m for m in policy.metrics if m.signal != "prompt_tokens_per_s"]}
    )
    assert decide(without, obs, DecisionState(), 100.0)[0].desired_replicas == 2
    assert ours_policy().metrics == policy.metrics  # ours keeps the schema's defaults


def test_long_context_chat_matches_the_issue_description_and_is_seeded() -> None:
    trace = long_context_chat(seed=0)
    p, o = trace.prompt_tokens, trace.output_tokens
    assert 6500 <= float(np.median(p)) <= 7500 and 11_000 <= float(p.mean()) <= 13_500
    assert 70_000 <= float(np.quantile(p, 0.99)) <= 95_000 and int(p.max()) <= 126_000
    assert 300 <= float(o.mean()) <= 380
    assert 3.1 <= trace.mean_rate_per_s <= 3.6 and 3500 <= trace.duration_s <= 3600
    per_min = trace.rate_per_s(60.0)[:-1] * 60
    assert per_min.min() >= 110 and per_min.max() <= 280  # 145-250 plus Poisson noise
    again = long_context_chat(seed=0)
    assert np.array_equal(again.prompt_tokens, p) and np.array_equal(
        again.arrival_s, trace.arrival_s
    )
    assert not np.array_equal(long_context_chat(seed=1).prompt_tokens[:100], p[:100])


def test_simulated_ours_rows_read_the_product_pod_scrape_window() -> None:
    # One source of truth: every ours row sees rates and quantiles over the window the
    # controller's pod scrape uses; a change of either default must move both.
    product = ScrapeConfig().window_s
    assert product == DEFAULT_WINDOW_S
    cfg = CompareConfig(cluster=ClusterConfig(profile=H100))
    assert cfg.window_s == product
    for name in POLICY_NAMES:
        if name.startswith("ours"):
            autoscaler = build_policy(name, 4, 2, cfg)
            assert isinstance(autoscaler, Ours)
            assert autoscaler.scrape.window_s == product, name
    assert ours(2).scrape.window_s == product


def test_a_measured_window_reaches_every_ours_row_and_no_baseline() -> None:
    cfg = CompareConfig(cluster=ClusterConfig(profile=H100), window_s=45.0)
    for name in POLICY_NAMES:
        autoscaler = build_policy(name, 4, 2, cfg)
        scrape = getattr(autoscaler, "scrape", None)
        if name.startswith("ours"):
            assert scrape is not None and scrape.window_s == 45.0, name
        elif scrape is not None:
            assert scrape.window_s != 45.0, name
