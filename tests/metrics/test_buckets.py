"""Quantiles from bucket answers (`autoscaler.metrics.buckets`): Prometheus 2.42's
``histogram_quantile`` edge cases, the matrix path against the scalar one, template
recognition and the decoding of answers (JSON and the skeleton fast path)."""

from __future__ import annotations

import json
import math
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.metrics.buckets import (
    Buckets,
    _rows_quantile,
    bucket_quantile,
    parse_buckets,
    parse_le,
    quantile_spec,
)
from autoscaler.metrics.prometheus import (
    TARGET_LABEL,
    VLLM_QUERIES,
    PrometheusSource,
    _quantile_values,
)

INF = math.inf


def q(quantile: float, *pairs: tuple[float, float]) -> float:
    return bucket_quantile(quantile, pairs)


def test_quantile_interpolates_linearly_inside_its_bucket() -> None:
    # 20 observations: rank 15 is the 5th of 10 in (0.1, 0.5]
    assert q(0.75, (0.1, 10), (0.5, 20), (INF, 20)) == 0.1 + (0.5 - 0.1) * (5 / 10)


def test_lowest_bucket_starts_at_zero_when_its_bound_is_positive() -> None:
    assert q(0.5, (0.1, 10), (0.5, 10), (INF, 10)) == 0.1 * (5 / 10)


def test_lowest_bucket_with_a_bound_at_or_below_zero_answers_that_bound() -> None:
    assert q(0.3, (0.0, 6), (0.5, 8), (INF, 10)) == 0.0
    assert q(0.3, (-1.0, 6), (0.5, 8), (INF, 10)) == -1.0


def test_rank_in_the_inf_bucket_answers_the_highest_finite_bound() -> None:
    assert q(0.99, (0.1, 1), (0.5, 2), (INF, 10)) == 0.5
    assert q(0.5, (0.1, 0), (1.0, 0), (INF, 10)) == 1.0  # every observation above 1


@pytest.mark.parametrize(
    "pairs",
    [
        [(0.1, 0.0), (INF, 0.0)],  # no observation (zero rate)
        [(INF, 5.0)],  # one bucket
        [(0.1, 3.0), (1.0, 5.0)],  # no +Inf bucket
        [],
    ],
    ids=["zero-count", "one-bucket", "no-inf", "empty"],
)
def test_quantile_is_nan_where_prometheus_answers_nan(pairs: list[tuple[float, float]]) -> None:
    assert math.isnan(bucket_quantile(0.5, pairs))


def test_q_outside_zero_one_is_infinite_and_nan_q_is_nan() -> None:
    pairs = [(0.1, 1.0), (INF, 2.0)]
    assert bucket_quantile(-0.1, pairs) == -INF
    assert bucket_quantile(1.1, pairs) == INF
    assert bucket_quantile(-0.1, []) == -INF  # checked before the buckets, as Prometheus
    assert math.isnan(bucket_quantile(math.nan, pairs))


def test_q_zero_over_an_empty_lowest_bucket_is_nan_as_go_divides_zero_by_zero() -> None:
    assert math.isnan(q(0.0, (0.1, 0), (1.0, 0), (INF, 10)))
    assert q(0.0, (0.1, 4), (INF, 10)) == 0.0


def test_non_monotonic_counts_are_raised_to_the_running_maximum() -> None:
    # (0.5, 5) and (1, 8) become 10: rank 6 of 12 falls in (0, 0.1] -> 0.1 * 6/10
    got = q(0.5, (0.1, 10), (0.5, 5), (1.0, 8), (INF, 12))
    assert got == q(0.5, (0.1, 10), (0.5, 10), (1.0, 10), (INF, 12)) == 0.1 * (6 / 10)
    # the +Inf bucket too: 12 -> 20 observations
    assert q(0.9, (0.1, 10), (1.0, 20), (INF, 12)) == 0.1 + 0.9 * ((18 - 10) / 10)


def test_buckets_with_the_same_bound_are_summed() -> None:
    # le="1" from one pod and le="1.0" from another: one bucket for Prometheus
    assert q(0.5, (0.5, 1), (1.0, 2), (1.0, 3), (0.5, 2), (INF, 8)) == q(
        0.5, (0.5, 3), (1.0, 5), (INF, 8)
    )


