"""README.md and docs/ describe the product as it is, not how it got there: no "session N",
no commit hashes, no "(issue N)", no dates (history goes to CHANGELOG.md, and a results file
in benchmarks/results/ may record its revision); every relative link points at a file that
exists and every #anchor at a heading of that file; every repository file the prose names
in a path exists (so a removed module cannot stay documented)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SCALE = ROOT / "docs" / "scale.md"

_FENCE = re.compile(r"^(```|~~~)")
_HISTORY = {
    "a session number": re.compile(r"\bsessions? \d+", re.I),
    "an issue number": re.compile(r"\bissues?[- ]\d+", re.I),
    "a date": re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"),
    # 7-40 hex digits with at least one digit and one letter: a commit hash, not a word
    # ("defaced") or a number
    "a commit hash": re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"),
}
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:autoscaler|tests|benchmarks|deploy|charts|scripts|examples|data|docs)"
    r"/[\w./-]*\w)"
)


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            out.append((number, line))
    return out


def history_hits(text: str) -> list[str]:
    """Every history marker in ``text`` (code blocks included: a command quoting a
    revision is history too), as ``line N: what: match``."""
    return [
        f"line {number}: {what}: {m.group(0)!r}"
        for number, line in enumerate(text.splitlines(), 1)
        for what, pattern in _HISTORY.items()
        for m in pattern.finditer(line)
    ]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: links reduced to their text, lower case, every
    character but letters, digits, spaces, ``-`` and ``_`` dropped, spaces as ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return "".join(c for c in text if c.isalnum() or c in " -_").replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """The anchors of a markdown file's headings (repeats get -1, -2 as on GitHub)."""
    seen: dict[str, int] = {}
    out = set()
    for _, line in _prose_lines(path.read_text()):
        m = _HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def broken_links(doc: Path) -> list[tuple[str, Path | None]]:
    """(link, target file) for each relative link whose file or anchor does not exist."""
    broken: list[tuple[str, Path | None]] = []
    for _, line in _prose_lines(doc.read_text()):
        line = re.sub(r"`[^`]*`", "", line)  # inline code is not a link
        for m in _LINK.finditer(line):
            target = m.group(1) or m.group(2)
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
                continue
            path_part, _, anchor = target.partition("#")
            file = (doc.parent / path_part).resolve() if path_part else doc
            if not file.exists():
                broken.append((target, None))
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append((target, file))
    return broken


def missing_paths(doc: Path) -> list[str]:
    """Repository files named in the prose (``autoscaler/...py``, ``benchmarks/...``) that
    do not exist. Only names with a file extension: ``deploy/llm-autoscaler`` in a kubectl
    command is a resource, not a path; globs and placeholders are skipped."""
    out = []
    for number, line in enumerate(doc.read_text().splitlines(), 1):
        for m in _REPO_PATH.finditer(line):
            path = m.group(1).split("::")[0]
            if "." not in path.rsplit("/", 1)[-1] or re.search(r"[*<>{}]", line[m.end() :][:1]):
                continue
            if not (ROOT / path).exists():
                out.append(f"line {number}: {path}")
    return out


def _scale_md_rewritten() -> bool:
    return "envelope" in anchors(SCALE)


# docs/scale.md is rewritten on another branch (headings Settings, Envelope, Sharding,
# Ablation, Reproduce). Until that lands, the old page is a lab notebook and the links to
# its new anchors dangle: these checks are expected to fail, strictly, and run as normal
# tests as soon as the new page is here (nothing to remove then).
_OLD_SCALE_MD = pytest.mark.xfail(
    not _scale_md_rewritten(),
    reason="docs/scale.md not yet rewritten (scalebench branch)",
    strict=True,
)


def _params(check_scale: bool) -> list[object]:
    return [
        pytest.param(d, id=d.name, marks=_OLD_SCALE_MD if d == SCALE and check_scale else ())
        for d in DOCS
    ]


@pytest.mark.parametrize("doc", _params(check_scale=True))
def test_docs_carry_no_history(doc: Path) -> None:
    assert history_hits(doc.read_text()) == []


@pytest.mark.parametrize("doc", _params(check_scale=True))
def test_named_repository_files_exist(doc: Path) -> None:
    assert missing_paths(doc) == []


@pytest.mark.parametrize("doc", _params(check_scale=False))
def test_relative_links_and_anchors_resolve_outside_scale_md(doc: Path) -> None:
    assert [target for target, file in broken_links(doc) if file != SCALE] == []


@_OLD_SCALE_MD
def test_links_to_scale_md_anchors_resolve() -> None:
    broken = [(d.name, target) for d in DOCS for target, file in broken_links(d) if file == SCALE]
    assert broken == []


def test_the_history_check_finds_each_marker_and_spares_ordinary_prose() -> None:
    text = (
        "measured in session 10 on a fast VM\n"
        "fixed in 2840cf5 (issue 16)\n"
        "run on 2026-12-03\n"
        "the 1,000 targets, a 4 MB page, 0.0144 per target, a defaced word, 1234567 rows\n"
    )
    hits = history_hits(text)
    assert [h.split(":")[0] for h in hits] == ["line 1", "line 2", "line 2", "line 3"], hits
    assert {h.split(": ")[1] for h in hits} == set(_HISTORY)


def test_anchors_are_githubs_slugs_and_a_missing_anchor_is_broken(tmp_path: Path) -> None:
    assert slug("Bounds that keep the cold start (`bench_oracle.py`)") == (
        "bounds-that-keep-the-cold-start-bench_oraclepy"
    )
    assert slug("Filtered pages: only the families read (`?name[]=`)") == (
        "filtered-pages-only-the-families-read-name"
    )
    (tmp_path / "a.md").write_text(
        "# Title\n\n## Envelope\n\n```\n# not a heading\n```\n\n## Envelope\n"
        "[ok](#envelope) [ok](#envelope-1) [bad](#not-a-heading) [gone](b.md) [web](https://x)\n"
    )
    assert anchors(tmp_path / "a.md") == {"title", "envelope", "envelope-1"}
    assert [t for t, _ in broken_links(tmp_path / "a.md")] == ["#not-a-heading", "b.md"]
