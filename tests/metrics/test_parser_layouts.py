"""Layouts: a page whose skeleton was seen before is read by line index, exactly as the
line parser (and the strict parse) reads it; any difference falls back to the parser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.errors import ParseError
from autoscaler.metrics import exposition
from autoscaler.metrics.engines import VLLM_FAMILIES, EngineSnapshot, read_snapshot
from autoscaler.metrics.exposition import LAYOUTS, layout, merge_histogram, parse_page

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
_VALUE = re.compile(r"(?m)^([^#\n][^\n]*) (\S+)$")
_NUMBERS = st.one_of(
    st.integers(0, 10**12).map(lambda v: f"{v}.0"),
    st.floats(0, 1e9, allow_nan=False).map(repr),
    st.integers(-(10**6), 10**6).map(str),
)


def _revalue(text: str, values: list[str]) -> str:
    counter = iter(range(10**9))
    return _VALUE.sub(lambda m: f"{m.group(1)} {values[next(counter) % len(values)]}", text)


def _assert_reads_as_strict(text: str, wanted: list[str]) -> None:
    full = parse_page(text, wanted, strict=True).families
    fast = parse_page(text, wanted).families
    assert set(fast) == {name for name in wanted if name in full}
    for name, family in fast.items():
        assert family.samples == full[name].samples
        assert (family.type, family.line, family.help) == (
            full[name].type,
            full[name].line,
            full[name].help,
        )
        if family.type == "histogram":
            assert merge_histogram(family) == merge_histogram(full[name])


def _layouts_used() -> int:
    return len(LAYOUTS.layouts)


@pytest.fixture
def layout_reads(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Records each layout read: True when it returned the page, False on a fallback."""
    calls: list[bool] = []
    original = layout.Layout.read_values

    def read_values(self: layout.Layout, text: str) -> list[float] | None:
        values = original(self, text)
        calls.append(values is not None)
        return values

    monkeypatch.setattr(layout.Layout, "read_values", read_values)
    return calls


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["vllm_v1_0.10.txt", "vllm_v1_0.10_dp2.txt", "vllm_v0_0.6.txt"]), st.data())
def test_pages_with_new_values_read_through_a_layout_as_strict_parse(
    fixture: str, data: st.DataObject
) -> None:
    exposition.clear_caches()
    base = (FIXTURES / fixture).read_text()
    for _ in range(4):  # the layout is built on the second page and used from the third
        values = data.draw(st.lists(_NUMBERS, min_size=1, max_size=6))
        _assert_reads_as_strict(_revalue(base, values), list(VLLM_FAMILIES))
    assert _layouts_used() == 1


def _three_times(text: str) -> None:
    for _ in range(3):
        parse_page(text, ["m", "x"])


def test_an_unwanted_line_whose_digits_make_it_wanted_is_read(layout_reads: list[bool]) -> None:
    exposition.clear_caches()
    before = "# TYPE m gauge\nm 1\nm1 5\n"
    _three_times(before)
    assert layout_reads == [True]
    after = "# TYPE m gauge\nm 1\nm 5\n"  # same skeleton: m1 -> m
    assert [s.value for s in parse_page(after, ["m", "x"]).families["m"].samples] == [1, 5]
    assert layout_reads == [True, False]


