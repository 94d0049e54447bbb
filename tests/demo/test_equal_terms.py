"""The demo compares the fleets on equal terms and says the result in one line: same
replica limit, TTFT-SLO attainment (a failed request is a miss) and GPU-hours of each,
and the ratio."""

from __future__ import annotations

from autoscaler.demo.compare import SLO_TTFT_S, headline, slo_attainment
from autoscaler.demo.fleets import fleets


def test_both_fleets_have_the_same_replica_limits() -> None:
    ours, keda = fleets("llama")
    assert ours.policy.max_replica_count == keda.policy.max_replica_count
    assert ours.policy.min_replica_count == keda.policy.min_replica_count


def test_attainment_counts_failed_requests_as_misses() -> None:
    assert slo_attainment([0.1, 0.4, 0.6], failed=1, slo_s=0.5) == 0.5
    assert slo_attainment([0.5], failed=0, slo_s=0.5) == 1.0  # within means <=
    assert slo_attainment([], failed=0) is None  # nothing ended: unknown, not 0


def test_headline_states_each_fleets_attainment_gpu_hours_and_the_ratio() -> None:
    line = headline(
        {
            "ours": {"slo_ttft_s": SLO_TTFT_S, "slo_attainment": 0.83, "gpu_seconds": 3852.0},
            "keda": {"slo_ttft_s": SLO_TTFT_S, "slo_attainment": 0.60, "gpu_seconds": 5544.0},
        }
    )
    assert line == (
        "TTFT <= 0.5 s: ours 83.0% on 1.07 GPU-h, keda 60.0% on 1.54 GPU-h: "
        "ours at 0.69x the GPU-hours, +23.0 points"
    )
    assert headline({"ours": {"slo_attainment": None}, "keda": {}}) is None
