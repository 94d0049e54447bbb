"""Engine adapters: one exposition page -> an engine-neutral `EngineSnapshot`.

A snapshot holds what one pod reported at one scrape, still cumulative (counters and
histogram buckets as exported); `signals.py` turns snapshots over time into rates and
windowed quantiles. A metric the page does not export is absent from the snapshot,
never zero. Names, types, labels and the versions where they changed: docs/metrics.md.

Aggregation inside one page (one pod): gauges are summed over series (vLLM data-parallel
engines, Triton model versions), fractions are averaged over series, histograms are
summed by ``le``. SGLang repeats scheduler gauges on every tensor/pipeline rank of one
data-parallel rank, so its gauges are first de-duplicated per ``dp_rank`` (max) and then
summed (counts) or averaged (fractions) over data-parallel ranks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

from autoscaler.errors import ParseError
from autoscaler.metrics.exposition import Family, HistogramData, Page, merge_histogram, parse_page
from autoscaler.metrics.filtering import name_query, sample_names

EngineName = Literal["vllm", "sglang", "tgi", "trtllm"]
ENGINES: Final[tuple[str, ...]] = ("vllm", "sglang", "tgi", "trtllm")

# Snapshot keys (engine-neutral).
GAUGES: Final[tuple[str, ...]] = ("waiting", "running", "kv_cache_usage")
COUNTERS: Final[tuple[str, ...]] = ("requests", "prompt_tokens", "generation_tokens", "preemptions")
HISTOGRAMS: Final[tuple[str, ...]] = ("ttft", "itl", "e2e", "queue")


@dataclass(frozen=True, slots=True)
class EngineSnapshot:
    """One pod's metrics at one scrape: gauges now, counters/histograms cumulative."""

    engine: str
    gauges: Mapping[str, float] = field(default_factory=dict)
    counters: Mapping[str, float] = field(default_factory=dict)
    histograms: Mapping[str, HistogramData] = field(default_factory=dict)


def _sum_samples(family: Family | None, sample_name: str | None = None) -> float | None:
    if family is None:
        return None
    name = sample_name or family.name
    values = [value for sample, _, value, _ in family.samples if sample == name]
    return sum(values) if values else None


def _mean_samples(family: Family | None) -> float | None:
    if family is None:
        return None
    name = family.name
    values = [value for sample, _, value, _ in family.samples if sample == name]
    return sum(values) / len(values) if values else None


def _counter(family: Family | None) -> float | None:
    """A counter's value: ``x_total`` samples, or ``x`` when exported without the suffix."""
    if family is None:
        return None
    total = _sum_samples(family, family.name + "_total")
    return total if total is not None else _sum_samples(family, family.name)


def _fraction(value: float | None, name: str, line: int) -> float | None:
    if value is not None and not (0.0 <= value <= 1.0):
        raise ParseError(f"{name}={value}: a usage fraction must be within [0, 1]", line)
    return value


def _histogram(family: Family | None, strict: bool) -> HistogramData | None:
    """`merge_histogram`, except that outside strict mode a histogram it cannot use (a
    bucket without a float ``le``, a series with neither ``+Inf`` nor ``_count``) is
    missing data, not a broken page: the pod's other signals are still read."""
    try:
        return merge_histogram(family)
    except ParseError:
        if strict:
            raise
        return None


def _put(target: dict[str, float], key: str, value: float | None) -> None:
    if value is not None:
        target[key] = value


# --- vLLM -------------------------------------------------------------------------------

