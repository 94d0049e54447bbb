"""Read target signals from Prometheus with PromQL (for clusters that already scrape pods).

Queries go to Prometheus' HTTP API (``POST /api/v1/query``) over one shared aiohttp
session whose timeout bounds every call (``timeout_s``, sent to Prometheus too, plus one
second on our side), with at most ``max_concurrency`` queries in flight and answers
read up to ``max_answer_bytes``: a hanging or slow Prometheus costs a tick its signals,
never a thread or the event loop. Each signal has a query template; ``$selector`` in a
template is replaced by the target's label selector (e.g. ``namespace="llm",pod=~"vllm-.*"``),
and a query without ``$selector`` is sent as written, so queries copied from a KEDA
ScaledObject work unchanged, e.g. ``sum(vllm:num_requests_waiting{deployment="x"})``.

Fleets: a target given as `WorkloadPods` (namespace + workload name, as the controller
gives them) is read in a batch with the tick's other such targets, one query per signal
per tick for all of them: a template with ``$by`` (every default one) is sent once,
selecting the batch's pods and aggregating ``by (namespace, llm_target)``, where
``llm_target`` is the workload name taken from the pod name by ``label_replace``; the
answer is split back per target (see `render_grouped`, `PrometheusSource`). Quantile
templates (``histogram_quantile`` of a bucket ``rate``, as every default one) are not
sent: their bucket ``sum by (namespace, llm_target, le) (rate(..._bucket[1m]))`` is
fetched once per histogram family per tick and every quantile of that family is
computed here per target with Prometheus' own ``histogram_quantile`` arithmetic
(`autoscaler.metrics.buckets`), so a target reads what ``histogram_quantile`` would
answer, and Prometheus computes the TTFT bucket rates once instead of three times. A
target without series reads missing data; a failed grouped query is an error (unread)
for every target it covered, for every signal computed from it. Templates without
``$by`` are sent per target, as written (quantiles too: Prometheus computes them).

A target over several workloads (``WorkloadPods.others``: a model's variants, a role's
variants) is in the same batch: its workloads are answered as their own groups and its
value is combined here as the query over all its pods would aggregate them (`_combine`:
sums add, min/max, an ``avg`` weighted by a ``count`` companion query sent only while
such a target is in the batch; quantiles from the bucket rates summed per bound).

An empty result or NaN leaves the signal absent (missing data, never 0); a failed query
is reported in ``errors``; an answer out of range (``+Inf``, a negative count) is dropped,
counted in ``rejected`` and makes the target unread this tick (``pods_read`` 0).
Prometheus reads the target as a whole, so ``pods_read`` is the number of pods given
when at least one query answered, else 0.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import urllib.parse
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import aiohttp
import yarl

from autoscaler.errors import AutoscalerError
from autoscaler.metrics.buckets import (
    BucketLayout,
    Buckets,
    Group,
    QuantileSpec,
    bucket_quantile,
    parse_buckets,
    quantile_spec,
)
from autoscaler.metrics.signals import split_valid
from autoscaler.metrics.source import PodEndpoint, TargetReading


def _quantile(q: float, family: str, window: str = "1m") -> str:
    rate = f"rate({family}_bucket{{$selector}}[{window}])"
    return f"histogram_quantile({q}, sum by ($by le) ($({rate}$)))"


def _rate(family: str) -> str:
    return f"sum by ($by) ($(rate({family}{{$selector}}[1m])$))"


_KV: Final = "vllm:kv_cache_usage_perc{$selector} or vllm:gpu_cache_usage_perc{$selector}"
# ``$by``, ``$(`` and ``$)`` make a template groupable (see `render`): per target they
# vanish (``sum by () (x)`` is ``sum(x)``); for a batch of `WorkloadPods` they group by
# namespace and workload, so one query answers every target.
VLLM_QUERIES: Final[Mapping[str, str]] = {
    "waiting": "sum by ($by) ($(vllm:num_requests_waiting{$selector}$))",
    "running": "sum by ($by) ($(vllm:num_requests_running{$selector}$))",
    # `or` keeps the new name where both exist (same labels): never double counted.
    "kv_cache_usage": f"avg by ($by) ($({_KV}$))",
    "kv_cache_usage_max": f"max by ($by) ($({_KV}$))",
    "ttft_p50_s": _quantile(0.5, "vllm:time_to_first_token_seconds"),
    "ttft_p95_s": _quantile(0.95, "vllm:time_to_first_token_seconds"),
    "ttft_p99_s": _quantile(0.99, "vllm:time_to_first_token_seconds"),
    "itl_p95_s": _quantile(0.95, "vllm:inter_token_latency_seconds")
    + " or "
    + _quantile(0.95, "vllm:time_per_output_token_seconds"),
    "arrival_rate_per_s": _rate("vllm:time_to_first_token_seconds_count"),
    "prompt_tokens_per_s": _rate("vllm:prompt_tokens_total"),
    "generation_tokens_per_s": _rate("vllm:generation_tokens_total"),
    "preemptions_per_s": _rate("vllm:num_preemptions_total"),
}
# The same signals with the quantiles read from the per-pod bucket rates recorded by
# deploy/prometheus/recording-rules.yaml (AUTOSCALER_PROMETHEUS_RECORDED_RULES=true): no
# `rate` over the pods' bucket samples in the tick's queries (docs/metrics.md, "Prometheus mode").
RECORDED_RULES: Final[Mapping[str, str]] = {
    family: f"namespace_pod_le:{family.replace(':', '_')}_bucket:rate1m"
    for family in (
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:time_per_output_token_seconds",
    )
}


def _recorded(q: float, family: str) -> str:
    return f"histogram_quantile({q}, sum by ($by le) ($({RECORDED_RULES[family]}{{$selector}}$)))"


RECORDED_QUERIES: Final[Mapping[str, str]] = {
    **VLLM_QUERIES,
    "ttft_p50_s": _recorded(0.5, "vllm:time_to_first_token_seconds"),
    "ttft_p95_s": _recorded(0.95, "vllm:time_to_first_token_seconds"),
    "ttft_p99_s": _recorded(0.99, "vllm:time_to_first_token_seconds"),
    "itl_p95_s": _recorded(0.95, "vllm:inter_token_latency_seconds")
    + " or "
    + _recorded(0.95, "vllm:time_per_output_token_seconds"),
}
TARGET_LABEL: Final = "llm_target"  # added by the grouped queries (label_replace)


def _regex_literal(name: str) -> str:
    """A Kubernetes name as an RE2 literal inside a PromQL string (only ``.`` is special)."""
    return name.replace(".", "\\\\.")


@dataclass(frozen=True, slots=True)
class WorkloadPods:
    """A target = the pods named ``<name>-...`` in ``namespace`` (how Deployments and
    StatefulSets name pods), plus those of the workloads in ``others`` (a model's other
    variants, or a role's: docs/policy.md "Variants"). Targets given this way are read
    together: one query per signal per tick for all of them (`PrometheusSource`)."""

    namespace: str
    name: str
    # Pods left out (sleepers, docs/policy.md#sleepers: idle series that are no load).
    excluded: tuple[str, ...] = ()
    # More workloads whose pods are this target's too: its signals are over all of them
    others: tuple[str, ...] = ()

    @property
    def names(self) -> tuple[str, ...]:
        """Every workload read, longest first (a pod of ``vllm-big`` is not ``vllm``'s)."""
        return _longest_first({self.name, *self.others})

    def selector(self) -> str:
        names = self.names
        prefix = _regex_literal(names[0]) if len(names) == 1 else _alternatives(names)
        out = f'namespace="{self.namespace}",pod=~"{prefix}-.*"'
        return out + _exclusion(self.excluded)


def _longest_first(names: set[str]) -> tuple[str, ...]:
    return tuple(sorted(names, key=lambda n: (-len(n), n)))


def _alternatives(names: Sequence[str]) -> str:
    """``(a|b)``: each name as a literal, longest first (RE2 takes the first that fits)."""
    return f"({'|'.join(_regex_literal(n) for n in names)})"


def _exclusion(pods: Sequence[str]) -> str:
    """``,pod!~"a|b"`` for the pods left out (nothing when none)."""
    if not pods:
        return ""
    return f',pod!~"{"|".join(_regex_literal(p) for p in sorted(set(pods)))}"'


def groupable(template: str) -> bool:
    return "$by" in template


def render(template: str, selector: str) -> str:
    """One target's query: substitute ``$selector`` (PromQL braces make `str.format`
    unusable); the grouping placeholders vanish."""
    out = template.replace("$selector", selector).replace("$by", "")
    return out.replace("$(", "(").replace("$)", ")")


def render_grouped(template: str, targets: Sequence[WorkloadPods]) -> str:
    """One query for all ``targets``: series are selected by namespace and pod-name
    prefix, labelled ``llm_target=<workload>`` (longest name first, so ``vllm-big-x``
    goes to ``vllm-big``, not ``vllm``) and aggregated by (namespace, llm_target)."""
    namespaces = "|".join(sorted({t.namespace for t in targets}))
    pods = _alternatives(_longest_first({n for t in targets for n in t.names})) + "-.*"
    excluded = [p for t in targets for p in t.excluded]
    selector = f'namespace=~"{namespaces}",pod=~"{pods}"' + _exclusion(excluded)
    out = template.replace("$selector", selector).replace("$by", f"namespace,{TARGET_LABEL},")
    relabel = f',"{TARGET_LABEL}","$1","pod","{pods}")'
    return out.replace("$(", "label_replace(").replace("$)", relabel)


_FORM: Final = {"Content-Type": "application/x-www-form-urlencoded"}
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-~")


def _quote(text: str) -> str:
    """`urllib.parse.quote(text, safe="")`, one C-speed `replace` per distinct unsafe
    character: urllib quotes byte by byte in Python, ~7 ms for a grouped query naming
    1,000 workloads (20 kB), 12 queries per tick."""
    out = text.replace("%", "%25")
    for ch in set(text) - _SAFE - {"%"}:
        out = out.replace(ch, urllib.parse.quote(ch, safe=""))
    return out


def _form_body(form: Mapping[str, str]) -> bytes:
    """``application/x-www-form-urlencoded``, as `urllib.parse.urlencode` (quote_via=quote)."""
    return "&".join(f"{name}={_quote(value)}" for name, value in form.items()).encode()


@dataclass(frozen=True, slots=True)
class _Answer:
    signal: str
    value: float | None = None
    error: str | None = None


def _value(signal: str, doc: Any) -> _Answer:
    """One number from a query answer: a one-series vector or a scalar; no series is
    missing data; several series mean the query is not aggregated (an error)."""
    data = doc.get("data") if isinstance(doc, dict) else None
    kind = data.get("resultType") if isinstance(data, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    try:
        if kind == "scalar" and isinstance(result, list):
            values = [float(result[1])]
        elif kind == "vector" and isinstance(result, list):
            values = [float(series["value"][1]) for series in result]
        else:
            return _Answer(signal, error=f"{signal}: unexpected answer {doc!r:.120}")
    except (KeyError, IndexError, TypeError, ValueError):
        return _Answer(signal, error=f"{signal}: unexpected result {result!r:.120}")
    if len(values) != 1:
        err = None if not values else f"{signal}: {len(values)} series, expected 1"
        return _Answer(signal, error=err)
    return _Answer(signal, None if math.isnan(values[0]) else values[0])


@dataclass(slots=True)
class _Grouped:
    """One grouped query's answer split per target key: ``values`` holds the targets with
    a number (no series, or NaN: missing data, so absent); ``error`` fails every target
    (the query failed or its answer was malformed); ``key_errors`` names targets with
    several series. Plain dicts of floats: no object per target per signal per tick."""

    signal: str
    values: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    key_errors: dict[str, str] | None = None
    # the groups of targets over several workloads (`WorkloadPods.others`), as answered
    # (NaN kept), and those with several series: combined per target by `_combine`
    groups: dict[Group, float] | None = None
    duplicated: set[Group] | None = None


def _grouped_values(
    signal: str,
    doc: Any,
    keys: Mapping[tuple[str, str], list[str]],
    wanted: frozenset[Group] = frozenset(),
) -> _Grouped:
    """Demultiplex a grouped answer to target keys: one series per (namespace,
    llm_target); a target without a series is missing data (no value, no error). The
    ``wanted`` groups (workloads of multi-workload targets) are kept as answered."""
    data = doc.get("data") if isinstance(doc, dict) else None
    result = data.get("result") if isinstance(data, dict) else None
    if (
        not isinstance(data, dict)
        or data.get("resultType") != "vector"
        or not isinstance(result, list)
    ):
        return _Grouped(signal, error=f"{signal}: unexpected answer {doc!r:.120}")
    values: dict[str, float] = {}
    seen: set[tuple[str, str]] = set()
    duplicates: dict[str, str] | None = None
    groups: dict[Group, float] | None = {} if wanted else None
    duplicated: set[Group] | None = set() if wanted else None
    for series in result:
        try:
            labels = series["metric"]
            group = (labels.get("namespace", ""), labels.get(TARGET_LABEL, ""))
            value = float(series["value"][1])
        except (KeyError, IndexError, TypeError, ValueError, AttributeError):
            return _Grouped(signal, error=f"{signal}: unexpected series {series!r:.120}")
        if groups is not None and duplicated is not None and group in wanted:
            if group in groups:
                duplicated.add(group)
            groups[group] = value
        targets = keys.get(group)
        if targets is None:  # pods of a workload no target reads (same name, other ns)
            continue
        if group in seen:
            if duplicates is None:
                duplicates = {}
            for k in targets:
                values.pop(k, None)
                duplicates[k] = f"{signal}: several series for {group}"
            continue
        seen.add(group)
        if value == value:  # NaN is missing data
            for k in targets:
                values[k] = value
    return _Grouped(signal, values, key_errors=duplicates, groups=groups, duplicated=duplicated)


@dataclass(slots=True)
class _Batch:
    """One tick's grouped answers (target key -> signal -> answer). ``open`` until the
    fetch starts: reads arriving in the same event-loop turn join it."""

    t: float
    targets: dict[str, WorkloadPods]
    consumed: set[str] = field(default_factory=set)
    open: bool = True
    task: asyncio.Task[list[_Grouped]] | None = None


@dataclass(slots=True)
class _Rendered:
    """A batch's target set and what depends on it only: each grouped query's form
    field, urlencoded, and (namespace, workload) -> target keys. Kept while the next
    tick's batch has the same targets (the steady state), so a tick does not re-render,
    re-sort and re-quote 12 queries naming every workload."""

    targets: list[tuple[str, WorkloadPods]]  # (key, workload), in batch order
    queries: dict[str, bytes]
    keys: dict[tuple[str, str], list[str]]  # targets over one workload
    bucket_queries: dict[str, bytes]  # bucket query template -> its form field
    # targets over several workloads (variants, roles): key -> its (namespace, workload)
    # groups, whose answers are combined here; the groups; the ``count`` companions of
    # ``avg`` signals (their weights), sent only while there is such a target
    unions: dict[str, tuple[Group, ...]] = field(default_factory=dict)
    wanted: frozenset[Group] = frozenset()
    counts: dict[str, bytes] = field(default_factory=dict)


class PrometheusSource:
    """`MetricSource` backed by PromQL; ``selectors`` maps target key -> label selector
    (a string, queries one target at a time) or `WorkloadPods` (read in batches).
    Create and use it inside a running event loop (the session is made on first use).

    Batching: the first read of a tick by a `WorkloadPods` target fetches the groupable
    signals (templates with ``$by``) for every `WorkloadPods` target read before, one
    query per signal; the other targets' reads that tick take their answers from that
    batch. A key reads a batch once: its next read (next tick), or a batch older than
    ``batch_max_age_s`` and no longer fetching, starts a new one. A target first seen
    mid-tick gets a batch of its own. Answers of grouped queries may hold one series per
    target: their size cap is ``max_answer_bytes`` plus ``grouped_bytes_per_target`` per
    target in the query; bucket answers (one series per target per bucket) are capped at
    ``max_answer_bytes`` plus ``bucket_bytes_per_target`` per target.

    Quantile templates among the groupable ones (`autoscaler.metrics.buckets`) are
    computed from one bucket query per histogram family: ``grouped_queries`` names what a
    batch sends (the other groupable templates by signal, then the bucket queries by
    their template).
    """

    def __init__(
        self,
        url: str,
        selectors: Mapping[str, str | WorkloadPods] | Callable[[str], str | WorkloadPods],
        queries: Mapping[str, str] = VLLM_QUERIES,
        *,
        timeout_s: float = 5.0,
        max_concurrency: int = 32,
        max_answer_bytes: int = 1024 * 1024,
        grouped_bytes_per_target: int = 2048,
        bucket_bytes_per_target: int = 16384,
        batch_max_age_s: float = 0.5,
        eval_time: Callable[[], float] | None = None,
    ) -> None:
        if not timeout_s > 0 or max_concurrency < 1:
            raise ValueError(f"timeout_s={timeout_s} must be > 0, max_concurrency >= 1")
        self.url = url
        self.queries = dict(queries)
        self._grouped: dict[str, str] = {}
        self._quantiles: list[QuantileSpec] = []
        self._singles: dict[str, str] = {}
        for signal, template in self.queries.items():
            spec = quantile_spec(signal, template) if groupable(template) else None
            if spec is not None:
                self._quantiles.append(spec)
            elif groupable(template):
                self._grouped[signal] = template
            else:
                self._singles[signal] = template
        # how a multi-workload target's answer is combined from its workloads' (the
        # template's outer aggregation), and the ``count`` weights of ``avg`` signals
        self._combiners = {sig: _combiner(tpl) for sig, tpl in self._grouped.items()}
        self._counts = {
            sig: "count" + tpl.lstrip()[len("avg") :]
            for sig, tpl in self._grouped.items()
            if self._combiners[sig] == "avg"
        }
        families = [t for spec in self._quantiles for _, t in spec.branches]
        self._families = list(dict.fromkeys(families))  # each bucket query once
        self.grouped_queries = {**self._grouped, **{t: t for t in self._families}}
        self._layouts: dict[str, BucketLayout] = {}  # bucket query -> last answer's layout
        self._selector = selectors if callable(selectors) else selectors.__getitem__
        self._endpoint = yarl.URL(url.rstrip("/") + "/api/v1/query")
        self._timeout_s = timeout_s
        self._max_concurrency = max_concurrency
        self._max_answer_bytes = max_answer_bytes
        self._grouped_bytes_per_target = grouped_bytes_per_target
        self._bucket_bytes_per_target = bucket_bytes_per_target
        self._batch_max_age_s = batch_max_age_s
        self._eval_time = eval_time  # Unix s sent as `time` (pins evaluation: tests)
        # Prometheus is told timeout_s; up to one more second covers the network.
        self._total_s = timeout_s + min(timeout_s, 1.0)
        self._semaphore: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None
        self._known: dict[str, WorkloadPods] = {}  # keys read as WorkloadPods
        self._excluded: dict[str, tuple[str, ...]] = {}  # key -> pods left out (sleepers)
        self._batch: _Batch | None = None
        self._rendered: _Rendered | None = None
        self.queries_sent = 0  # PromQL queries posted (tests and benchmarks count them)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._semaphore = asyncio.Semaphore(self._max_concurrency)
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._max_concurrency),
                timeout=aiohttp.ClientTimeout(total=self._total_s),
                cookie_jar=aiohttp.DummyCookieJar(),
            )
        return self._session

    def _body(self, query: bytes) -> bytes:
        """The form for one query (``query`` urlencoded, as `_form_body` encodes it)."""
        body = b"query=" + query + b"&timeout=" + f"{int(self._timeout_s * 1000)}ms".encode()
        if self._eval_time is not None:
            body += b"&time=" + f"{self._eval_time():.3f}".encode()
        return body

    async def _post_raw(self, promql: str | bytes, limit: int) -> bytes:
        """A 200 answer's body; ``promql`` as text, or already urlencoded (bytes: a
        cached grouped query). Any other status raises, with Prometheus' error."""
        session = self._client()
        assert self._semaphore is not None
        self.queries_sent += 1
        query = promql if isinstance(promql, bytes) else _quote(promql).encode()
        request = self._body(query)
        async with (
            self._semaphore,
            session.post(self._endpoint, data=request, headers=_FORM) as resp,
        ):
            if resp.content_length is not None and resp.content_length > limit:
                raise AutoscalerError(f"answer larger than {limit} bytes")
            body = bytearray()
            while chunk := await resp.content.readany():
                body += chunk
                if len(body) > limit:
                    raise AutoscalerError(f"answer larger than {limit} bytes")
            if resp.status != 200:
                _document(resp.status, body)  # raises with Prometheus' error
                raise AutoscalerError(f"HTTP {resp.status}")
            return bytes(body)

    async def _post(self, promql: str | bytes, limit: int) -> Any:
        return _document(200, await self._post_raw(promql, limit))

    async def _fetch(self, signal: str, promql: str | bytes, limit: int) -> Any:
        """The answer document, or an error message (str)."""
        try:
            return await self._post(promql, limit)
        except TimeoutError:
            return f"{signal}: timeout after {self._total_s:g}s"
        except (aiohttp.ClientError, AutoscalerError, OSError) as exc:
            return f"{signal}: {type(exc).__name__}: {exc}"

    async def _buckets(self, family: str, query: bytes, n_targets: int) -> Buckets | str:
        """One bucket query's answer per (namespace, llm_target), or an error message."""
        label = _family_label(family)
        limit = self._max_answer_bytes + self._bucket_bytes_per_target * n_targets
        try:
            body = await self._post_raw(query, limit)
            parsed = parse_buckets(body, self._layouts.get(family))
        except TimeoutError:
            return f"{label}: timeout after {self._total_s:g}s"
        except (aiohttp.ClientError, AutoscalerError, OSError) as exc:
            return f"{label}: {type(exc).__name__}: {exc}"
        if isinstance(parsed, str):
            return f"{label}: {parsed}"
        buckets, layout = parsed
        if layout is None:
            self._layouts.pop(family, None)
        else:
            self._layouts[family] = layout
        return buckets

    async def _one(self, signal: str, promql: str) -> _Answer:
        doc = await self._fetch(signal, promql, self._max_answer_bytes)
        return _Answer(signal, error=doc) if isinstance(doc, str) else _value(signal, doc)

    async def _group(
        self,
        signal: str,
        query: bytes,
        n_targets: int,
        keys: Mapping[tuple[str, str], list[str]],
        wanted: frozenset[Group] = frozenset(),
    ) -> _Grouped:
        limit = self._max_answer_bytes + self._grouped_bytes_per_target * n_targets
        doc = await self._fetch(signal, query, limit)
        if isinstance(doc, str):  # a failed grouped query: unread for every target in it
            return _Grouped(signal, error=doc)
        return _grouped_values(signal, doc, keys, wanted)

    def _render(self, targets: dict[str, WorkloadPods]) -> _Rendered:
        """The batch's queries, re-rendered only when its target set changed."""
        items = list(targets.items())
        cached = self._rendered
        if cached is not None and cached.targets == items:
            return cached
        workloads = [t for _, t in items]
        keys: dict[tuple[str, str], list[str]] = {}  # (namespace, workload) -> target keys
        unions: dict[str, tuple[Group, ...]] = {}
        for key, t in targets.items():
            if t.others and len(t.names) > 1:
                unions[key] = tuple((t.namespace, n) for n in t.names)
            else:
                keys.setdefault((t.namespace, t.name), []).append(key)
        queries = {
            sig: _quote(render_grouped(tpl, workloads)).encode()
            for sig, tpl in self._grouped.items()
        }
        bucket_queries = {
            tpl: _quote(render_grouped(tpl, workloads)).encode() for tpl in self._families
        }
        counts = {
            sig: _quote(render_grouped(tpl, workloads)).encode()
            for sig, tpl in (self._counts.items() if unions else ())
        }
        wanted = frozenset(g for groups in unions.values() for g in groups)
        self._rendered = _Rendered(items, queries, keys, bucket_queries, unions, wanted, counts)
        return self._rendered

    async def _fetch_batch(self, batch: _Batch) -> list[_Grouped]:
        await asyncio.sleep(0)  # one loop turn: the tick's other reads join the batch
        batch.open = False
        r = self._render(batch.targets)
        n = len(batch.targets)
        plain = [self._group(sig, q, n, r.keys, r.wanted) for sig, q in r.queries.items()]
        counts = [self._group(f"{sig} count", q, n, {}, r.wanted) for sig, q in r.counts.items()]
        families = [self._buckets(t, q, n) for t, q in r.bucket_queries.items()]
        answers: list[Any] = await asyncio.gather(*plain, *counts, *families)
        grouped: list[_Grouped] = answers[: len(plain)]
        weights = dict(zip(r.counts, answers[len(plain) : len(plain) + len(counts)], strict=True))
        buckets = dict(zip(r.bucket_queries, answers[len(plain) + len(counts) :], strict=True))
        for g in grouped if r.unions else ():
            _combine(g, r.unions, self._combiners.get(g.signal), weights.get(g.signal))
        return grouped + [_quantile_values(s, buckets, r.keys, r.unions) for s in self._quantiles]

    def _start_batch(self, now: float, targets: dict[str, WorkloadPods]) -> _Batch:
        batch = _Batch(now, targets)
        batch.task = asyncio.ensure_future(self._fetch_batch(batch))
        return batch

    async def _batched(self, key: str, target: WorkloadPods, now: float) -> list[_Grouped]:
        """This tick's grouped answers for ``key`` (see the class docstring)."""
        self._known[key] = target
        b = self._batch
        # A batch still fetching is fresh whatever its age: with a slow Prometheus a
        # tick's reads spread beyond batch_max_age_s, and starting another batch would
        # send every query for every target again (N=1000: 250 queries per tick).
        in_flight = b is not None and b.task is not None and not b.task.done()
        fresh = b is not None and (in_flight or now - b.t <= self._batch_max_age_s)
        if b is not None and fresh and key not in b.consumed and (key in b.targets or b.open):
            b.targets[key] = target
            batch = b
        elif b is not None and fresh and key not in b.targets:  # new target mid-tick
            batch = self._start_batch(now, {key: target})
        else:
            targets = {}
            for k in list(self._known):
                sel = target if k == key else self._selector_or_none(k)
                if isinstance(sel, WorkloadPods):
                    targets[k] = self._known[k] = sel
                else:
                    del self._known[k]
            batch = self._batch = self._start_batch(now, targets)
        batch.consumed.add(key)
        assert batch.task is not None
        # shield: one reader cancelled (its reconcile) must not cancel the others' fetch
        return await asyncio.shield(batch.task)

    def exclude_pods(self, key: str, pods: Sequence[str]) -> None:
        """Leave ``pods`` (names) out of ``key``'s queries from its next read on: a
        sleeper's idle series are neither load nor capacity, and averaged in they would
        pull the target's per-replica values down. Only for `WorkloadPods` targets (a
        string selector is the user's own)."""
        names = tuple(sorted(set(pods)))
        if names:
            self._excluded[key] = names
        else:
            self._excluded.pop(key, None)

    def _target(self, key: str) -> str | WorkloadPods:
        target = self._selector(key)
        excluded = self._excluded.get(key)
        if excluded and isinstance(target, WorkloadPods):
            return replace(target, excluded=excluded)
        return target

    def _selector_or_none(self, key: str) -> str | WorkloadPods | None:
        try:
            return self._target(key)
        except KeyError:
            return None

    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        target = self._target(key)
        if isinstance(target, WorkloadPods) and self.grouped_queries:
            singles, batched = self._singles, [self._batched(key, target, now)]
        else:
            singles, batched = self.queries, []
        one = []
        if singles:
            selector = target.selector() if isinstance(target, WorkloadPods) else target
            one = [self._one(sig, render(tpl, selector)) for sig, tpl in singles.items()]
        if not one and batched:  # the default queries: no task per read
            return _reading(now, pods, [], key, await batched[0])
        parts = await asyncio.gather(self._answers(one), *batched)
        grouped: list[_Grouped] = parts[1] if batched else []
        return _reading(now, pods, parts[0], key, grouped)

    @staticmethod
    async def _answers(calls: list[Coroutine[Any, Any, _Answer]]) -> Any:
        return list(await asyncio.gather(*calls))

    def forget(self, key: str) -> None:
        """Stop batching a deleted target."""
        self._known.pop(key, None)
        self._excluded.pop(key, None)

    async def close(self) -> None:
        if self._batch is not None and self._batch.task is not None:
            self._batch.task.cancel()
            self._batch = None
        if self._session is not None:
            await self._session.close()
            self._session = None


def _document(status: int, body: bytes | bytearray) -> Any:
    """A successful answer's JSON document; raises for anything else."""
    try:
        doc = json.loads(body)
    except ValueError:
        head = bytes(body[:120])
        raise AutoscalerError(f"HTTP {status}: not JSON: {head!r}") from None
    ok = isinstance(doc, dict) and doc.get("status") == "success"
    if status != 200 or not ok:
        detail = doc.get("error", doc) if isinstance(doc, dict) else doc
        raise AutoscalerError(f"HTTP {status}: {detail!r:.200}")
    return doc


_FAMILY: Final = re.compile(r"(?:rate\(|\$\()([a-zA-Z_:][a-zA-Z0-9_:]*)[{\[]")


def _family_label(template: str) -> str:
    """A bucket query's metric name (for error messages)."""
    m = _FAMILY.search(template)
    return m.group(1) if m else template


def _quantile_values(
    spec: QuantileSpec,
    answers: Mapping[str, Buckets | str],
    keys: Mapping[Group, list[str]],
    unions: Mapping[str, tuple[Group, ...]] | None = None,
) -> _Grouped:
    """One quantile signal per target key from the batch's bucket answers: the first
    branch whose answer has the target's group gives its value (PromQL ``or``); NaN is
    missing data; a failed bucket query fails the signal for every target (as the
    ``histogram_quantile`` query would have failed). A target over several workloads
    (``unions``) reads the quantile of its workloads' bucket rates summed per bound."""
    per_branch: list[dict[Group, float]] = []
    branches: list[tuple[float, Buckets]] = []
    for q, family in spec.branches:
        answer = answers[family]
        if isinstance(answer, str):
            return _Grouped(spec.signal, error=f"{spec.signal}: {answer}")
        per_branch.append(answer.quantiles(q))
        branches.append((q, answer))
    combined: dict[str, float] = {}
    for key, groups in (unions or {}).items():
        for q, buckets in branches:
            pairs = [buckets.pairs(g) for g in groups]
            if any(p is not None for p in pairs):
                value = bucket_quantile(q, [b for p in pairs if p is not None for b in p])
                if value == value:
                    combined[key] = value
                break
    values: dict[str, float] = {}
    for group, targets in keys.items():
        for quantiles in per_branch:
            if group in quantiles:
                value = quantiles[group]
                if value == value:  # NaN is missing data
                    for k in targets:
                        values[k] = value
                break
    values.update(combined)
    return _Grouped(spec.signal, values)


_OUTER: Final = re.compile(r"\s*(sum|count|min|max|avg) by \(\$by\) ")


def _combiner(template: str) -> str | None:
    """The outer aggregation of a groupable template when it wraps the whole query
    (``sum by ($by) (...)``): how one target's value over several workloads follows from
    each workload's. None: not combinable (such a target reads an error for it)."""
    m = _OUTER.match(template)
    text = template.rstrip()
    if m is None or not text.endswith(")") or text[m.end() : m.end() + 1] != "(":
        return None
    depth = 0
    for i in range(m.end(), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return m.group(1) if i == len(text) - 1 else None
    return None


def _combine(
    g: _Grouped, unions: Mapping[str, tuple[Group, ...]], op: str | None, weights: _Grouped | None
) -> None:
    """Each multi-workload target's value from its workloads' answers, as the query
    over all its pods would aggregate them: sums (and counts) add, min and max of the
    workloads', an average weighted by each workload's series count (the ``count``
    companion query). No workload answered: missing data; NaN stays NaN (missing)."""
    if g.error is not None or g.groups is None:
        return
    for key, groups in unions.items():
        present = [(x, g.groups[x]) for x in groups if x in g.groups]
        err = None
        if any(x in (g.duplicated or ()) for x, _ in present):
            err = f"{g.signal}: several series for a workload of {key}"
        elif op is None and present:
            err = f"{g.signal}: cannot combine {key}'s workloads: not a sum, count, min, max or avg"
        elif present:
            values = [v for _, v in present]
            value = math.nan
            if op in ("sum", "count"):
                value = sum(values)
            elif op in ("min", "max"):
                numbers = [v for v in values if v == v]
                value = (min if op == "min" else max)(numbers) if numbers else math.nan
            elif weights is None or weights.error is not None or weights.groups is None:
                err = f"{g.signal}: no series counts to average {key}'s workloads" + (
                    f" ({weights.error})" if weights is not None and weights.error else ""
                )
            else:
                n = [weights.groups.get(x) for x, _ in present]
                if any(c is None for c in n):
                    err = f"{g.signal}: no series count for a workload of {key}"
                else:
                    counts = [c or 0.0 for c in n]
                    total = sum(counts)
                    if total > 0:
                        value = sum(v * c for v, c in zip(values, counts, strict=True)) / total
            if err is None and value == value:
                g.values[key] = value
        if err is not None:
            if g.key_errors is None:
                g.key_errors = {}
            g.key_errors[key] = err


def _reading(
    now: float,
    pods: Sequence[PodEndpoint],
    results: list[_Answer],
    key: str = "",
    grouped: Sequence[_Grouped] = (),
) -> TargetReading:
    """One target's reading from its own queries' answers (``results``) and its share of
    the batch's grouped answers (``grouped``, looked up by ``key``)."""
    raw = {a.signal: a.value for a in results if a.value is not None}
    errors = [a.error for a in results if a.error is not None]
    for g in grouped:
        if g.error is not None:
            errors.append(g.error)
            continue
        value = g.values.get(key)
        if value is not None:
            raw[g.signal] = value
        elif g.key_errors is not None and key in g.key_errors:
            errors.append(g.key_errors[key])
    answered = len(errors) < len(results) + len(grouped)
    signals, bad = split_valid(raw, len(pods))
    rejected: dict[str, int] = {}
    for v in bad:
        errors.append(f"rejected {v}")
        rejected[v.reason] = rejected.get(v.reason, 0) + 1
    # An answer out of range means some pod reported one: which pod Prometheus does
    # not say, so the whole target counts as unread (scale up allowed, never down).
    return TargetReading(
        t=now,
        signals=signals,
        pods_read=len(pods) if answered and not bad else 0,
        pods_expected=len(pods),
        errors=tuple(errors),
        rejected=rejected,
    )
