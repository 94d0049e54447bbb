"""Adapters read real engine pages into engine-neutral snapshots; absent stays absent."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.errors import ParseError
from autoscaler.metrics.engines import detect_engine, read_snapshot
from autoscaler.metrics.exposition import parse_page

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"


def _page(name: str) -> str:
    return (FIXTURES / name).read_text()


def _gauge_sum(text: str, family: str) -> float:
    return sum(s.value for s in parse_page(text, None).families[family].samples)


@pytest.mark.parametrize(
    ("name", "engine"),
    [
        ("vllm_v0_0.6.txt", "vllm"),
        ("vllm_v1_0.10.txt", "vllm"),
        ("vllm_v1_0.11.txt", "vllm"),
        ("vllm_v1_openmetrics.txt", "vllm"),
        ("triton_vllm.txt", "vllm"),
        ("sglang.txt", "sglang"),
        ("tgi.txt", "tgi"),
        ("trtllm_triton.txt", "trtllm"),
    ],
)
def test_detects_engine_from_metric_prefixes(name: str, engine: str) -> None:
    assert detect_engine(_page(name)) == engine
    assert read_snapshot(_page(name)).engine == engine


def test_vllm_v1_with_both_kv_names_does_not_double_count() -> None:
    text = _page("vllm_v1_0.10.txt")
    snap = read_snapshot(text)
    kv = parse_page(text, None).families["vllm:kv_cache_usage_perc"].samples[0].value
    assert snap.gauges["kv_cache_usage"] == kv <= 1.0


def test_vllm_data_parallel_engines_are_summed_and_fractions_averaged() -> None:
    text = _page("vllm_v1_0.10_dp2.txt")
    snap = read_snapshot(text)
    fams = parse_page(text, None).families
    assert snap.gauges["waiting"] == _gauge_sum(text, "vllm:num_requests_waiting")
    kv = [s.value for s in fams["vllm:kv_cache_usage_perc"].samples]
    assert len(kv) == 2 and snap.gauges["kv_cache_usage"] == pytest.approx(sum(kv) / 2)
    prompt = [s.value for s in fams["vllm:prompt_tokens"].samples if s.name.endswith("_total")]
    assert snap.counters["prompt_tokens"] == sum(prompt)


def test_vllm_counters_ignore_created_series() -> None:
    text = _page("vllm_v1_openmetrics.txt")
    fam = parse_page(text, None).families["vllm:generation_tokens"]
    total = next(s.value for s in fam.samples if s.name == "vllm:generation_tokens_total")
    assert read_snapshot(text).counters["generation_tokens"] == total


def test_old_vllm_reads_itl_from_time_per_output_token() -> None:
    v0 = read_snapshot(_page("vllm_v0_0.6.txt"))
    v11 = read_snapshot(_page("vllm_v1_0.11.txt"))
    assert "itl" in v0.histograms and "itl" in v11.histograms
    tpot = parse_page(_page("vllm_v0_0.6.txt"), None).families["vllm:time_per_output_token_seconds"]
    count = next(s.value for s in tpot.samples if s.name.endswith("_count"))
    assert v0.histograms["itl"].total == count


def test_sglang_dp_ranks_are_summed_once() -> None:
    text = _page("sglang_dp2.txt")
    snap = read_snapshot(text)
    assert snap.gauges["waiting"] == _gauge_sum(text, "sglang:num_queue_reqs")
    usage = [s.value for s in parse_page(text, None).families["sglang:token_usage"].samples]
    assert snap.gauges["kv_cache_usage"] == pytest.approx(sum(usage) / len(usage))


def test_sglang_tensor_parallel_ranks_repeating_a_gauge_are_not_summed() -> None:
    base = 'sglang:num_queue_reqs{dp_rank="0",tp_rank="%s"} 4\n'
    snap = read_snapshot("# TYPE sglang:num_queue_reqs gauge\n" + base % 0 + base % 1)
    assert snap.gauges["waiting"] == 4


def test_tgi_has_no_kv_usage_or_ttft_so_they_stay_absent() -> None:
    snap = read_snapshot(_page("tgi.txt"))
    assert "kv_cache_usage" not in snap.gauges and "ttft" not in snap.histograms
    assert snap.gauges["waiting"] == _gauge_sum(_page("tgi.txt"), "tgi_queue_size")


def test_trtllm_kv_fraction_from_used_over_max_blocks() -> None:
    snap = read_snapshot(_page("trtllm_triton.txt"))
    assert snap.gauges["kv_cache_usage"] == pytest.approx(2000 / 6239)
    assert snap.gauges["waiting"] == 3 and snap.counters["requests"] == 1204


def test_page_without_engine_metrics_is_an_error() -> None:
    with pytest.raises(ParseError):
        read_snapshot("# TYPE up gauge\nup 1\n")


def test_usage_fraction_outside_unit_interval_is_rejected() -> None:
    with pytest.raises(ParseError, match="within"):
        read_snapshot("vllm:kv_cache_usage_perc 85\n")


def test_waiting_missing_from_page_is_absent_not_zero() -> None:
    snap = read_snapshot("vllm:num_requests_running 3\n")
    assert "waiting" not in snap.gauges and snap.gauges["running"] == 3
