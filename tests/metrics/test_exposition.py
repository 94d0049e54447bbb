"""Parser: agrees with prometheus_client on real pages, rejects invalid ones with a line."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.errors import ParseError
from autoscaler.metrics.engines import VLLM_FAMILIES
from autoscaler.metrics.exposition import merge_histogram, parse_page

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
PAGES = sorted(p for p in FIXTURES.glob("*.txt") if "openmetrics" not in p.name)


def _reference(text: str) -> dict[str, list[tuple[str, dict[str, str], float]]]:
    out: dict[str, list[tuple[str, dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name, []).extend((s.name, dict(s.labels), s.value) for s in fam.samples)
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_strict_parse_matches_prometheus_client_on_engine_pages(path: Path) -> None:
    text = path.read_text()
    ours = parse_page(text, None).families
    ref = {name: samples for name, samples in _reference(text).items() if samples}
    assert set(ours) == set(ref)  # (a HELP line alone makes an empty family there)
    for name, samples in ref.items():
        got = [(s.name, dict(s.labels), s.value) for s in ours[name].samples]
        assert len(got) == len(samples)
        for (n1, l1, v1), (n2, l2, v2) in zip(got, samples, strict=True):
            # prometheus_client renames a 0.0.4 counter sample `x` to `x_total`
            same_name = n1 == n2 or (ours[name].type == "counter" and n1 + "_total" == n2)
            assert same_name and l1 == l2 and _same(v1, v2)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_fast_parse_returns_exactly_the_wanted_families_of_strict_parse(path: Path) -> None:
    text = path.read_text()
    full = parse_page(text, None).families
    wanted = sorted(full)[::3]
    fast = parse_page(text, wanted).families
    assert set(fast) == set(wanted)
    for name in wanted:
        assert fast[name].samples == full[name].samples
        assert fast[name].type == full[name].type
        assert fast[name].line == full[name].line


def test_openmetrics_page_counts_created_series_apart_from_totals() -> None:
    text = (FIXTURES / "vllm_v1_openmetrics.txt").read_text()
    page = parse_page(text, ["vllm:prompt_tokens"])
    fam = page.families["vllm:prompt_tokens"]
    assert page.openmetrics and fam.type == "counter"
    assert {s.name for s in fam.samples} == {
        "vllm:prompt_tokens_total",
        "vllm:prompt_tokens_created",
    }


def test_label_escapes_are_decoded_in_both_modes() -> None:
    text = 'm{a="x\\"y",b="c\\\\d",c="e\\nf",d="} {,"} 1\n'
    for page in (parse_page(text, None), parse_page(text, ["m"])):
        assert dict(page.families["m"].samples[0].labels) == {
            "a": 'x"y',
            "b": "c\\d",
            "c": "e\nf",
            "d": "} {,",
        }


def test_special_values_exponents_and_timestamps_parse() -> None:
    text = '# TYPE g gauge\ng{x="1"} NaN\ng{x="2"} +Inf 1700000000000\ng{x="3"} -1.5e-3\n'
    samples = parse_page(text, ["g"]).families["g"].samples
    assert math.isnan(samples[0].value)
    assert samples[1].value == math.inf and samples[1].timestamp == 1700000000000
    assert samples[2].value == -0.0015


def test_histogram_lines_in_any_order_merge_by_le() -> None:
    text = (
        "# TYPE h histogram\n"
        'h_count{e="0"} 3\nh_sum{e="0"} 1.5\nh_bucket{e="0",le="+Inf"} 3\n'
        'h_bucket{e="0",le="0.5"} 1\nh_bucket{e="1",le="0.5"} 2\nh_bucket{e="1",le="+Inf"} 4\n'
    )
    hist = merge_histogram(parse_page(text, ["h"]).families["h"])
    assert hist is not None
    assert hist.bounds == (0.5, math.inf) and hist.counts == (3.0, 7.0)


def test_exemplars_are_accepted_and_ignored() -> None:
    text = (
        "# TYPE h histogram\n"
        'h_bucket{le="1"} 2 # {trace_id="abc"} 0.3 1520879607.789\n'
        'h_bucket{le="+Inf"} 2\n# EOF\n'
    )
    page = parse_page(text, ["h"])
    assert [s.value for s in page.families["h"].samples] == [2.0, 2.0]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("<html><body>502 Bad Gateway</body></html>\n", 1),
        ('# TYPE m gauge\nm 1\nm{a="1" 2\n', 3),
        ("# TYPE m gauge\nm abc\n", 2),
        ("# TYPE m gauge\nm 1_000\n", 2),
        ("# TYPE m gauge\n# TYPE m counter\nm 1\n", 2),
        ("# TYPE m flux\nm 1\n", 1),
        ('m{a="1",a="2"} 1\n', 1),
        ("m 1 2 3\n", 1),
        ("# TYPE m gauge\nm 1\n# EOF\nm 2\n", 4),
        ('m{1a="x"} 1\n', 1),
    ],
)
def test_invalid_pages_raise_in_strict_mode_and_drop_the_family_when_lenient(
    text: str, line: int
) -> None:
    with pytest.raises(ParseError) as exc:
        parse_page(text, ["m"], strict=True)
    assert exc.value.line == line
    with pytest.raises(ParseError):
        parse_page(text, None)
    if text.startswith("<html>"):  # not an exposition page: refused whole in both modes
        with pytest.raises(ParseError):
            parse_page(text, ["m"])
        return
    lenient = parse_page(text, ["m"])
    if "EOF" in text:  # strict-only rule: what follows # EOF is read, as prometheus_client does
        assert [s.value for s in lenient.families["m"].samples] == [1.0, 2.0]
        return
    assert "m" not in lenient.families
    assert lenient.dropped["m"].startswith("line ")


def test_histogram_without_inf_bucket_is_an_error_not_zero() -> None:
    page = parse_page('# TYPE h histogram\nh_bucket{le="1"} 2\n', ["h"])
    with pytest.raises(ParseError, match=r"\+Inf"):
        merge_histogram(page.families["h"])


_label_value = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=8
)
_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=True, width=64), st.integers(-(10**12), 10**12)
)


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def _pages(draw: st.DrawFn) -> tuple[str, dict[str, list[tuple[dict[str, str], float]]]]:
    names = draw(
        st.lists(
            st.from_regex(r"[a-z_][a-z0-9_:]{0,8}", fullmatch=True),
            min_size=1,
            max_size=4,
            unique=True,
        )
    )
    lines: list[str] = []
    expected: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name in names:
        lines.append(f"# TYPE {name} gauge")
        for _ in range(draw(st.integers(1, 3))):
            labels = draw(
                st.dictionaries(st.sampled_from(["a", "b", "le_x"]), _label_value, max_size=3)
            )
            value = float(draw(_values))
            body = ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items())
            lines.append(f"{name}{{{body}}} {value!r}" if labels else f"{name} {value!r}")
            expected.setdefault(name, []).append((labels, value))
    return "\n".join(lines) + "\n", expected


@settings(max_examples=150, deadline=None)
@given(_pages())
def test_generated_valid_pages_round_trip_in_both_modes(
    case: tuple[str, dict[str, list[tuple[dict[str, str], float]]]],
) -> None:
    text, expected = case
    for page in (parse_page(text, None), parse_page(text, list(expected))):
        for name, samples in expected.items():
            got = [(dict(s.labels), s.value) for s in page.families[name].samples]
            assert got == samples


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_broken_pages_only_ever_raise_parse_error(data: st.DataObject) -> None:
    base = (FIXTURES / "vllm_v1_0.11.txt").read_text()
    pos = data.draw(st.integers(0, len(base) - 1))
    junk = data.draw(st.text(max_size=6))
    cut = data.draw(st.integers(0, 6))
    text = base[:pos] + junk + base[pos + cut :]
    for families in (None, ["vllm:num_requests_waiting", "vllm:time_to_first_token_seconds"]):
        try:
            page = parse_page(text, families)
            for fam in page.families.values():
                if fam.type == "histogram":
                    merge_histogram(fam)
        except ParseError:
            pass


# --- every page, whether read through a layout or line by line, reads as the strict
# parse of the same families reads it ---------------------------------------------------


def _assert_fast_matches_strict(text: str, wanted: list[str]) -> None:
    full = parse_page(text, wanted, strict=True).families
    fast = parse_page(text, wanted).families
    assert set(fast) == {name for name in wanted if name in full}
    for name, family in fast.items():
        assert family.samples == full[name].samples
        assert family.type == full[name].type
        assert family.line == full[name].line


def test_fast_parse_follows_declarations_that_change_between_pages() -> None:
    histogram = '# HELP m h\n# TYPE m histogram\nm_bucket{le="+Inf"} 1\nm_count 1\nm_sum 2\n'
    pages = [
        histogram,
        histogram.replace("TYPE m histogram", "TYPE m gauge"),
        histogram.replace("# HELP m h\n# TYPE m histogram\n", ""),
        histogram,
        "# TYPE m counter\nm_total 3\n# TYPE m_created gauge\nm_created 1\nm_count 2\n",
        "# TYPE m_total counter\nm_total 3\nm_created 1\n",
    ]
    for text in pages + pages:
        _assert_fast_matches_strict(text, ["m", "m_created", "m_count"])


def test_fast_parse_reads_a_family_split_in_two_groups_whole() -> None:
    text = '# TYPE m gauge\nm{a="1"} 1\n# TYPE x gauge\nx 5\nm{a="2"} 2\nx_other 1\nm{a="3"} 3\n'
    for _ in range(2):
        _assert_fast_matches_strict(text, ["m", "x"])
        assert [s.value for s in parse_page(text, ["m"]).families["m"].samples] == [1, 2, 3]


def test_wanted_line_after_eof_is_refused_strictly_and_read_leniently() -> None:
    text = '# TYPE m gauge\nm 1\n# TYPE x gauge\nx 1\n# EOF\nm{a="2"} 2\n'
    for _ in range(2):
        with pytest.raises(ParseError) as exc:
            parse_page(text, ["m"], strict=True)
        assert exc.value.line == 6
        assert [s.value for s in parse_page(text, ["m"]).families["m"].samples] == [1, 2]


def test_timestamps_are_read_and_a_bad_value_drops_its_family_naming_the_line() -> None:
    assert parse_page('m{a="1"} 5\n', ["m"]).families["m"].samples[0].value == 5
    sample = parse_page('m{a="1"} 5 1700000000\n', ["m"]).families["m"].samples[0]
    assert (sample.value, sample.timestamp) == (5, 1700000000)
    for bad in ('m{a="1"} 1_000\n', 'm{a="1"} abc\n', 'x 1\nm{a="1"} \n'):
        with pytest.raises(ParseError) as exc:
            parse_page(bad, ["m"], strict=True)
        assert exc.value.line == bad.count("\n")
        lenient = parse_page(bad + "# TYPE n gauge\nn 7\n", ["m", "n"])
        assert "m" not in lenient.families
        assert lenient.dropped["m"].startswith(f"line {bad.count(chr(10))}:")
        assert lenient.families["n"].samples[0].value == 7


def _blocks(text: str) -> list[str]:
    """A page cut into families' blocks (each from its HELP line)."""
    parts = text.split("\n# HELP ")
    return [parts[0] + "\n"] + ["# HELP " + p + "\n" for p in parts[1:]]


_VALUE = re.compile(r"(?m)^([^#\n][^\n]*) (\S+)$")


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_reordered_pages_with_new_values_read_as_strict_parse_reads_them(
    data: st.DataObject,
) -> None:
    base = (FIXTURES / "vllm_v1_0.10.txt").read_text().rstrip("\n")
    blocks = _blocks(base)
    order = data.draw(st.permutations(range(len(blocks))))
    kept = data.draw(st.lists(st.booleans(), min_size=len(blocks), max_size=len(blocks)))
    values = data.draw(st.lists(_values, min_size=1, max_size=8))
    text = "".join(blocks[i] for i in order if kept[i])
    counter = iter(range(10**9))
    text = _VALUE.sub(lambda m: f"{m.group(1)} {values[next(counter) % len(values)]!r}", text)
    names = sorted(parse_page(base, None).families)
    suffixed = [n + s for n in names[:40:4] for s in ("_total", "_count", "_created", "_bucket")]
    extra = data.draw(st.lists(st.sampled_from(names + suffixed), max_size=6))
    for _ in range(3):  # cold caches, warm caches, then through the layout
        _assert_fast_matches_strict(text, [*VLLM_FAMILIES, *extra])
