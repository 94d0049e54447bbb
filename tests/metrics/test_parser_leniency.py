"""Lenient parser vs prometheus_client: a page it accepts is never rejected whole."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.errors import ParseError
from autoscaler.metrics import exposition
from autoscaler.metrics.engines import VLLM_FAMILIES, read_snapshot
from autoscaler.metrics.exposition import parse_page

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"

_NAMES = st.from_regex(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,10}", fullmatch=True)
_TYPES = st.sampled_from(["counter", "gauge", "histogram", "summary", "untyped", None])
_LABEL_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=6
)
_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-(10**15), 10**15).map(str),
    st.sampled_from(["NaN", "+Inf", "-Inf", "1e3", "-0.0", "0.5E-3"]),
)
_SUFFIXES = {
    "counter": ["_total", ""],
    "gauge": [""],
    "untyped": [""],
    None: [""],
    "histogram": ["_bucket", "_count", "_sum"],
    "summary": ["", "_count", "_sum"],
}


def _escape(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


@st.composite
def _page(draw: st.DrawFn) -> tuple[str, list[str]]:
    names = draw(st.lists(_NAMES, min_size=1, max_size=4, unique=True))
    lines: list[str] = []
    for name in names:
        kind = draw(_TYPES)
        if draw(st.booleans()):
            lines.append(f"# HELP {name} {_escape(draw(_LABEL_TEXT))}")
        if kind is not None:
            lines.append(f"# TYPE {name} {kind}")
        for _ in range(draw(st.integers(1, 4))):
            suffix = draw(st.sampled_from(_SUFFIXES[kind]))
            keys = draw(
                st.lists(st.sampled_from(["a", "b", "le", "quantile"]), unique=True, max_size=3)
            )
            labels = ",".join(f'{k}="{_escape(draw(_LABEL_TEXT))}"' for k in keys)
            head = f"{name}{suffix}" + (f"{{{labels}}}" if keys or draw(st.booleans()) else "")
            tail = f" {draw(_VALUES)}"
            if draw(st.integers(0, 5)) == 0:
                tail += f" {draw(st.integers(0, 2**40))}"
            lines.append(head + tail)
        if draw(st.integers(0, 4)) == 0:
            lines.append(draw(st.sampled_from(["", "# a comment", "#", "  "])))
    wanted = draw(st.lists(st.sampled_from(names), min_size=1, unique=True))
    return "\n".join(lines) + "\n", wanted


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


def _base(name: str) -> str:
    return name.removesuffix("_total")  # prometheus_client renames counter samples


def _by_name(
    samples: list[tuple[str, dict[str, str], float]],
) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in samples:
        out.setdefault(_base(name), []).append((labels, value))
    return out


@settings(max_examples=300, deadline=None)
@given(_page(), st.booleans())
def test_page_prometheus_client_accepts_is_read_with_the_same_values(
    case: tuple[str, list[str]], cold: bool
) -> None:
    text, wanted = case
    try:
        reference = _by_name(
            [
                (s.name, dict(s.labels), s.value)
                for family in text_string_to_metric_families(text)
                for s in family.samples
            ]
        )
    except Exception:  # any rejection by the reference parser
        assume(False)
        return
    if cold:
        exposition.clear_caches()
    for _ in range(3):  # again with warm caches, then through the layout
        try:
            page = parse_page(text, wanted)
        except ParseError as exc:  # pragma: no cover - the failure this test looks for
            raise AssertionError(f"rejected a page prometheus_client accepts: {exc}") from exc
        ours = _by_name(
            [(s.name, dict(s.labels), s.value) for f in page.families.values() for s in f.samples]
        )
        for name, samples in ours.items():  # every value we read is the reference's value
            ref = reference.get(name, [])
            assert [labels for labels, _ in samples] == [labels for labels, _ in ref], name
            assert all(_same(a, b) for (_, a), (_, b) in zip(samples, ref, strict=True)), name
        for name in wanted:  # a declared wanted family's own samples are never lost
            if _base(name) in reference and f"# TYPE {name} " in text:
                assert _base(name) in ours, name


# --- pages cut and spliced from a real one: what prometheus_client accepts, the scrape
# reads (never refused whole); the families it can still use keep their values ----------

_VLLM = (FIXTURES / "vllm_v1_0.10.txt").read_text()
_JUNK = st.sampled_from(
    [
        "",
        "\n",
        "# TYPE vllm:num_requests_running counter\n",
        "# TYPE vllm:time_to_first_token_seconds flux\n",
        'vllm:time_to_first_token_seconds_bucket{le="x"} 1\n',
        "vllm:num_requests_waiting 1_0\n",
        "# EOF\n",
        "x 1\n",
    ]
)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_a_spliced_page_prometheus_client_accepts_is_never_refused_by_the_scrape(
    data: st.DataObject,
) -> None:
    lines = _VLLM.split("\n")
    cut = data.draw(st.lists(st.integers(0, len(lines) - 1), max_size=6, unique=True))
    kept = [line for i, line in enumerate(lines) if i not in cut]
    at = data.draw(st.integers(0, len(kept)))
    text = "\n".join(kept[:at]) + "\n" + data.draw(_JUNK) + "\n".join(kept[at:])
    try:
        reference = {f.name: f for f in text_string_to_metric_families(text)}
    except Exception:  # rejected by the reference parser: nothing to hold ours to
        return
    exposition.clear_caches()
    for _ in range(3):  # line by line, then through a layout
        snapshot = read_snapshot(text, "vllm")  # raises (fails the test) if refused whole
        running = reference.get("vllm:num_requests_running")
        dropped = parse_page(text, VLLM_FAMILIES).dropped
        if running and running.type == "gauge" and running.samples and not dropped:
            assert snapshot.gauges["running"] == sum(s.value for s in running.samples)


FOUR_SHAPES = [
    "lenient_only/vllm_no_inf_bucket.txt",
    "vllm_no_type.txt",
    "trtllm_serve.txt",
    "trtllm_triton_pending.txt",
]


@pytest.mark.parametrize("name", FOUR_SHAPES)
def test_each_lenient_shape_is_a_page_prometheus_client_accepts(name: str) -> None:
    text = (FIXTURES / name).read_text()
    assert list(text_string_to_metric_families(text))
    exposition.clear_caches()
    for _ in range(3):
        read_snapshot(text)  # never refused whole


_PIECES = st.sampled_from(
    [
        *("m", "m_bucket", "m_count", "m_sum", "m_total", "x", "{", "}", ",", " ", "\t", "\n"),
        *('le="1"', 'le="+Inf"', 'a="b"', "1", "2.5", "NaN", "+Inf", "-1", "1e3", "0x1"),
        *("# TYPE m histogram\n", "# TYPE m counter\n", "# TYPE m gauge\n", "# HELP m x\n"),
        *("# EOF\n", "#", '"', "\\", "=", ":", "_", ' # {a="1"} 1'),
    ]
)


@settings(max_examples=1000, deadline=None)
@given(st.lists(_PIECES, max_size=25), st.sampled_from([["m"], ["m", "x", "m_bucket"]]))
def test_any_token_soup_prometheus_client_accepts_is_never_refused_whole(
    parts: list[str], wanted: list[str]
) -> None:
    text = "".join(parts)
    try:
        list(text_string_to_metric_families(text))
    except Exception:  # rejected by the reference parser: nothing to hold ours to
        return
    exposition.clear_caches()
    for _ in range(3):  # line by line, then through a layout
        page = parse_page(text, wanted)  # raises (fails the test) if refused whole
        for family in page.families.values():
            assert family.name in wanted
