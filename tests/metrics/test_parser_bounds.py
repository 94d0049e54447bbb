"""Parser resource bounds: layouts bounded in bytes, pages bounded in wanted lines, large
pages parsed off the event loop."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp import web

from autoscaler.errors import ParseError
from autoscaler.metrics import exposition
from autoscaler.metrics.engines import VLLM_FAMILIES, read_snapshot
from autoscaler.metrics.exposition import cache_bytes, parse_page
from autoscaler.metrics.exposition.layout import LayoutCache, read_page
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
PAGE = (FIXTURES / "vllm_v1_0.10.txt").read_text()


def _hostile(i: int, value_bytes: int) -> str:
    """The vLLM page plus a wanted gauge whose label value is new on every scrape."""
    label = f"{i:08d}" + "x" * value_bytes
    return PAGE + f'vllm:num_requests_waiting{{engine="1",junk="{label}"}} {i}\n'


def _skeleton(i: int) -> str:
    """A small page whose skeleton is the i-th of its kind (letters, not digits, differ)."""
    name = "".join(chr(97 + (i // 26**k) % 26) for k in range(3))
    return f'# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{{m="{name}"}} 1\n'


def test_new_4mb_label_value_every_scrape_never_enters_the_layouts() -> None:
    exposition.clear_caches()
    waiting = read_snapshot(PAGE, "vllm").gauges["waiting"]
    baseline = cache_bytes()
    for i in range(8):
        snapshot = read_snapshot(_hostile(i, 4 * 1024 * 1024), "vllm")
        assert snapshot.gauges["waiting"] == waiting + i  # the hostile series is still read
    assert cache_bytes() == baseline


def test_layouts_stay_within_their_byte_budget_and_keep_the_ones_in_use() -> None:
    wanted = frozenset(VLLM_FAMILIES)
    cache = LayoutCache(budget_bytes=1 << 20)
    read_page(_skeleton(0), wanted, 100, cache)
    read_page(_skeleton(0), wanted, 100, cache)  # second sighting: a layout is built
    one = next(iter(cache.layouts.values())).size_bytes
    cache = LayoutCache(budget_bytes=4 * one)
    for _ in range(3):  # 10 skeletons in turn, room for 4: never more than the budget
        for i in range(10):
            read_page(_skeleton(i), wanted, 100, cache)
            assert cache.used_bytes <= cache.budget_bytes
            assert cache.used_bytes == sum(lay.size_bytes for lay in cache.layouts.values())
    kept = set(cache.layouts)
    assert len(kept) == 4
    for _ in range(2):  # the kept layouts are used every round: none is evicted for a newcomer
        for i in range(10):
            read_page(_skeleton(i), wanted, 100, cache)
    assert set(cache.layouts) == kept


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
