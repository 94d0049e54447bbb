"""Smoke run of `benchmarks/bench_serverless.py` at its tiny size (3 models, 1 h).

Asserts what the rows must show whatever the draws: the warm floor holds nothing and is
the most expensive; scale to zero saves GPU-hours and pays a cold start on the first
request; sleepers answer the same first requests in seconds."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.scripts import load_bench


def test_quick_run_writes_rows_that_trade_gpu_hours_for_first_request_ttft(
    tmp_path: Path,
) -> None:
    out = tmp_path / "serverless.json"
    assert load_bench("bench_serverless").main(["--quick", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert set(doc["sizes"]) == {"8b", "70b"}
    for size in doc["sizes"].values():
        rows = {r["row"]: r for r in size["rows"]}
        warm, zero, sleepers = rows["min-1"], rows["scale-to-zero"], rows["sleepers"]
        shared = rows["sleepers, 4 per GPU"]
        assert warm["held"] == 0 and warm["gpu_hours_saved_pct"] == 0.0
        assert zero["gpu_hours"] < warm["gpu_hours"]
        assert zero["first_requests"] == sleepers["first_requests"] > 0
        assert zero["first_ttft_p50_s"] > 10 * sleepers["first_ttft_p50_s"]
        assert zero["cold_starts"] > 0 and sleepers["cold_starts"] == 0
        assert sleepers["gpu_hours"] == warm["gpu_hours"]  # a sleeper holds its GPU
        assert shared["gpu_hours"] < sleepers["gpu_hours"]
    big, small = doc["sizes"]["70b"]["rows"][0], doc["sizes"]["8b"]["rows"][0]
    assert big["gpu_hours"] == 4 * small["gpu_hours"]  # 70B TP4 bills four GPUs
    assert doc["markdown"].count("| min-1 |") == 2
