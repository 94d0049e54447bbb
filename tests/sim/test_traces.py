"""Trace loaders and transforms."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from autoscaler.errors import ConfigError
from autoscaler.sim.traces import (
    diurnal_day,
    from_arrays,
    load_trace,
    poisson_trace,
    scale_rate,
    speed_up,
)

TRACES = Path(__file__).resolve().parents[2] / "data" / "traces"
CSV = (
    "TIMESTAMP,ContextTokens,GeneratedTokens\n"
    "2023-11-16 18:15:46.6805900,374,44\n"
    "2023-11-16 18:15:50.9951690,396,109\n"
    "2023-11-16 18:15:51.2224670,879,55"
)


def test_azure_csv_plain_and_gzip_give_seconds_from_first_request(tmp_path: Path) -> None:
    plain = tmp_path / "t.csv"
    plain.write_text(CSV)
    gz = tmp_path / "t.csv.gz"
    gz.write_bytes(gzip.compress(CSV.encode()))
    for path in (plain, gz):
        t = load_trace(path)
        assert len(t) == 3
        assert t.arrival_s[0] == 0.0
        assert t.arrival_s[2] == pytest.approx(51.2224670 - 46.6805900, abs=1e-6)
        assert t.prompt_tokens.tolist() == [374, 396, 879]
        assert t.output_tokens.tolist() == [44, 109, 55]


def test_jsonl_timestamps_are_milliseconds_and_get_sorted(tmp_path: Path) -> None:
    rows = [
        {"timestamp": 2500, "input_length": 10, "output_length": 3},
        {"timestamp": 1000, "input_length": 20, "output_length": 4},
    ]
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    t = load_trace(path)
    assert t.arrival_s.tolist() == [0.0, 1.5]
    assert t.prompt_tokens.tolist() == [20, 10]


def test_bad_rows_name_line_field_and_value(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(CSV + "\n2023-11-16 18:15:52.0,abc,5\n")
    with pytest.raises(ConfigError, match=r"line 5: ContextTokens value 'abc'"):
        load_trace(path)
    path = tmp_path / "bad.jsonl"
    path.write_text('{"timestamp": 1, "input_length": 0, "output_length": 1}\n')
    with pytest.raises(ConfigError, match=r"line 1: input_length value 0 must be >= 1"):
        load_trace(path)
    path.write_text('{"timestamp": 1, "input_length": 3}\n')
    with pytest.raises(ConfigError, match="'output_length' is missing"):
        load_trace(path)
    with pytest.raises(ConfigError, match="does not exist"):
        load_trace(tmp_path / "nope.csv")


def test_speed_up_compresses_time_and_keeps_requests() -> None:
    t = poisson_trace(5.0, 100.0, 100, 10, seed=1)
    fast = speed_up(t, 4.0)
    assert len(fast) == len(t)
    assert fast.duration_s == pytest.approx(t.duration_s / 4)


@pytest.mark.parametrize("factor", [0.3, 1.0, 2.5])
def test_scale_rate_scales_count_and_is_seeded(factor: float) -> None:
    t = poisson_trace(20.0, 500.0, 100, 10, seed=2)
    a, b = scale_rate(t, factor, seed=7), scale_rate(t, factor, seed=7)
    assert len(a) == pytest.approx(factor * len(t), rel=0.05)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert a.duration_s == pytest.approx(t.duration_s, abs=1.0)


def test_diurnal_day_is_quiet_at_night_and_busy_at_the_peak() -> None:
    t = poisson_trace(2.0, 600.0, 100, 10, seed=3)
    day = diurnal_day(t, day_s=7200.0, trough=0.1, seed=4)
    rate = day.rate_per_s(600.0)
    assert day.duration_s <= 7200.0
    night, peak = rate[0], rate[len(rate) // 2]
    assert peak == pytest.approx(2.0, rel=0.2)
    assert night < 0.4 * peak
    again = diurnal_day(t, day_s=7200.0, trough=0.1, seed=4)
    assert np.array_equal(day.arrival_s, again.arrival_s)


def test_from_arrays_rejects_negative_arrival() -> None:
    with pytest.raises(ConfigError, match="arrival_s must be >= 0"):
        from_arrays("x", [-1.0], [1], [1])


def test_shared_conv_trace_loads_whole() -> None:
    t = load_trace(TRACES / "AzureLLMInferenceTrace_conv.csv.gz")
    assert len(t) == 19_366
    assert t.duration_s == pytest.approx(3501.7, abs=0.1)


def test_mixed_rag_chat_is_seeded_bimodal_and_bursty() -> None:
    from autoscaler.sim.traces import mixed_rag_chat

    a, b = mixed_rag_chat(seed=4, duration_s=3600.0), mixed_rag_chat(seed=4, duration_s=3600.0)
    assert np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.prompt_tokens, b.prompt_tokens)
    rag = a.prompt_tokens >= 20_000
    assert 0.25 < rag.mean() < 0.35
    assert a.prompt_tokens[rag].max() <= 60_000
    chat = a.prompt_tokens[~rag]
    assert chat.min() >= 1_000 and chat.max() <= 2_000
    day = mixed_rag_chat(seed=0)  # the benchmark's 3 h
    per_min = np.bincount((day.arrival_s // 60).astype(int), minlength=180)[:180]
    mid = np.arange(180) * 60.0 + 30.0
    swing = 150.0 * (0.4 + 0.6 * (1.0 - np.cos(np.pi * mid / 10_800.0)) / 2.0)
    over = per_min / swing
    assert np.median(over) == pytest.approx(1.0, abs=0.15)  # the swing, outside bursts
    assert (over > 2.0).sum() >= 3  # minutes inside 5-minute bursts at 2.5x