def test_bucket_order_does_not_matter() -> None:
    pairs = [(INF, 10.0), (0.1, 2.0), (1.0, 7.0), (0.5, 5.0)]
    assert bucket_quantile(0.6, pairs) == bucket_quantile(0.6, sorted(pairs))


def test_nan_bucket_bound_reads_nan() -> None:
    assert math.isnan(q(0.5, (math.nan, 1), (INF, 2)))


_counts = st.lists(
    st.one_of(st.integers(0, 50).map(float), st.floats(0, 100, allow_nan=False)),
    min_size=2,
    max_size=8,
)
_quantiles = st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]), st.floats(0, 1))


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(_counts, min_size=1, max_size=5), qq=_quantiles, low=st.booleans())
def test_row_path_equals_the_scalar_path_bit_for_bit(
    rows: list[list[float]], qq: float, low: bool
) -> None:
    width = min(len(r) for r in rows)
    finite = [0.0 if low else 0.01] + [0.05 * (i + 1) for i in range(width - 2)]
    bounds = (*finite, INF)
    monotonic = [list(accumulate(r[:width], max)) for r in rows]
    got = _rows_quantile(qq, bounds, monotonic)
    want = [bucket_quantile(qq, zip(bounds, r[:width], strict=True)) for r in rows]
    assert [repr(x) for x in got] == [repr(x) for x in want]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0.005", 0.005),
        ("+Inf", INF),
        ("-Inf", -INF),
        ("1e3", 1000.0),
        ("0x1p-2", 0.25),
        ("7", 7.0),
        (".5", 0.5),
    ],
)
def test_le_parses_as_prometheus_parses_it(text: str, value: float) -> None:
    assert parse_le(text) == value


@pytest.mark.parametrize("text", ["", "abc", "1_000", " 1", "1e400", "0x1", "+nan"])
def test_le_prometheus_cannot_parse_is_skipped(text: str) -> None:
    assert parse_le(text) is None


def test_default_quantile_templates_are_computed_from_two_bucket_families() -> None:
    specs = {s: quantile_spec(s, t) for s, t in VLLM_QUERIES.items()}
    computed = {s: spec for s, spec in specs.items() if spec is not None}
    assert set(computed) == {"ttft_p50_s", "ttft_p95_s", "ttft_p99_s", "itl_p95_s"}
    assert [q for q, _ in computed["ttft_p99_s"].branches] == [0.99]
    itl = computed["itl_p95_s"].branches
    assert [b for _, b in itl] == [
        "sum by ($by le) ($(rate(vllm:inter_token_latency_seconds_bucket{$selector}[1m])$))",
        "sum by ($by le) ($(rate(vllm:time_per_output_token_seconds_bucket{$selector}[1m])$))",
    ]
    source = PrometheusSource("http://127.0.0.1:9", {})
    sent = list(source.grouped_queries.values())
    assert len(sent) == 8 + 3 and not any("histogram_quantile" in t for t in sent)


@pytest.mark.parametrize(
    "template",
    [
        'histogram_quantile(0.9, sum by (le) (rate(x_bucket{a="b"}[5m])))',  # no $by
        "histogram_quantile(0.9, sum by ($by le) ($(rate(x_bucket{$selector}[1m])$))) * 1000",
        "histogram_quantile($q, sum by ($by le) ($(rate(x_bucket{$selector}[1m])$)))",
        "histogram_quantile(0.9, sum by ($by le) ($(increase(x_bucket{$selector}[1m])$)))",
    ],
)
def test_other_templates_are_not_recognised_and_go_to_prometheus_as_written(
    template: str,
) -> None:
    assert quantile_spec("s", template) is None
    source = PrometheusSource("http://127.0.0.1:9", {}, {"s": template})
    assert source.grouped_queries == ({"s": template} if "$by" in template else {})


def _answer(series: list[tuple[str, str, str]]) -> bytes:
    """Prometheus' JSON shape, as it prints it: (target, le, value) in namespace "ns"."""
    result = [
        {
            "metric": {"le": le, TARGET_LABEL: target, "namespace": "ns"},
            "value": [1733140000.123, value],
        }
        for target, le, value in series
    ]
    doc = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(doc, separators=(",", ":")).encode()


LES = ("0.1", "1", "+Inf")


def _series(values: dict[str, tuple[float, ...]]) -> list[tuple[str, str, str]]:
    return [
        (t, le, repr(v))
        for le_i, le in enumerate(LES)
        for t, vs in values.items()
        for v in [vs[le_i]]
    ]