_VLLM_GAUGES: Final[tuple[str, ...]] = (
    "vllm:num_requests_waiting",
    "vllm:num_requests_running",
    "vllm:kv_cache_usage_perc",
    "vllm:gpu_cache_usage_perc",
)
_VLLM_HISTOGRAMS: Final[tuple[str, ...]] = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
)
# Prompt lengths: read only for a target whose variants have a maxModelLen (the length
# classes of policy/variants.py), asked for with ``lengths`` (+1.7 kB on the filtered
# 0.10 fixture page).
VLLM_LENGTH_FAMILIES: Final[tuple[str, ...]] = ("vllm:request_prompt_tokens",)
VLLM_LENGTH_SAMPLES: Final[tuple[str, ...]] = sample_names(histograms=VLLM_LENGTH_FAMILIES)
_VLLM_COUNTERS: Final[tuple[str, ...]] = (
    "vllm:prompt_tokens",
    "vllm:generation_tokens",
    "vllm:num_preemptions",
    "vllm:request_success",
)
VLLM_FAMILIES: Final[tuple[str, ...]] = _VLLM_GAUGES + _VLLM_HISTOGRAMS + _VLLM_COUNTERS
# Older pages (V0, V1 < 0.10) have only the time-per-output-token histogram; it is read
# in a second pass only when inter_token_latency is absent, to keep the fast path small.
VLLM_FALLBACK_FAMILIES: Final[tuple[str, ...]] = ("vllm:time_per_output_token_seconds",)
VLLM_DETAIL_FAMILIES: Final[tuple[str, ...]] = (
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
)
# What a pod scrape asks vLLM for (`filtering`): the samples of VLLM_FAMILIES and the
# fallback (a page with both latency histograms, 0.10, sends both; 2.7 of its 10 kB).
VLLM_REQUEST_SAMPLES: Final[tuple[str, ...]] = sample_names(
    gauges=_VLLM_GAUGES,
    counters=_VLLM_COUNTERS,
    histograms=_VLLM_HISTOGRAMS + VLLM_FALLBACK_FAMILIES,
)


def _vllm(page: Page, extra: Page | None, strict: bool) -> EngineSnapshot:
    f = page.families
    gauges: dict[str, float] = {}
    _put(gauges, "waiting", _sum_samples(f.get("vllm:num_requests_waiting")))
    _put(gauges, "running", _sum_samples(f.get("vllm:num_requests_running")))
    # V1 0.9-0.10 export both KV names with the same value: prefer the new one, never add.
    kv = f.get("vllm:kv_cache_usage_perc") or f.get("vllm:gpu_cache_usage_perc")
    if kv is not None:
        _put(gauges, "kv_cache_usage", _fraction(_mean_samples(kv), kv.name, kv.line))
    counters: dict[str, float] = {}
    _put(counters, "prompt_tokens", _counter(f.get("vllm:prompt_tokens")))
    _put(counters, "generation_tokens", _counter(f.get("vllm:generation_tokens")))
    _put(counters, "preemptions", _counter(f.get("vllm:num_preemptions")))
    hist: dict[str, HistogramData] = {}
    ttft = _histogram(f.get("vllm:time_to_first_token_seconds"), strict)
    if ttft is not None:
        hist["ttft"] = ttft
    itl = _histogram(f.get("vllm:inter_token_latency_seconds"), strict)
    if itl is None and extra is not None:
        itl = _histogram(extra.families.get("vllm:time_per_output_token_seconds"), strict)
    if itl is not None:
        hist["itl"] = itl
    prompt_len = _histogram(f.get("vllm:request_prompt_tokens"), strict)
    if prompt_len is not None:
        hist["prompt_len"] = prompt_len
    if extra is not None:
        for key, name in (
            ("e2e", "vllm:e2e_request_latency_seconds"),
            ("queue", "vllm:request_queue_time_seconds"),
        ):
            h = _histogram(extra.families.get(name), strict)
            if h is not None:
                hist[key] = h
    # Arrivals: requests reaching their first token (TTFT observations) are counted as
    # soon as they are admitted, unlike request_success which counts completions.
    if ttft is not None and ttft.count is not None:
        counters["requests"] = ttft.count
    else:
        _put(counters, "requests", _counter(f.get("vllm:request_success")))
    return EngineSnapshot("vllm", gauges, counters, hist)


