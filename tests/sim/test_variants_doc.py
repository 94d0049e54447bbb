"""docs/policy.md "Variants" shows the last run of benchmarks/bench_gpu_variants.py."""

from __future__ import annotations

import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_variants_table_in_the_docs_is_the_results_files() -> None:
    doc = (ROOT / "docs" / "policy.md").read_text()
    results = json.loads((ROOT / "benchmarks" / "results" / "gpu_variants.json").read_text())
    assert results["command"] == "python benchmarks/bench_gpu_variants.py"
    for res in results["results"]:
        for r in res["rows"]:
            reps = ", ".join(f"{k} {v:g}" for k, v in r["mean_replicas"].items() if v)
            row = (
                f"| {res['scenario']} | {r['policy']} | {r['gpu_dollars']:.2f} "
                f"| {100 * r['ttft_slo_attainment']:.2f}% | {r['ratio_to_best_single']:.2f}x "
                f"| {r['attainment_vs_best_single_pt']:+.2f} | {100 * r['gap_to_offline']:+.1f}% "
                f"| {reps} |"
            )
            assert row in doc, row