def test_same_skeleton_next_tick_decodes_the_new_values_without_json() -> None:
    first = parse_buckets(_answer(_series({"a": (1, 2, 4), "b": (0, 0, 0)})), None)
    assert not isinstance(first, str)
    buckets, layout = first
    assert layout is not None and buckets.quantiles(0.5)[("ns", "a")] == 0.1 + 0.9 * (1 / 1)
    body = _answer(_series({"a": (3, 3, 6), "b": (1, 2, 2)}))
    second = parse_buckets(body, layout)
    assert not isinstance(second, str)
    again, same = second
    assert same is layout and again.groups == [("ns", "a"), ("ns", "b")]
    got = again.quantiles(0.5)
    assert got[("ns", "a")] == 0.1 * (3 / 3) and got[("ns", "b")] == 0.1 * (1 / 1)
    assert got == parse_buckets(body, None)[0].quantiles(0.5)  # type: ignore[index]


def test_answer_with_other_series_is_parsed_again_and_gets_a_new_layout() -> None:
    _, layout = parse_buckets(_answer(_series({"a": (1, 2, 4)})), None)  # type: ignore[misc]
    parsed = parse_buckets(_answer(_series({"a": (1, 2, 4), "c": (2, 2, 2)})), layout)
    assert not isinstance(parsed, str)
    buckets, new = parsed
    assert new is not layout and new is not None
    assert buckets.quantiles(0.5) == {("ns", "a"): 0.1 + 0.9 * (1 / 1), ("ns", "c"): 0.05}


def test_nan_counts_take_the_exact_scalar_path() -> None:
    before = _answer(_series({"a": (1, 2, 4), "b": (1, 1, 1)}))
    _, layout = parse_buckets(before, None)  # type: ignore[misc]
    assert layout is not None
    parsed = parse_buckets(_answer(_series({"a": (1, 2, 4), "b": (1, math.nan, 2)})), layout)
    assert not isinstance(parsed, str)
    # Go's binary search steps over the NaN bucket into +Inf: the highest finite bound
    assert parsed[0].quantiles(0.5)[("ns", "b")] == 1.0
    assert bucket_quantile(0.5, [(0.1, 1), (1.0, math.nan), (INF, 2)]) == 1.0


def test_series_without_a_parseable_le_are_skipped_and_odd_layouts_still_compute() -> None:
    body = _answer(
        [
            ("a", "0.1", "1"),
            ("a", "+Inf", "2"),
            ("a", "oops", "9"),
            ("b", "0.5", "1"),
            ("b", "2", "3"),
            ("b", "+Inf", "3"),
        ]
    )
    parsed = parse_buckets(body, None)
    assert not isinstance(parsed, str)
    got = parsed[0].quantiles(0.5)
    assert got == {("ns", "a"): 0.1, ("ns", "b"): 0.5 + 1.5 * (0.5 / 2)}


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b'{"status":"success","data":{"resultType":"scalar","result":[1,"2"]}}',
        b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{}}]}}',
    ],
)
def test_malformed_bucket_answer_is_an_error(body: bytes) -> None:
    assert isinstance(parse_buckets(body, None), str)


def test_or_takes_the_first_family_with_series_even_when_its_value_is_nan() -> None:
    new = Buckets(
        other={("ns", "idle"): [(0.1, 0.0), (INF, 0.0)], ("ns", "a"): [(0.1, 1.0), (INF, 2.0)]}
    )
    old = Buckets(
        other={("ns", "idle"): [(0.1, 5.0), (INF, 5.0)], ("ns", "old"): [(0.1, 1.0), (INF, 1.0)]}
    )
    spec = quantile_spec("itl_p95_s", VLLM_QUERIES["itl_p95_s"])
    assert spec is not None
    (_, fam_new), (_, fam_old) = spec.branches
    keys = {("ns", n): [f"ns/{n}"] for n in ("idle", "a", "old", "none")}
    got = _quantile_values(spec, {fam_new: new, fam_old: old}, keys)
    # idle: the new family has series (zero rate: NaN) -> missing, not the old family's
    assert got.values == {"ns/a": 0.1, "ns/old": 0.1 * 0.95} and got.error is None
    failed = _quantile_values(spec, {fam_new: new, fam_old: "boom"}, keys)
    assert failed.error == "itl_p95_s: boom" and failed.values == {}