# --- SGLang -----------------------------------------------------------------------------

SGLANG_FAMILIES: Final[tuple[str, ...]] = (
    "sglang:num_queue_reqs",
    "sglang:num_running_reqs",
    "sglang:token_usage",
    "sglang:time_to_first_token_seconds",
    "sglang:inter_token_latency_seconds",
    "sglang:time_per_output_token_seconds",
    "sglang:prompt_tokens",
    "sglang:generation_tokens",
    "sglang:num_requests",
    "sglang:e2e_request_latency_seconds",
)


def _per_dp_rank(family: Family | None) -> list[float]:
    """One value per data-parallel rank (tp/pp ranks of one dp rank repeat the value)."""
    if family is None:
        return []
    ranks: dict[str, float] = {}
    for s in family.samples:
        if s.name != family.name:
            continue
        rank = s.labels.get("dp_rank", "")
        ranks[rank] = max(ranks.get(rank, s.value), s.value)
    return list(ranks.values())


def _sglang(page: Page, extra: Page | None, strict: bool) -> EngineSnapshot:
    f = page.families
    gauges: dict[str, float] = {}
    for key, name in (("waiting", "sglang:num_queue_reqs"), ("running", "sglang:num_running_reqs")):
        values = _per_dp_rank(f.get(name))
        if values:
            gauges[key] = sum(values)
    usage = _per_dp_rank(f.get("sglang:token_usage"))
    if usage:
        fam = f["sglang:token_usage"]
        _put(gauges, "kv_cache_usage", _fraction(sum(usage) / len(usage), fam.name, fam.line))
    counters: dict[str, float] = {}
    _put(counters, "prompt_tokens", _counter(f.get("sglang:prompt_tokens")))
    _put(counters, "generation_tokens", _counter(f.get("sglang:generation_tokens")))
    hist: dict[str, HistogramData] = {}
    ttft = _histogram(f.get("sglang:time_to_first_token_seconds"), strict)
    if ttft is not None:
        hist["ttft"] = ttft
    itl = _histogram(f.get("sglang:inter_token_latency_seconds"), strict) or _histogram(
        f.get("sglang:time_per_output_token_seconds"), strict
    )
    if itl is not None:
        hist["itl"] = itl
    e2e = _histogram(f.get("sglang:e2e_request_latency_seconds"), strict)
    if e2e is not None:
        hist["e2e"] = e2e
    if ttft is not None and ttft.count is not None:
        counters["requests"] = ttft.count
    else:
        _put(counters, "requests", _counter(f.get("sglang:num_requests")))
    return EngineSnapshot("sglang", gauges, counters, hist)


# --- TGI --------------------------------------------------------------------------------

TGI_FAMILIES: Final[tuple[str, ...]] = (
    "tgi_queue_size",
    "tgi_batch_current_size",
    "tgi_request_count",
    "tgi_request_mean_time_per_token_duration",
    "tgi_request_queue_duration",
    "tgi_request_duration",
    "tgi_request_input_length",
    "tgi_request_generated_tokens",
)


def _tgi(page: Page, extra: Page | None, strict: bool) -> EngineSnapshot:
    f = page.families
    gauges: dict[str, float] = {}
    _put(gauges, "waiting", _sum_samples(f.get("tgi_queue_size")))
    _put(gauges, "running", _sum_samples(f.get("tgi_batch_current_size")))
    counters: dict[str, float] = {}
    # tgi_request_count is incremented when the router receives a request: true arrivals.
    _put(counters, "requests", _counter(f.get("tgi_request_count")))
    # Token totals are the _sum of the per-request length histograms.
    for key, name in (
        ("prompt_tokens", "tgi_request_input_length"),
        ("generation_tokens", "tgi_request_generated_tokens"),
    ):
        h = _histogram(f.get(name), strict)
        if h is not None and h.sum is not None:
            counters[key] = h.sum
    hist: dict[str, HistogramData] = {}
    for key, name in (
        ("itl", "tgi_request_mean_time_per_token_duration"),
        ("queue", "tgi_request_queue_duration"),
        ("e2e", "tgi_request_duration"),
    ):
        h = _histogram(f.get(name), strict)
        if h is not None:
            hist[key] = h
    return EngineSnapshot("tgi", gauges, counters, hist)