def test_a_label_value_whose_digits_changed_is_read_with_its_new_value(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    page = '# TYPE m histogram\nm_bucket{le="0.1"} 1\nm_bucket{le="+Inf"} 2\nm_count 2\nm_sum 3\n'
    _three_times(page)
    moved = page.replace('le="0.1"', 'le="0.2"')
    merged = merge_histogram(parse_page(moved, ["m", "x"]).families["m"])
    assert merged is not None and merged.bounds == (0.2, float("inf"))
    assert layout_reads == [True, False]


def test_eof_that_appears_where_the_layout_had_none_leaves_the_layout(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    _three_times("# TYPE m gauge\nm 1\n# E1OF\nx 2\n")
    page = parse_page("# TYPE m gauge\nm 1\n# EOF\nx 2\n", ["m", "x"])
    assert page.openmetrics and page.families["x"].samples[0].value == 2
    with pytest.raises(ParseError, match="after '# EOF'"):
        parse_page("# TYPE m gauge\nm 1\n# EOF\nx 2\n", ["m", "x"], strict=True)
    assert layout_reads == [True, False]


@pytest.mark.parametrize(
    ("line", "error", "reads"),
    [
        ("m 1_000", "digit separators", [True]),  # '_' is in the skeleton: no layout
        ("m 1e", "not a float", [True, False]),
        ("m 1.2.3", "not a float", [True, False]),
    ],
)
def test_a_bad_value_on_a_known_layout_reads_as_the_parser_does(
    line: str, error: str, reads: list[bool], layout_reads: list[bool]
) -> None:
    exposition.clear_caches()
    _three_times("# TYPE m gauge\nm 7\nx 1\n")
    page = parse_page(f"# TYPE m gauge\n{line}\nx 1\n", ["m", "x"])
    assert "m" not in page.families
    assert page.dropped["m"].startswith("line 2:") and error in page.dropped["m"]
    assert page.families["x"].samples[0].value == 1
    assert layout_reads == reads


def test_timestamps_and_nan_values_leave_the_layout_and_read_correctly(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    _three_times("# TYPE m gauge\nm 7\n")
    page = parse_page("# TYPE m gauge\nm 7 1700000000\n", ["m", "x"])
    sample = page.families["m"].samples[0]
    assert (sample.value, sample.timestamp) == (7, 1700000000)
    nan = parse_page("# TYPE m gauge\nm NaN\n", ["m", "x"]).families["m"].samples[0].value
    assert nan != nan
    assert layout_reads == [True]  # a timestamp or NaN changes the skeleton: the parser reads it


def test_snapshot_through_a_layout_equals_the_strict_snapshot(layout_reads: list[bool]) -> None:
    exposition.clear_caches()
    base = (FIXTURES / "vllm_v1_0.10_dp2.txt").read_text()
    for k in range(4):
        text = _revalue(base, [f"0.{k}5", "0.5", f"{k}e-3"])
        assert read_snapshot(text, "vllm") == read_snapshot(text, "vllm", strict=True)
    assert layout_reads == [True, True]


def test_pods_whose_label_values_differ_only_in_digits_each_get_a_layout(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    base = (FIXTURES / "vllm_v1_0.10.txt").read_text()
    pods = [base.replace('engine="0"', f'engine="0",instance="10.0.0.{i}:8000"') for i in (1, 2)]
    for k in range(4):
        for pod in pods:
            text = _revalue(pod, [f"{k}.0", f"{k + 1}.5"])
            _assert_reads_as_strict(text, list(VLLM_FAMILIES))
    assert len(LAYOUTS.layouts) == 2
    # the last round: pod 1 tries pod 2's layout (built first) then its own; pod 2 its own
    assert layout_reads[-3:] == [False, True, True]


def _layout() -> layout.Layout:
    (only,) = LAYOUTS.layouts.values()
    return only


def _filler(n: int, tag: str = "f") -> str:
    return "".join(f'{tag}_other{{k="v"}} {i}\n' for i in range(n))


def test_an_ascii_page_is_split_only_in_the_regions_it_compares(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    page = _filler(30) + "# TYPE m gauge\nm 1\n" + _filler(30, "g") + "# TYPE x gauge\nx 2\n"
    _three_times(page)
    regions = _layout().regions
    assert regions is not None and [r[0] for r in regions] == [
        "\n# TYPE m gauge",
        "\n# TYPE x gauge",
    ]
    moved = page.replace(" 1\n", " 100000000000000000000\n").replace(" 2\n", " 3e-7\n")
    read = parse_page(moved, ["m", "x"]).families
    assert [read[n].samples[0].value for n in ("m", "x")] == [1e20, 3e-7]
    assert (read["m"].line, read["x"].line) == (32, 64)
    assert layout_reads == [True, True]


def test_values_far_longer_than_before_are_read_through_the_regions(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    page = _filler(20) + "# TYPE m gauge\n" + "".join(f'm{{a="{i}"}} 1\n' for i in range(50))
    _three_times(page)
    longer = page.replace("} 1\n", "} 1234567890123456.0\n")  # 1 -> 20 characters a line
    assert all(
        s.value == 1234567890123456.0 for s in parse_page(longer, ["m", "x"]).families["m"].samples
    )
    assert layout_reads == [True, True]
    _assert_reads_as_strict(longer, ["m", "x"])


def test_a_run_whose_first_line_is_not_unique_is_found_from_an_earlier_line(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    # "m 1" starts two skeleton lines ("m 1" and "m 2" are both "m "): not an anchor
    page = "m 1\n" + _filler(20) + "m 2\n" + _filler(20, "g") + "# TYPE x gauge\nx 3\n"
    for _ in range(3):
        parse_page(page, ["m", "x"])
    regions = _layout().regions
    assert regions is not None and regions[0][0] == ""  # from the page's first line
    read = parse_page(page.replace("x 3", "x 4"), ["m", "x"]).families
    assert [s.value for s in read["m"].samples] == [1, 2] and read["x"].samples[0].value == 4
    assert layout_reads == [True, True]


def test_a_region_whose_first_line_changed_is_read_by_the_parser(layout_reads: list[bool]) -> None:
    exposition.clear_caches()
    page = _filler(20) + '# HELP m in region 1\n# TYPE m gauge\nm{a="1"} 1\n'
    _three_times(page)
    changed = page.replace("region 1", "region 2")  # same skeleton, anchor not found
    assert parse_page(changed, ["m", "x"]).families["m"].help == "in region 2"
    assert layout_reads == [True, False]


def test_a_non_ascii_page_is_read_through_its_layout_split_whole(
    layout_reads: list[bool],
) -> None:
    exposition.clear_caches()
    page = "# HELP f caf\u00e9\n" + _filler(20) + "# TYPE m gauge\nm 1\n"
    _three_times(page)
    assert _layout().regions is None
    assert parse_page(page.replace("m 1", "m 7"), ["m", "x"]).families["m"].samples[0].value == 7
    assert layout_reads == [True, True]


def _same_snapshot(a: EngineSnapshot, b: EngineSnapshot) -> None:
    assert a == b
    for x, y in ((a.gauges, b.gauges), (a.counters, b.counters), (a.histograms, b.histograms)):
        assert list(x) == list(y)  # key order too: a pod's window rows follow it
