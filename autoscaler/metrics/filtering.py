"""Ask a pod for only the metric families an adapter reads: ``/metrics?name[]=...``.

prometheus_client's exposition (``make_asgi_app``/``make_wsgi_app``, what vLLM mounts at
``/metrics`` where its route is prometheus_client's own) answers a ``name[]`` query
parameter with only the samples of those names (`CollectorRegistry.restricted_registry`):
the family's ``# HELP``/``# TYPE`` lines and its samples of a listed name; a family with
no such sample is left out whole. A vLLM V1 0.10 page is 46 kB, of which the families
the vLLM adapter reads are 10 kB: the pod renders, sends and we parse a fifth of it
(docs/metrics.md, "Filtered pages").

The request names *samples*, not families: a counter ``x`` is ``x_total``, a histogram
``x`` is ``x_bucket``, ``x_sum`` and ``x_count`` (prometheus_client compares each
sample's name with the set). A server that ignores the parameter (vLLM versions whose
``/metrics`` route is prometheus-fastapi-instrumentator's, SGLang's and TGI's servers)
answers the whole page, which reads as before. One that answers it with no listed
family at all (prometheus_client before 0.20 behind a multiprocess registry: its
collector has no names to look up) is detected by the scraper, which then reads that
pod's whole page (`pod_scrape.PodScrapeSource`).

`restrict_page` is the same rule applied to a page's text: what such a server answers,
for the test and benchmark pods (tests check it against prometheus_client's own output,
family by family: prometheus_client sends its families in an order of its own).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final
from urllib.parse import quote

# Histogram families read as their buckets, sum and count; counters as ``_total``.
HISTOGRAM_SAMPLES: Final[tuple[str, ...]] = ("_bucket", "_sum", "_count")


def sample_names(
    *, gauges: Iterable[str] = (), counters: Iterable[str] = (), histograms: Iterable[str] = ()
) -> tuple[str, ...]:
    """The sample names prometheus_client exports for these families, in this order."""
    names = list(gauges)
    names += [name + "_total" for name in counters]
    names += [name + suffix for name in histograms for suffix in HISTOGRAM_SAMPLES]
    if len(set(names)) != len(names):
        raise ValueError(f"sample names: {names!r} must not repeat a name")
    return tuple(names)


def name_query(names: Iterable[str]) -> bytes:
    """The query string ``name%5B%5D=<name>&...`` (brackets and colons percent-encoded:
    brackets are not allowed unencoded in a URL's query, RFC 3986)."""
    parts = [f"name%5B%5D={quote(name, safe='')}" for name in names]
    if not parts:
        raise ValueError("names: value () must name at least one sample")
    return "&".join(parts).encode("ascii")


def restrict_page(text: str, names: Iterable[str]) -> str:
    """``text`` as prometheus_client answers ``?name[]=`` for ``names``.

    prometheus_client keeps a metric when one of its samples has a listed name, and
    then sends its ``# HELP``/``# TYPE`` lines and those samples; the ``x_created``
    (``x_gsum``, ``x_gcount``) samples it writes as a family of their own after the
    metric's, sent only when one of them is listed. Here a family is the comment lines
    of one name and the samples after them; ``# EOF`` is kept. A sample's name ends at
    ``{`` or the first space."""
    wanted = frozenset(names)
    out: list[str] = []
    eof = ""
    metric: list[_Block] = []  # a metric's own family, then its _created-like ones
    for block in _blocks(text):
        if block.name == "# EOF":
            eof = block.comments[0]
            continue
        base = metric[0].base if metric else None
        if not (base is not None and block.name in _om_names(base)):
            _restricted(metric, wanted, out)
            metric = []
        metric.append(block)
    _restricted(metric, wanted, out)
    if eof:
        out.append(eof)
    return "".join(out)


_META: Final = frozenset(("HELP", "TYPE", "UNIT"))
_OM_SUFFIXES: Final = ("_created", "_gsum", "_gcount")


class _Block:
    __slots__ = ("base", "comments", "name", "samples")

    def __init__(self, name: str) -> None:
        self.name = name
        self.base = name.removesuffix("_total")  # a counter's metric name
        self.comments: list[str] = []
        self.samples: list[tuple[str, str]] = []  # (sample name, line)


def _om_names(base: str) -> tuple[str, ...]:
    return tuple(base + suffix for suffix in _OM_SUFFIXES)


def _blocks(text: str) -> Iterator[_Block]:
    block: _Block | None = None
    for line in text.splitlines(keepends=True):
        if line.startswith("#"):
            if line.rstrip("\r\n") == "# EOF":
                if block is not None:
                    yield block
                eof = _Block("# EOF")
                eof.comments.append(line)
                yield eof
                block = None
                continue
            words = line.split(None, 3)
            named = words[2] if len(words) > 2 and words[1] in _META else None
            if block is None or (named is not None and (block.samples or named != block.name)):
                if block is not None:
                    yield block
                block = _Block(named if named is not None else "")
            block.comments.append(line)
            continue
        if not line.strip():
            continue
        end = len(line)
        for stop in ("{", " "):
            at = line.find(stop)
            if 0 <= at < end:
                end = at
        if block is None:
            block = _Block(line[:end])
        block.samples.append((line[:end], line))
    if block is not None:
        yield block


def _restricted(metric: list[_Block], wanted: frozenset[str], out: list[str]) -> None:
    """Append what prometheus_client sends of one metric (its families, in order)."""
    kept = [[line for name, line in b.samples if name in wanted] for b in metric]
    if not any(kept):
        return
    for i, (block, lines) in enumerate(zip(metric, kept, strict=True)):
        if i == 0 or lines:  # the metric's own family always, the others when sent
            out += block.comments
            out += lines
