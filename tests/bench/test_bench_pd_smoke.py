"""Smoke run of benchmarks/bench_pd.py on a few minutes of one trace.

Asserts the table's bookkeeping (aggregated is the 1.00x reference, every disaggregated
row splits its GPU-hours into the two pools and prices them, the fixed fleets meet their
goals), never the measured numbers: those are the benchmark's, run in full.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.scripts import load_bench


def test_tiny_run_writes_a_consistent_table(tmp_path: Path) -> None:
    bench = load_bench("bench_pd")
    out = tmp_path / "pd.json"
    assert bench.main(["--only", "code", "--minutes", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["command"] == 'python benchmarks/bench_pd.py --only "code" --minutes 3'
    (res,) = doc["results"]
    rows = res["rows"]
    assert rows[0]["deployment"] == "aggregated (ours)"
    assert rows[0]["ratio_to_aggregated"] == 1.0
    assert len(rows) == 1 + len(bench.DISAGG_ROWS)
    for r in rows[1:]:
        assert r["gpu_hours"] == pytest.approx(
            r["gpu_hours_prefill"] + r["gpu_hours_decode"], abs=2e-4
        )
        assert r["ratio_to_aggregated"] == pytest.approx(
            r["gpu_dollars"] / rows[0]["gpu_dollars"], abs=1e-3
        )
        # $4 per GPU-hour; a slice's hours already count a third of a GPU
        assert r["gpu_dollars"] == pytest.approx(4.0 * r["gpu_hours"], abs=2e-3)
    assert any("MIG" in r["deployment"] for r in rows)  # code's 8k contexts fit a slice
    fleets = res["fixed_fleets"]
    assert fleets["aggregated"]["ttft"] >= fleets["ttft_goal"]
    assert fleets["disagg"]["ttft"] >= fleets["ttft_goal"]
    assert fleets["disagg"]["itl"] >= fleets["itl_goal"]
    assert "| code (0.5 s / 100 ms) | aggregated (ours) |" in doc["markdown"]
