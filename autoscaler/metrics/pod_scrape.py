"""Scrape each ready pod's /metrics directly (no Prometheus in the loop).

One `PageClient` (a minimal HTTP/1.1 keep-alive GET client, `page_client.py`) is
shared by every target, so a 1 s tick reuses each pod's connection instead of opening
one. A global semaphore bounds scrapes in flight across targets, each pod has its own
timeout, and per-pod histories (for rates and windowed quantiles) live here, keyed by
target and pod name.
A pod whose scrape fails, times out, returns non-200 or an invalid page is unknown this
tick (not counted in ``pods_read``), and so is a pod whose page holds a value out of
range (``+Inf``, NaN, a negative count) or implausible (``waiting 1e308``; see
`signals.snapshot_violation`), counted by reason in ``rejected``; a pod not read
successfully for ``stale_after_s`` loses its history, so a restarted pod never produces
a rate across the gap.
Pages over ``thread_parse_bytes`` are decoded and parsed in one worker thread, so a pod
sending megabytes does not stall the event loop for the other targets.

A pod whose engine is known (``engine`` configured, or detected from its previous page)
is asked for only the samples its adapter reads (``filter_families``; `filtering`): a
vLLM page shrinks from 46 to 10 kB. A server that ignores the query sends the whole
page, read as before; one that answers it with none of the families asked for is read
whole at once, in the same scrape, and from then on (``unfiltered_pods``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from autoscaler.errors import AutoscalerError
from autoscaler.metrics.engines import (
    ADAPTERS,
    VLLM_LENGTH_SAMPLES,
    EngineSnapshot,
    read_snapshot,
)
from autoscaler.metrics.filtering import name_query
from autoscaler.metrics.page_client import PageClient
from autoscaler.metrics.signals import (
    DEFAULT_WINDOW_S,
    PodHistory,
    aggregate,
    length_buckets,
    observe,
    snapshot_violation,
    split_valid,
)
from autoscaler.metrics.source import PodEndpoint, TargetReading

# appended to the vLLM request filter for a target that reads prompt lengths
LENGTH_QUERY = name_query(VLLM_LENGTH_SAMPLES)


@dataclass(frozen=True, slots=True)
class ScrapeConfig:
    timeout_s: float = 2.0
    max_concurrency: int = 64
    window_s: float = DEFAULT_WINDOW_S
    stale_after_s: float = 10.0
    engine: str = "auto"
    max_page_bytes: int = 8 * 1024 * 1024
    # Pages larger than this are parsed in one worker thread (one at a time), so the
    # event loop keeps serving the other targets (benchmarks/bench_parse_bounds.py);
    # smaller ones inline, where a thread hop would cost more than their parse.
    thread_parse_bytes: int = 256 * 1024
    keepalive_s: float = 30.0  # an idle pod connection is closed after this
    # ask each pod for only the families its engine's adapter reads (module doc)
    filter_families: bool = True

    def __post_init__(self) -> None:
        for name in ("timeout_s", "window_s", "stale_after_s", "keepalive_s"):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}={value}: must be > 0")
        if self.max_concurrency < 1:
            raise ValueError(f"max_concurrency={self.max_concurrency}: must be >= 1")
        if self.max_page_bytes < 1:
            raise ValueError(f"max_page_bytes={self.max_page_bytes}: must be >= 1")
        if self.thread_parse_bytes < 0:
            raise ValueError(f"thread_parse_bytes={self.thread_parse_bytes}: must be >= 0")


class PodScrapeSource:
    """`MetricSource` reading pods over HTTP; create inside a running event loop."""

    def __init__(self, config: ScrapeConfig | None = None) -> None:
        self.config = config or ScrapeConfig()
        self._semaphore = asyncio.Semaphore(self.config.max_concurrency)
        self._http: PageClient | None = None
        self._histories: dict[str, dict[str, PodHistory]] = {}
        self._parse_thread: ThreadPoolExecutor | None = None
        self._parse_slot = asyncio.Semaphore(1)  # large pages queue here, not in the thread
        # pod URLs whose server answered a filtered request with none of the families
        self.unfiltered_pods: set[str] = set()
        # targets whose prompt-length histogram is read (`want_lengths`)
        self._length_keys: set[str] = set()

    def want_lengths(self, key: str, wanted: bool) -> None:
        """Read (or stop reading) the pods' prompt-length histogram for target ``key``:
        a target with variants that have a maxModelLen steers long prompts by it."""
        if wanted:
            self._length_keys.add(key)
        else:
            self._length_keys.discard(key)

    def _client(self) -> PageClient:
        if self._http is None:
            c = self.config
            self._http = PageClient(
                timeout_s=c.timeout_s, max_body_bytes=c.max_page_bytes, keepalive_s=c.keepalive_s
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        if self._parse_thread is not None:
            self._parse_thread.shutdown(wait=False, cancel_futures=True)
            self._parse_thread = None

    async def _fetch(self, pod: PodEndpoint, query: bytes) -> bytes:
        """The page's bytes (decoded where it is parsed: a large page in the parse thread)."""
        client = self._client()
        async with self._semaphore:
            return await client.get(pod.url, query)

    def _engine_of(self, previous: PodHistory | None) -> str | None:
        """The engine the pod's page will be read with, if known before reading it."""
        engine = self.config.engine
        if engine != "auto":
            return engine
        return previous.snapshot.engine if previous is not None else None

    async def _scrape(
        self, pod: PodEndpoint, previous: PodHistory | None, lengths: bool = False
    ) -> EngineSnapshot | str:
        """Fetch and read one pod; an error message instead of raising.

        The page is parsed here, as soon as it arrives, so parsing overlaps the other
        pods' requests still in flight instead of waiting for the slowest pod.
        """
        engine = self._engine_of(previous)
        adapter = ADAPTERS.get(engine) if engine is not None else None
        if (
            adapter is None
            or not adapter.request_query
            or not self.config.filter_families
            or pod.url in self.unfiltered_pods
        ):
            return await self._get_and_read(pod, b"", previous, None, lengths)
        query = adapter.request_query
        if lengths and adapter.engine == "vllm":
            query += b"&" + LENGTH_QUERY
        result = await self._get_and_read(pod, query, previous, adapter.engine, lengths)
        if isinstance(result, str) or _has_data(result):
            return result
        # none of the families asked for: a server that cannot filter (module doc)
        whole = await self._get_and_read(pod, b"", previous, None, lengths)
        if not isinstance(whole, str) and _has_data(whole):
            if len(self.unfiltered_pods) >= 65536:
                self.unfiltered_pods.clear()
            self.unfiltered_pods.add(pod.url)
        return whole

    async def _get_and_read(
        self,
        pod: PodEndpoint,
        query: bytes,
        previous: PodHistory | None,
        engine: str | None,
        lengths: bool = False,
    ) -> EngineSnapshot | str:
        """GET the page (with ``query``) and read it: with ``engine``, else `_snapshot`'s."""
        try:
            body = await self._fetch(pod, query)
        except TimeoutError:
            return f"{pod.name}: TimeoutError: timeout after {self.config.timeout_s}s"
        except (AutoscalerError, OSError) as exc:
            return f"{pod.name}: {type(exc).__name__}: {exc}"
        try:
            if len(body) <= self.config.thread_parse_bytes:
                return self._read_body(body, previous, engine, lengths)
            return await self._snapshot_in_thread(body, previous, engine, lengths)
        except UnicodeDecodeError as exc:
            return f"{pod.name}: {type(exc).__name__}: {exc}"
        except AutoscalerError as exc:
            return f"{pod.name}: {exc}"

    def _read_body(
        self, body: bytes, previous: PodHistory | None, engine: str | None, lengths: bool = False
    ) -> EngineSnapshot:
        page = body.decode("utf-8", errors="strict")
        if engine is not None:  # a filtered page: read as asked, never re-detected
            return read_snapshot(page, engine, lengths=lengths)
        return self._snapshot(page, previous, lengths)

    async def _snapshot_in_thread(
        self, body: bytes, previous: PodHistory | None, engine: str | None, lengths: bool = False
    ) -> EngineSnapshot:
        """Decode and `_snapshot` in the parse thread: the loop waits without being blocked.

        The thread still takes the GIL, but CPython hands it back to the loop's thread
        every 5 ms (`sys.getswitchinterval`), so the loop's lag stays near that instead
        of the whole parse. One large page is parsed at a time.
        """
        if self._parse_thread is None:
            self._parse_thread = ThreadPoolExecutor(1, thread_name_prefix="page-parse")
        async with self._parse_slot:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(
                self._parse_thread, self._read_body, body, previous, engine, lengths
            )

    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        histories = self._histories.setdefault(key, {})
        lengths = key in self._length_keys
        results = await asyncio.gather(
            *(self._scrape(p, histories.get(p.name), lengths) for p in pods)
        )
        read: list[PodHistory] = []
        errors: list[str] = []
        rejected: dict[str, int] = {}
        for pod, result in zip(pods, results, strict=True):
            if isinstance(result, str):
                errors.append(result)
                continue
            violation = snapshot_violation(result)
            if violation is not None:  # unread: its history keeps the last valid scrape
                errors.append(f"{pod.name}: rejected {violation}")
                rejected[violation.reason] = rejected.get(violation.reason, 0) + 1
                continue
            previous = histories.get(pod.name)
            if previous is not None and now - previous.t > self.config.stale_after_s:
                previous = None  # a gap: no rate across it
            history = observe(previous, result, now, self.config.window_s)
            histories[pod.name] = history
            read.append(history)
        live = {p.name for p in pods}
        for name in [n for n, h in histories.items() if n not in live]:
            if now - histories[name].t > self.config.stale_after_s:
                del histories[name]
        signals, bad = split_valid(aggregate(read), len(read))
        for v in bad:  # computed out of range from valid pages (e.g. negative bucket bounds)
            errors.append(f"signal rejected {v}")
            rejected[v.reason] = rejected.get(v.reason, 0) + 1
        return TargetReading(
            t=now,
            signals=signals,
            pods_read=len(read) if not bad else 0,
            pods_expected=len(pods),
            errors=tuple(errors),
            rejected=rejected,
            length_buckets=length_buckets(read),
        )

    def _snapshot(
        self, page: str, previous: PodHistory | None, lengths: bool = False
    ) -> EngineSnapshot:
        """Read a page with the configured engine, else the one this pod had last time.

        Detection scans the page head for every engine's prefix; a pod keeps its engine,
        so it is detected once. A page that yields nothing with the pod's previous
        engine (the pod was replaced by another engine) is detected again.
        """
        engine = self.config.engine
        if engine != "auto" or previous is None:
            return read_snapshot(page, engine, lengths=lengths)
        snapshot = read_snapshot(page, previous.snapshot.engine, lengths=lengths)
        if _has_data(snapshot):
            return snapshot
        return read_snapshot(page, "auto", lengths=lengths)

    def forget(self, key: str) -> None:
        """Drop a target's histories (target deleted)."""
        self._histories.pop(key, None)
        self._length_keys.discard(key)

    def release_buffers(self) -> int:
        """Free the page client's receive buffers kept for reuse (between bursts of
        reads, e.g. once idle); bytes freed."""
        return self._http.release_buffers() if self._http is not None else 0


def _has_data(snapshot: EngineSnapshot) -> bool:
    """Whether the page held any family the adapter reads."""
    return bool(snapshot.gauges or snapshot.counters or snapshot.histograms)
