"""Smoke run of benchmarks/bench_gpu_variants.py on a few minutes of one trace.

Asserts the table's bookkeeping (the best single type is the 1.00x reference, the offline
optimum its own 0% gap, one-type rows run only their type), never the measured numbers:
those are the benchmark's, run in full.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.scripts import load_bench


def test_tiny_run_writes_a_consistent_table(tmp_path: Path) -> None:
    bench = load_bench("bench_gpu_variants")
    out = tmp_path / "gpu_variants.json"
    assert (
        bench.main(
            ["--scenarios", "conv", "--minutes", "3", "--iterations", "3", "--out", str(out)]
        )
        == 0
    )
    doc = json.loads(out.read_text())
    assert doc["command"].endswith("--scenarios conv --minutes 3 --iterations 3")
    (res,) = doc["results"]
    rows = {r["policy"]: r for r in res["rows"]}
    assert set(rows) == {
        "only h100",
        "only mig-2g.20gb",
        "only l4",
        "greedy (3 variants)",
        "greedy gap-aware (3 variants)",
        "optimised mix",
        "offline optimum",
    }
    assert rows[res["best_single"]]["ratio_to_best_single"] == 1.0
    assert rows["offline optimum"]["gap_to_offline"] == 0.0
    for name, r in rows.items():
        assert r["gpu_dollars"] > 0 and 0.0 <= r["ttft_slo_attainment"] <= 1.0
        if name.startswith("only "):
            used = {v for v, n in r["mean_replicas"].items() if n > 0}
            assert used == {name.removeprefix("only ")}
    # the table printed is the one written
    assert "| conv | offline optimum |" in doc["markdown"]
