"""Smoke run of `benchmarks/bench_wake.py --quick` (3 s cold start): a request held at
zero awake gets its first token about one wake after it was sent when a sleeper is
woken, and about one cold start after when a pod must start; the path itself (poke,
decision, wake call, labels, informers, forward) adds well under a second."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.scripts import load_bench


def test_quick_run_times_a_woken_sleeper_against_a_cold_start(tmp_path: Path) -> None:
    out = tmp_path / "wake.json"
    assert load_bench("bench_wake").main(["--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    median, p90, cold = doc["rows"]
    assert (median["wake_s"], p90["wake_s"]) == (0.5, 3.0)  # the calibrated 8B wake
    assert cold["cold_start_s"] == 3.0 and doc["quick"]
    for row in (median, p90, cold):
        wait = row["wake_s"] if row["wake_s"] is not None else row["cold_start_s"]
        assert wait <= row["ttft_min_s"] and row["overhead_p50_s"] < 1.0, row
    assert median["ttft_p50_s"] < p90["ttft_p50_s"] <= cold["ttft_p50_s"] + 1.0
    assert doc["cold_over_wake_p50"] == round(cold["ttft_p50_s"] / median["ttft_p50_s"], 1)
    assert "cold start p50 / woken sleeper" in doc["markdown"]