# --- TensorRT-LLM on Triton -------------------------------------------------------------

TRTLLM_FAMILIES: Final[tuple[str, ...]] = (
    "nv_trt_llm_request_metrics",
    "nv_trt_llm_kv_cache_block_metrics",
    "nv_inference_request_success",
    # Triton's own queue gauge: the queue when the backend sends no "waiting" count
    "nv_inference_pending_request_count",
    # trtllm-serve (TensorRT-LLM's own OpenAI server, `MetricsCollector`): unprefixed
    # names, each series labelled engine_type="trtllm"
    "request_success",
    "time_to_first_token_seconds",
    "time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
)


def _by_label(family: Family | None, label: str) -> dict[str, float]:
    out: dict[str, float] = {}
    if family is None:
        return out
    for s in family.samples:
        key = s.labels.get(label)
        if key is not None and s.name == family.name:
            out[key] = out.get(key, 0.0) + s.value
    return out


def _trtllm(page: Page, extra: Page | None, strict: bool) -> EngineSnapshot:
    f = page.families
    gauges: dict[str, float] = {}
    req = _by_label(f.get("nv_trt_llm_request_metrics"), "request_type")
    waiting = req.get("waiting")
    if waiting is None:
        pending = _by_label(f.get("nv_inference_pending_request_count"), "model")
        # an ensemble's requests are pending in front of its tensorrt_llm model
        waiting = pending.get("tensorrt_llm", sum(pending.values()) if pending else None)
    _put(gauges, "waiting", waiting)
    # "active" = context + generation requests currently in flight in the batch manager.
    _put(gauges, "running", req.get("active", req.get("scheduled")))
    kv_family = f.get("nv_trt_llm_kv_cache_block_metrics")
    kv = _by_label(kv_family, "kv_cache_block_type")
    if kv_family is not None:
        if "fraction" in kv:
            fraction: float | None = kv["fraction"]
        elif kv.get("max"):
            fraction = kv.get("used", 0.0) / kv["max"]
        else:
            fraction = None
        _put(gauges, "kv_cache_usage", _fraction(fraction, kv_family.name, kv_family.line))
    counters: dict[str, float] = {}
    success = f.get("nv_inference_request_success")
    if success is not None:
        # Triton counts every model of an ensemble; the tensorrt_llm model counts once.
        per_model = _by_label(success, "model")
        value = per_model.get("tensorrt_llm")
        counters["requests"] = value if value is not None else (_counter(success) or 0.0)
    hist: dict[str, HistogramData] = {}
    for key, name in (
        ("ttft", "time_to_first_token_seconds"),
        ("itl", "time_per_output_token_seconds"),
        ("e2e", "e2e_request_latency_seconds"),
        ("queue", "request_queue_time_seconds"),
    ):
        h = _histogram(_trtllm_serve(f.get(name)), strict)
        if h is not None:
            hist[key] = h
    ttft = hist.get("ttft")
    if "requests" not in counters:
        if ttft is not None and ttft.count is not None:
            counters["requests"] = ttft.count  # arrivals, as for vLLM
        else:
            _put(counters, "requests", _counter(_trtllm_serve(f.get("request_success"))))
    return EngineSnapshot("trtllm", gauges, counters, hist)


def _trtllm_serve(family: Family | None) -> Family | None:
    """``family`` if it is trtllm-serve's (its series labelled engine_type="trtllm"):
    unprefixed names are read only from TensorRT-LLM's own server."""
    if family is None or not all(s.labels.get("engine_type") == "trtllm" for s in family.samples):
        return None
    return family


