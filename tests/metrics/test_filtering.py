"""``?name[]=`` requests: the query prometheus_client decodes, and `restrict_page` checked
against prometheus_client's own restricted output: the same families, byte for byte
(prometheus_client sends them in the order of a set of its collectors, not the page's)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.metrics.engines import ADAPTERS, VLLM_REQUEST_SAMPLES, read_snapshot
from autoscaler.metrics.filtering import name_query, restrict_page, sample_names

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"


def _registry() -> CollectorRegistry:
    """vLLM's kinds of families, with labels, ``_created`` samples and an unlabelled one."""
    r = CollectorRegistry()
    labels = ["model_name", "engine"]
    Gauge("vllm:num_requests_running", "running", labels, registry=r).labels("m", "0").set(7)
    Gauge("vllm:num_requests_waiting", "waiting", labels, registry=r).labels("m", "0").set(2)
    Gauge("process_open_fds", "fds", registry=r).set(12)
    done = Counter("vllm:request_success", "done", [*labels, "finished_reason"], registry=r)
    done.labels("m", "0", "stop").inc(40)
    done.labels("m", "0", "length").inc(3)
    Counter("vllm:prompt_tokens", "prompt", labels, registry=r).labels("m", "0").inc(900)
    for name in ("vllm:time_to_first_token_seconds", "vllm:e2e_request_latency_seconds"):
        h = Histogram(name, "latency", labels, buckets=[0.1, 0.5, 1.0], registry=r)
        for v in (0.05, 0.2, 0.7, 3.0):
            h.labels("m", "0").observe(v)
    Histogram("vllm:never_observed_seconds", "no child yet", labels, registry=r)
    Info("vllm:cache_config", "config", registry=r).info({"block_size": "16"})
    return r


def _families(page: str) -> list[str]:
    """The page's families (each from its ``# HELP`` line), sorted."""
    return sorted("# HELP " + block for block in page.split("# HELP ") if block)


SUBSETS: tuple[tuple[str, ...], ...] = (
    VLLM_REQUEST_SAMPLES,
    ("vllm:num_requests_running",),
    ("vllm:time_to_first_token_seconds_bucket",),  # a histogram's buckets only
    ("vllm:request_success_total", "vllm:request_success_created"),
    ("vllm:prompt_tokens_created",),  # a _created family alone
    ("vllm:cache_config_info", "process_open_fds"),
    ("vllm:never_observed_seconds_bucket", "vllm:absent"),  # nothing to send
)


@pytest.mark.parametrize("names", SUBSETS, ids=lambda n: ",".join(n)[:60])
def test_restricts_a_page_as_prometheus_client_does(names: tuple[str, ...]) -> None:
    registry = _registry()
    whole = generate_latest(registry).decode()
    expected = generate_latest(registry.restricted_registry(names)).decode()
    assert _families(restrict_page(whole, names)) == _families(expected)


class _Replay:
    """A collector that yields the families prometheus_client's parser read from a page."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        yield from self.families


def test_restricts_the_vllm_fixture_page_as_prometheus_client_does() -> None:
    text = (FIXTURES / "vllm_v1_0.10.txt").read_text()
    registry = CollectorRegistry(auto_describe=True)
    registry.register(_Replay(list(text_string_to_metric_families(text))))
    whole = generate_latest(registry).decode()
    for names in (VLLM_REQUEST_SAMPLES, VLLM_REQUEST_SAMPLES[:5], VLLM_REQUEST_SAMPLES[-3:]):
        expected = generate_latest(registry.restricted_registry(names)).decode()
        assert _families(restrict_page(whole, names)) == _families(expected)
    # and what the vLLM adapter reads from the restricted page is what it reads whole
    restricted = restrict_page(whole, VLLM_REQUEST_SAMPLES)
    assert len(restricted) < len(whole) / 4
    assert read_snapshot(restricted, "vllm") == read_snapshot(whole, "vllm")


def test_the_query_decodes_to_the_names_as_prometheus_client_parses_it() -> None:
    query = ADAPTERS["vllm"].request_query
    # prometheus_client's ASGI app: parse_qs(scope["query_string"].decode("latin1"))
    assert parse_qs(query.decode("latin1")) == {"name[]": list(VLLM_REQUEST_SAMPLES)}
    assert b"[" not in query and b"]" not in query and b":" not in query
    assert name_query(["a:b c&d"]) == b"name%5B%5D=a%3Ab%20c%26d"


def test_vllm_request_names_every_sample_the_adapter_reads() -> None:
    families = {
        n.removesuffix(s)
        for n, s in itertools.product(VLLM_REQUEST_SAMPLES, ("_bucket", "_sum", "_count", "_total"))
        if n.endswith(s)
    } | set(VLLM_REQUEST_SAMPLES)
    adapter = ADAPTERS["vllm"]
    assert set(adapter.families + adapter.extra) <= families
    assert all(not a.request_query for name, a in ADAPTERS.items() if name != "vllm")


def test_rejects_repeated_or_no_names() -> None:
    with pytest.raises(ValueError, match="must not repeat"):
        sample_names(gauges=["x_total"], counters=["x"])
    with pytest.raises(ValueError, match="names: value \\(\\) must name at least one"):
        name_query([])
