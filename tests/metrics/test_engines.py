"""Adapters read real engine pages into engine-neutral snapshots; absent stays absent."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from autoscaler.errors import ParseError
from autoscaler.metrics.engines import detect_engine, read_snapshot
from autoscaler.metrics.exposition import parse_page
from autoscaler.metrics.signals import length_buckets, observe

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


# Absent stays absent, zero stays zero, per engine (each a one-line change in an adapter).


def test_tgi_zero_queue_is_zero_and_absent_batch_is_absent() -> None:
    snap = read_snapshot("# TYPE tgi_queue_size gauge\ntgi_queue_size 0\n")
    assert snap.gauges == {"waiting": 0.0}
    assert "requests" not in snap.counters


def test_tgi_requests_and_token_totals_come_from_their_own_families() -> None:
    text = _page("tgi.txt")
    snap = read_snapshot(text)
    fams = parse_page(text, None).families
    assert snap.gauges["running"] == _gauge_sum(text, "tgi_batch_current_size")
    assert snap.counters["requests"] == 136  # exported without the _total suffix
    prompt = fams["tgi_request_input_length"].samples
    assert snap.counters["prompt_tokens"] == sum(s.value for s in prompt if s.name.endswith("_sum"))
    assert {"itl", "queue", "e2e"} <= set(snap.histograms)


def test_vllm_v0_kv_name_is_read_when_the_new_name_is_absent() -> None:
    snap = read_snapshot("# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.4\n")
    assert snap.gauges["kv_cache_usage"] == 0.4


def test_vllm_new_kv_name_wins_over_the_v0_name() -> None:
    page = (
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.25\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.75\n"
    )
    assert read_snapshot(page).gauges["kv_cache_usage"] == 0.25


def test_vllm_requests_fall_back_to_request_success_without_ttft() -> None:
    page = "# TYPE vllm:request_success counter\nvllm:request_success_total 7\n"
    assert read_snapshot(page).counters["requests"] == 7


TRT = "# TYPE nv_trt_llm_request_metrics gauge\n"


def _trt(**by_type: float) -> str:
    return TRT + "".join(
        f'nv_trt_llm_request_metrics{{request_type="{k}"}} {v}\n' for k, v in by_type.items()
    )


def test_trtllm_running_is_active_not_scheduled() -> None:
    snap = read_snapshot(_trt(active=5, scheduled=7, waiting=0))
    assert snap.gauges == {"running": 5.0, "waiting": 0.0}


def test_trtllm_running_falls_back_to_scheduled_without_active() -> None:
    snap = read_snapshot(_trt(scheduled=7))
    assert snap.gauges == {"running": 7.0}


def test_trtllm_kv_fraction_label_wins_and_zero_max_blocks_is_absent() -> None:
    kv = "# TYPE nv_trt_llm_kv_cache_block_metrics gauge\n"
    line = 'nv_trt_llm_kv_cache_block_metrics{{kv_cache_block_type="{}"}} {}\n'
    with_fraction = (
        kv + line.format("fraction", 0.3) + line.format("used", 9) + line.format("max", 10)
    )
    assert read_snapshot(with_fraction).gauges["kv_cache_usage"] == 0.3
    no_max = kv + line.format("used", 9) + line.format("max", 0)
    assert "kv_cache_usage" not in read_snapshot(no_max).gauges


def test_trtllm_requests_count_the_tensorrt_llm_model_once() -> None:
    page = (
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="ensemble",version="1"} 10\n'
        'nv_inference_request_success{model="tensorrt_llm",version="1"} 10\n'
        'nv_inference_request_success{model="preprocessing",version="1"} 10\n' + _trt(active=1)
    )
    assert read_snapshot(page).counters["requests"] == 10


def test_sglang_requests_fall_back_to_num_requests_without_ttft() -> None:
    page = "# TYPE sglang:num_requests counter\nsglang:num_requests_total 9\n"
    assert read_snapshot(page).counters["requests"] == 9


# Every fixture read whole: each engine's gauges, counters and histograms (count, sum), and
# the extra histograms `details=True` adds. Values were checked against the pages (the
# targeted tests above derive several of them from the parsed families independently).
GOLDEN = [
    (
        "sglang.txt",
        {"waiting": 3.0, "running": 32.0, "kv_cache_usage": 0.13},
        {"prompt_tokens": 46545.0, "generation_tokens": 4959.0, "requests": 87.0},
        {"ttft": (87.0, 21.100897), "itl": (870.0, 17.335882), "e2e": (87.0, 313.496617)},
        ["e2e", "itl", "ttft"],
    ),
    (
        "sglang_dp2.txt",
        {"waiting": 6.0, "running": 47.0, "kv_cache_usage": 0.725},
        {"prompt_tokens": 141110.0, "generation_tokens": 25338.0, "requests": 206.0},
        {"ttft": (206.0, 59.17048), "itl": (2060.0, 41.135498), "e2e": (206.0, 658.051789)},
        ["e2e", "itl", "ttft"],
    ),
    (
        "tgi.txt",
        {"waiting": 8.0, "running": 6.0},
        {"requests": 136.0, "prompt_tokens": 287073.0, "generation_tokens": 33935.0},
        {"itl": (133.0, 3.999168), "queue": (133.0, 29.069305), "e2e": (133.0, 454.625493)},
        ["e2e", "itl", "queue"],
    ),
    (
        "triton_vllm.txt",
        {"waiting": 1.0, "running": 30.0, "kv_cache_usage": 0.2245},
        {"prompt_tokens": 46670.0, "generation_tokens": 48329.0, "requests": 34.0},
        {"ttft": (34.0, 2.834087), "itl": (85.0, 3.042559)},
        ["itl", "ttft"],
    ),
    (
        "trtllm_triton.txt",
        {"waiting": 3.0, "running": 7.0, "kv_cache_usage": 0.32056419297964417},
        {"requests": 1204.0},
        {},
        [],
    ),
    (
        "vllm_v0_0.6.txt",
        {"waiting": 9.0, "running": 29.0, "kv_cache_usage": 0.515473},
        {
            "prompt_tokens": 252014.0,
            "generation_tokens": 67435.0,
            "preemptions": 2.0,
            "requests": 174.0,
        },
        {"ttft": (174.0, 17.371148), "itl": (1740.0, 56.590254)},
        ["e2e", "itl", "ttft"],
    ),
    (
        "vllm_v1_0.10.txt",
        {"waiting": 11.0, "running": 42.0, "kv_cache_usage": 0.622677},
        {
            "prompt_tokens": 205364.0,
            "generation_tokens": 54690.0,
            "preemptions": 4.0,
            "requests": 145.0,
        },
        {"ttft": (145.0, 16.810833), "itl": (1450.0, 47.076032)},
        ["e2e", "itl", "queue", "ttft"],
    ),
    (
        "vllm_v1_0.10_dp2.txt",
        {"waiting": 17.0, "running": 104.0, "kv_cache_usage": 0.803296},
        {
            "prompt_tokens": 530412.0,
            "generation_tokens": 152467.0,
            "preemptions": 10.0,
            "requests": 355.0,
        },
        {"ttft": (355.0, 41.917524), "itl": (3550.0, 116.620361)},
        ["e2e", "itl", "queue", "ttft"],
    ),
    (
        "vllm_v1_0.11.txt",
        {"waiting": 0.0, "running": 23.0, "kv_cache_usage": 0.812716},
        {
            "prompt_tokens": 188776.0,
            "generation_tokens": 55599.0,
            "preemptions": 5.0,
            "requests": 129.0,
        },
        {"ttft": (129.0, 12.684145), "itl": (1290.0, 42.533197)},
        ["e2e", "itl", "queue", "ttft"],
    ),
    (
        "vllm_v1_openmetrics.txt",
        {"waiting": 5.0, "running": 12.0, "kv_cache_usage": 0.185435},
        {
            "prompt_tokens": 206481.0,
            "generation_tokens": 66907.0,
            "preemptions": 3.0,
            "requests": 155.0,
        },
        {"ttft": (155.0, 16.305877), "itl": (1550.0, 50.392237)},
        ["e2e", "itl", "queue", "ttft"],
    ),
]


@pytest.mark.parametrize(("name", "gauges", "counters", "hists", "detail_keys"), GOLDEN)
def test_fixture_snapshot_is_read_whole(
    name: str,
    gauges: dict[str, float],
    counters: dict[str, float],
    hists: dict[str, tuple[float, float]],
    detail_keys: list[str],
) -> None:
    snap = read_snapshot(_page(name))
    assert dict(snap.gauges) == pytest.approx(gauges)
    assert dict(snap.counters) == pytest.approx(counters)
    assert sorted(snap.histograms) == sorted(hists)
    for key, (count, total) in hists.items():
        h = snap.histograms[key]
        assert (h.total, h.sum) == (count, pytest.approx(total)), key
    assert sorted(read_snapshot(_page(name), details=True).histograms) == detail_keys


# --- edges a one-line change in an adapter would move (mutation testing, docs/testing.md) --


def test_trtllm_request_types_are_summed_across_models() -> None:
    page = TRT + (
        'nv_trt_llm_request_metrics{model="a",request_type="waiting"} 3\n'
        'nv_trt_llm_request_metrics{model="b",request_type="waiting"} 4\n'
    )
    assert read_snapshot(page).gauges["waiting"] == 7


def test_trtllm_requests_without_a_tensorrt_llm_model_sum_the_counter() -> None:
    page = (
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="other",version="1"} 12\n' + _trt(active=1)
    )
    assert read_snapshot(page).counters["requests"] == 12


def test_trtllm_zero_requests_are_zero() -> None:
    page = (
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success{model="other",version="1"} 0\n' + _trt(active=1)
    )
    assert read_snapshot(page).counters["requests"] == 0


def test_trtllm_created_series_are_not_counted_as_requests() -> None:
    page = (
        "# TYPE nv_inference_request_success counter\n"
        'nv_inference_request_success_total{model="tensorrt_llm"} 10\n'
        'nv_inference_request_success_created{model="tensorrt_llm"} 1700000000\n' + _trt(active=1)
    )
    assert read_snapshot(page).counters["requests"] == 10


def test_trtllm_kv_with_max_but_no_used_blocks_is_zero() -> None:
    kv = "# TYPE nv_trt_llm_kv_cache_block_metrics gauge\n"
    page = kv + 'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="max"} 10\n'
    assert read_snapshot(page).gauges["kv_cache_usage"] == 0.0


@pytest.mark.parametrize(
    ("page", "family", "line"),
    [
        (
            "vllm:num_requests_running 1\nvllm:kv_cache_usage_perc 1.5\n",
            "vllm:kv_cache_usage_perc",
            2,
        ),
        ("sglang:num_queue_reqs 1\nsglang:token_usage 1.5\n", "sglang:token_usage", 2),
        (
            'nv_trt_llm_request_metrics{request_type="waiting"} 1\n'
            'nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 1.5\n',
            "nv_trt_llm_kv_cache_block_metrics",
            2,
        ),
    ],
    ids=["vllm", "sglang", "trtllm"],
)
def test_fraction_above_one_is_rejected_naming_family_and_line(
    page: str, family: str, line: int
) -> None:
    with pytest.raises(ParseError) as err:
        read_snapshot(page)
    assert err.value.line == line and f"{family}=1.5" in str(err.value)


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_fraction_bounds_zero_and_one_are_valid(value: float) -> None:
    snap = read_snapshot(f"vllm:kv_cache_usage_perc {value}\n")
    assert snap.gauges["kv_cache_usage"] == value


def test_sglang_tp_ranks_take_the_largest_value_in_any_order() -> None:
    base = 'sglang:num_queue_reqs{dp_rank="0",tp_rank="%s"} %s\n'
    snap = read_snapshot("# TYPE sglang:num_queue_reqs gauge\n" + base % (0, 6) + base % (1, 4))
    assert snap.gauges["waiting"] == 6


def test_sglang_requests_are_first_token_observations_when_present() -> None:
    page = (
        "# TYPE sglang:time_to_first_token_seconds histogram\n"
        'sglang:time_to_first_token_seconds_bucket{le="+Inf"} 5\n'
        "sglang:time_to_first_token_seconds_count 5\n"
        "sglang:time_to_first_token_seconds_sum 1\n"
        "# TYPE sglang:num_requests counter\nsglang:num_requests_total 9\n"
    )
    assert read_snapshot(page).counters["requests"] == 5


def test_sglang_itl_falls_back_to_time_per_output_token() -> None:
    page = (
        "sglang:num_queue_reqs 0\n"
        "# TYPE sglang:time_per_output_token_seconds histogram\n"
        'sglang:time_per_output_token_seconds_bucket{le="+Inf"} 4\n'
        "sglang:time_per_output_token_seconds_count 4\n"
        "sglang:time_per_output_token_seconds_sum 0.2\n"
    )
    assert read_snapshot(page).histograms["itl"].total == 4


def test_vllm_detail_histograms_are_read_whole() -> None:
    snap = read_snapshot(_page("vllm_v1_0.10.txt"), details=True)
    fams = parse_page(_page("vllm_v1_0.10.txt"), None).families
    for key, family in (
        ("e2e", "vllm:e2e_request_latency_seconds"),
        ("queue", "vllm:request_queue_time_seconds"),
    ):
        count = next(s.value for s in fams[family].samples if s.name.endswith("_count"))
        assert snap.histograms[key].total == count


def test_details_are_not_read_unless_asked() -> None:
    assert set(read_snapshot(_page("vllm_v1_0.10.txt")).histograms) == {"ttft", "itl"}
    sglang = read_snapshot(_page("sglang.txt"), details=True)
    assert "queue" not in sglang.histograms


def test_prompt_lengths_are_read_only_when_asked_and_merge_over_pods_per_window() -> None:
    page = _page("vllm_v1_0.10.txt")
    assert "prompt_len" not in read_snapshot(page).histograms  # a plain target: not read
    snap = read_snapshot(page, lengths=True)
    hist = snap.histograms["prompt_len"]
    assert hist.total == 145.0 and hist.sum == pytest.approx(205364.0)
    # two scrapes of two pods: the window's bucket increases, summed by bound
    later = replace(
        snap,
        histograms={
            **snap.histograms,
            "prompt_len": replace(hist, counts=tuple(c + 2 for c in hist.counts)),
        },
    )
    pods = [observe(observe(None, snap, 0.0, 30.0), later, 1.0, 30.0) for _ in range(2)]
    merged = length_buckets(pods)
    assert merged.keys() == set(hist.bounds)
    assert set(merged.values()) == {4.0}
    assert length_buckets([observe(None, read_snapshot(page), 0.0, 30.0)]) == {}


def test_engine_named_explicitly_is_used_and_unknown_engine_refused() -> None:
    page = _page("vllm_v1_0.10.txt")
    assert read_snapshot(page, "sglang").gauges == {}  # no sglang families on a vLLM page
    with pytest.raises(ValueError, match="engine='nope': must be one of auto, vllm, sglang, tgi"):
        read_snapshot(page, "nope")


def test_no_engine_error_is_on_line_one_and_names_the_engines() -> None:
    with pytest.raises(ParseError) as err:
        read_snapshot("# TYPE up gauge\nup 1\n")
    assert err.value.line == 1
    assert str(err.value) == "line 1: no vLLM, SGLang, TGI or TensorRT-LLM metrics on the page"


def test_strict_mode_reports_an_invalid_page_before_anything_else() -> None:
    bad = "vllm:num_requests_waiting 1\nthis is not a sample\n"
    assert read_snapshot(bad).gauges["waiting"] == 1  # fast mode skips foreign lines
    with pytest.raises(ParseError) as err:
        read_snapshot(bad, strict=True)
    assert err.value.line == 2
    with pytest.raises(ParseError) as err:
        read_snapshot("up 1\nthis is not a sample\n", strict=True)  # no engine, still line 2
    assert err.value.line == 2
    sglang = "sglang:num_queue_reqs 1\nthis is not a sample\n"  # one pass only (no vLLM extra)
    with pytest.raises(ParseError) as err:
        read_snapshot(sglang, strict=True)
    assert err.value.line == 2


def test_max_lines_bounds_every_pass() -> None:
    page = _page("vllm_v1_0.10.txt")
    with pytest.raises(ParseError):
        read_snapshot(page, strict=True, max_lines=5)
    with pytest.raises(ParseError):
        read_snapshot(page, details=True, strict=True, max_lines=5)
    old = _page("vllm_v0_0.6.txt")
    with pytest.raises(ParseError):
        read_snapshot(old, strict=True, max_lines=5)


@pytest.mark.parametrize(
    ("text", "engine"),
    [
        ("vllm:num_requests_waiting 1\n", "vllm"),  # marker at position 0
        ("# HELP x\nsglang:num_queue_reqs 1\nvllm:num_requests_waiting 1\n", "sglang"),
        ("# c\nvllm:a 1\ntgi_queue_size 1\nsglang:b 1\n", "vllm"),
        ("# c\ntgi_queue_size 1\n", "tgi"),
        ("x\nnv_trt_llm_request_metrics 1\nx\n", "trtllm"),
        ("# only comments\n", None),
        ("\nvllm:a 1\n", "vllm"),  # marker (with its newline) at position 0
        ("# c\nvllm:x 1\n", "vllm"),  # short page: the search must reach its end
        ("# c\nvllm:a 1\ntgi_queue_size 1\nvllm:b 1\n", "vllm"),  # first occurrence
    ],
)
def test_detect_engine_takes_the_first_engine_on_the_page(text: str, engine: str | None) -> None:
    assert detect_engine(text) == engine


# --- lenient shapes: each page yields the signals it carries ---------------------------


def test_histogram_without_inf_bucket_keeps_the_page_and_takes_inf_from_count() -> None:
    whole = read_snapshot(_page("vllm_v1_0.10.txt"), "vllm")
    page = _page("lenient_only/vllm_no_inf_bucket.txt")
    snap = read_snapshot(page, "vllm")
    assert snap.gauges == whole.gauges  # running/waiting/kv are read
    assert snap.histograms["ttft"] == whole.histograms["ttft"]  # +Inf == its _count
    assert "itl" not in snap.histograms  # neither +Inf nor _count: unusable, dropped
    assert snap.counters == whole.counters
    with pytest.raises(ParseError, match=r"\+Inf"):
        read_snapshot(page, "vllm", strict=True)


def test_page_without_type_lines_reads_histograms_and_counters_from_their_suffixes() -> None:
    whole = read_snapshot(_page("vllm_v1_0.10.txt"), "vllm")
    for _ in range(3):  # line by line, then through a layout
        snap = read_snapshot(_page("vllm_no_type.txt"), "vllm")
        assert snap == whole


def test_trtllm_serve_unprefixed_names_are_read_as_trtllm() -> None:
    page = _page("trtllm_serve.txt")
    assert detect_engine(page) == "trtllm"
    snap = read_snapshot(page)
    assert set(snap.histograms) == {"ttft", "itl", "e2e", "queue"}
    assert snap.histograms["ttft"].count == 240.0
    assert snap.histograms["ttft"].bounds[-1] == math.inf
    assert snap.counters["requests"] == 240.0  # arrivals: TTFT observations
    assert snap.gauges == {}  # trtllm-serve exports no queue or batch gauge: missing, not 0


def test_unprefixed_names_without_trtllm_engine_type_are_not_read() -> None:
    page = _page("trtllm_serve.txt").replace('engine_type="trtllm"', 'engine_type="other"')
    assert detect_engine(page) is None
    assert read_snapshot(page, "trtllm").histograms == {}


def test_triton_pending_request_count_is_the_queue_when_the_backend_sends_none() -> None:
    snap = read_snapshot(_page("trtllm_triton_pending.txt"))
    assert snap.engine == "trtllm"
    assert snap.gauges["waiting"] == 4.0  # the tensorrt_llm model's, not the ensemble's
    assert snap.gauges["running"] == 7.0
    assert read_snapshot(_page("trtllm_triton.txt")).gauges["waiting"] == 3.0  # backend's wins
