"""Parser resource bounds: caches bounded in bytes, pages bounded in wanted lines, large
pages parsed off the event loop."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from autoscaler.errors import ParseError
from autoscaler.metrics import exposition
from autoscaler.metrics.engines import VLLM_FAMILIES, read_snapshot
from autoscaler.metrics.exposition import cache_bytes, caches, parse_page
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
PAGE = (FIXTURES / "vllm_v1_0.10.txt").read_text()


def _hostile(i: int, value_bytes: int) -> str:
    """The vLLM page plus a wanted gauge whose label value is new on every scrape."""
    label = f"{i:08d}" + "x" * value_bytes
    return PAGE + f'vllm:num_requests_waiting{{engine="1",junk="{label}"}} {i}\n'


def _accounted(cache: caches._ByteCache[object, object]) -> int:
    return sum(cache.sizes.values())


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Every byte-bounded cache shrunk to 32 KiB, so a test can overflow them."""
    budget = 32 * 1024
    exposition.clear_caches()
    for cache in caches._BYTE_CACHES:
        monkeypatch.setattr(cache, "budget_bytes", budget)
    yield budget * len(caches._BYTE_CACHES)
    exposition.clear_caches()


def test_new_4mb_label_value_every_scrape_never_enters_the_caches() -> None:
    exposition.clear_caches()
    waiting = read_snapshot(PAGE, "vllm").gauges["waiting"]
    baseline = cache_bytes()
    for i in range(8):
        snapshot = read_snapshot(_hostile(i, 4 * 1024 * 1024), "vllm")
        assert snapshot.gauges["waiting"] == waiting + i  # the hostile series is still read
    assert cache_bytes() <= baseline + 8 * exposition.CACHE_ENTRY_MAX_BYTES
    assert max(len(key) for c in caches._BYTE_CACHES for key in c) < 4096


def test_caches_stay_within_their_byte_budget_over_many_hostile_pages(small_budget: int) -> None:
    for i in range(300):  # new small label values: each one fits the per-entry cap
        read_snapshot(_hostile(i, 200), "vllm")
        assert cache_bytes() <= small_budget
    for cache in caches._BYTE_CACHES:
        assert cache.used_bytes <= cache.budget_bytes
        assert cache.used_bytes == _accounted(cache)  # accounting matches what is held
        assert set(cache.sizes) == set(cache)
    assert read_snapshot(PAGE, "vllm") == read_snapshot(PAGE, "vllm", strict=True)


def test_one_page_adds_at_most_its_allowance_to_the_caches() -> None:
    exposition.clear_caches()
    lines = "".join(
        f'vllm:num_requests_waiting{{engine="{i}",pad="{"p" * 100}"}} 1\n' for i in range(5000)
    )
    page = parse_page("# TYPE vllm:num_requests_waiting gauge\n" + lines, VLLM_FAMILIES)
    assert len(page.families["vllm:num_requests_waiting"].samples) == 5000
    assert cache_bytes() <= exposition.PAGE_CACHE_ALLOWANCE_BYTES


def test_page_over_the_wanted_line_bound_is_refused_whole_with_the_reason() -> None:
    body = "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 1\n' for i in range(300))
    text = "# TYPE vllm:num_requests_waiting gauge\n" + body
    with pytest.raises(ParseError, match="max_lines=100"):
        parse_page(text, VLLM_FAMILIES, max_lines=100)
    with pytest.raises(ParseError, match="max_lines=100"):
        read_snapshot(text, "vllm", max_lines=100)
    with pytest.raises(ParseError, match="max_lines=100"):
        parse_page(text, None, max_lines=100)
    assert read_snapshot(text, "vllm", max_lines=400).gauges["waiting"] == 300


def test_unwanted_lines_do_not_count_against_the_line_bound() -> None:
    other = "".join(f'other_metric{{i="{i}"}} 1\n' for i in range(5000))
    page = parse_page(other + PAGE, VLLM_FAMILIES, max_lines=1000)
    assert len(page.families["vllm:num_requests_waiting"].samples) == 1


# --- through PodScrapeSource: real loopback HTTP ---------------------------------------


async def _serve(bodies: dict[str, bytes]) -> tuple[web.AppRunner, str]:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=bodies[request.match_info["name"]], content_type="text/plain")

    app = web.Application()
    app.router.add_get("/{name}", handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


@pytest.mark.parametrize("thread_parse_bytes", [0, 1 << 30], ids=["thread", "inline"])
async def test_page_over_the_line_bound_leaves_the_pod_unread_never_zero(
    thread_parse_bytes: int,
) -> None:
    body = "".join(f'vllm:num_requests_waiting{{engine="{i}"}} 0\n' for i in range(10_001))
    runner, base = await _serve({"ok": PAGE.encode(), "big": body.encode()})
    source = PodScrapeSource(ScrapeConfig(thread_parse_bytes=thread_parse_bytes))
    try:
        pods = [PodEndpoint("ok", f"{base}/ok"), PodEndpoint("big", f"{base}/big")]
        reading = await source.read("ns/t", pods, now=1.0)
    finally:
        await source.close()
        await runner.cleanup()
    assert reading.pods_read == 1 and reading.pods_expected == 2
    assert reading.signals["waiting"] == read_snapshot(PAGE, "vllm").gauges["waiting"]
    assert len(reading.errors) == 1 and reading.errors[0].startswith("big: ")
    assert f"max_lines={exposition.MAX_WANTED_LINES}" in reading.errors[0]


async def test_large_page_is_read_in_the_parse_thread_as_inline() -> None:
    runner, base = await _serve({"ok": PAGE.encode(), "bad": b"vllm:num_requests_waiting \xff\n"})
    readings = []
    try:
        for thread_parse_bytes in (0, 1 << 30):
            source = PodScrapeSource(ScrapeConfig(thread_parse_bytes=thread_parse_bytes))
            try:
                pods = [PodEndpoint("ok", f"{base}/ok"), PodEndpoint("bad", f"{base}/bad")]
                readings.append(await source.read("ns/t", pods, now=1.0))
            finally:
                await source.close()
    finally:
        await runner.cleanup()
    threaded, inline = readings
    assert threaded.signals == inline.signals and threaded.pods_read == inline.pods_read == 1
    assert threaded.errors == inline.errors
    assert "UnicodeDecodeError" in threaded.errors[0]