@dataclass(frozen=True, slots=True)
class Adapter:
    engine: str
    families: tuple[str, ...]
    read: Callable[[Page, Page | None, bool], EngineSnapshot]  # (page, extra, strict)
    extra: tuple[str, ...] = ()
    # ``?name[]=`` query naming the samples `read` needs (`filtering`); empty: the
    # engine's server does not filter (SGLang's multiprocess registry before
    # prometheus_client 0.20 answers an empty page, TGI and Triton ignore it)
    request_query: bytes = b""


ADAPTERS: Final[Mapping[str, Adapter]] = {
    "vllm": Adapter(
        "vllm", VLLM_FAMILIES, _vllm, VLLM_FALLBACK_FAMILIES, name_query(VLLM_REQUEST_SAMPLES)
    ),
    "sglang": Adapter("sglang", SGLANG_FAMILIES, _sglang),
    "tgi": Adapter("tgi", TGI_FAMILIES, _tgi),
    "trtllm": Adapter("trtllm", TRTLLM_FAMILIES, _trtllm),
}
_MARKERS: Final[tuple[tuple[str, str], ...]] = (
    ("\nvllm:", "vllm"),
    ("\nsglang:", "sglang"),
    ("\nnv_trt_llm_", "trtllm"),
    ("\ntgi_", "tgi"),
)


def detect_engine(text: str) -> str | None:
    """The engine whose metric prefix appears on the page (first sample line wins); a
    page with none whose series say engine_type="trtllm" is trtllm-serve's.

    Each search stops where the best match so far is, so the engines that are absent
    cost a scan of the page's head, not of the whole page.
    """
    best_pos, best = len(text) + 1, None
    for marker, engine in _MARKERS:
        if text.startswith(marker[1:]):
            return engine
        pos = text.find(marker, 0, best_pos + len(marker))
        if 0 <= pos < best_pos:
            best_pos, best = pos, engine
    if best is None and 'engine_type="trtllm"' in text:
        return "trtllm"
    return best


def read_snapshot(
    text: str,
    engine: str = "auto",
    *,
    strict: bool = False,
    details: bool = False,
    lengths: bool = False,
    max_lines: int | None = None,
) -> EngineSnapshot:
    """Parse one page with the engine's adapter (auto-detected from metric prefixes).

    ``details`` also reads e2e/queue histograms (for the offline command); ``lengths``
    vLLM's prompt-length histogram (``prompt_len``, for variants' length classes). Raises
    `ParseError` on an invalid page, on a page over ``max_lines`` (see `parse_page`) or
    when no known engine's metrics are present. A plain function of its arguments (no
    event loop, no I/O), so it can run in a worker thread or process.
    """
    name = detect_engine(text) if engine == "auto" else engine
    if name is None:
        if strict:
            parse_page(text, None)  # an invalid page reports its own error first
        raise ParseError("no vLLM, SGLang, TGI or TensorRT-LLM metrics on the page", 1)
    adapter = ADAPTERS.get(name)
    if adapter is None:
        raise ValueError(f"engine={name!r}: must be one of auto, {', '.join(ENGINES)}")
    wanted = adapter.families + (VLLM_DETAIL_FAMILIES if details and name == "vllm" else ())
    if lengths and name == "vllm":
        wanted += VLLM_LENGTH_FAMILIES
    page = parse_page(text, wanted, strict=strict, max_lines=max_lines)
    extra: Page | None = None
    needs_extra = name == "vllm" and "vllm:inter_token_latency_seconds" not in page.families
    if details and name == "vllm":
        extra_names = wanted + adapter.extra
        extra = parse_page(text, extra_names, strict=strict, max_lines=max_lines)
    elif needs_extra and adapter.extra:
        extra = parse_page(text, adapter.extra, strict=strict, max_lines=max_lines)
    return adapter.read(page, extra, strict)
