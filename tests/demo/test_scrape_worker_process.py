"""The scrape worker process's memory upkeep (autoscaler/commands/scrape_worker.py):
glibc's free pages handed back once started and then at most every period, when idle."""

from __future__ import annotations

import asyncio
import os
import platform
from typing import Any

import pytest

from autoscaler.commands.glibc import malloc_trim as glibc_malloc_trim
from autoscaler.commands.scrape_worker import IdleTrim
from autoscaler.metrics.pod_scrape import ScrapeConfig
from autoscaler.metrics.scrape_workers import _frame, serve_pipes
from tests.metrics.vllm_pods import FakeVllm, start_pods
from tests.metrics.worker_frames import Frames

BOUND_S = 60.0


def test_idle_trim_trims_at_once_then_at_most_every_period() -> None:
    now = [100.0]
    calls: list[float] = []
    trim = IdleTrim(lambda: calls.append(now[0]), period_s=60.0, clock=lambda: now[0])
    assert trim()  # once started
    now[0] += 59.0
    assert not trim()
    now[0] += 1.0
    assert trim()
    now[0] += 0.5
    assert not trim()
    assert calls == [100.0, 160.0] and trim.trims == 2


def test_idle_trim_without_glibc_never_trims() -> None:
    trim = IdleTrim(None, clock=lambda: 0.0)
    assert not trim() and trim.trims == 0


def test_bad_trim_period_names_the_field_and_rule() -> None:
    with pytest.raises(ValueError, match=r"period_s=0: must be > 0"):
        IdleTrim(None, period_s=0)


async def test_a_worker_that_trimmed_when_idle_still_answers_every_burst() -> None:
    """The worker side with the real malloc_trim as its idle hook: every burst is
    answered, also the ones after a trim (and after its receive buffers were freed).
    Where the C library is not glibc there is no malloc_trim: a no-op stands in, so the
    answering is still checked (and on glibc the real one must be found)."""
    real_trim = glibc_malloc_trim()
    if platform.libc_ver()[0] == "glibc":
        assert real_trim is not None, "glibc without a usable malloc_trim"
    pod = FakeVllm()
    pod.set(waiting=4, running=9, kv=0.5)
    pod.serve(prompt_tokens=0, ttfts=[])
    runner, urls = await start_pods([pod])
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    loop = asyncio.get_running_loop()
    frames = Frames()
    reader, _ = await loop.connect_read_pipe(lambda: frames, os.fdopen(answers_r, "rb", 0))
    now = [0.0]
    trim = IdleTrim(real_trim or (lambda: None), period_s=1.0, clock=lambda: now[0])
    idle: list[int] = []
    went_idle = asyncio.Event()

    def on_idle() -> None:
        idle.append(trim.trims)
        went_idle.set()
        now[0] += 1.0  # every idle is a period later: each one trims
        trim()

    worker = asyncio.ensure_future(
        serve_pipes(ScrapeConfig(timeout_s=5.0), BOUND_S, requests_r, answers_w, on_idle)
    )

    async def answer(rid: int) -> Any:
        while True:
            for m in frames.messages:
                if m[0] == rid:
                    return m
            frames.arrived.clear()
            await asyncio.wait_for(frames.arrived.wait(), BOUND_S)

    try:
        pods = [("p", urls[0])]
        for rid in range(1, 4):
            os.write(requests_w, _frame([(rid, "ns/a", float(rid), pods if rid == 1 else None)]))
            _, t, signals, pods_read, expected = (await answer(rid))[:5]
            assert (t, pods_read, expected) == (float(rid), 1, 1) and signals["waiting"] == 4
            while len(idle) < rid:  # the idle hook (and its trim) ran before the next burst
                went_idle.clear()
                await asyncio.wait_for(went_idle.wait(), BOUND_S)
    finally:
        os.close(requests_w)
        await asyncio.wait_for(worker, BOUND_S)
        reader.close()
        await runner.cleanup()
    assert trim.trims >= 3 and idle[:3] == [0, 1, 2]


async def test_a_frame_with_more_targets_than_the_page_slots_is_answered_whole() -> None:
    """The worker admits at most ``max_concurrency`` targets at once; the rest wait
    for a slot and are answered too, each with its own pod's page."""
    pods = [FakeVllm() for _ in range(3)]
    for i, pod in enumerate(pods):
        pod.set(waiting=i, running=9, kv=0.5)
        pod.serve(prompt_tokens=0, ttfts=[])
    runner, urls = await start_pods(pods)
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    loop = asyncio.get_running_loop()
    frames = Frames()
    reader, _ = await loop.connect_read_pipe(lambda: frames, os.fdopen(answers_r, "rb", 0))
    worker = asyncio.ensure_future(
        serve_pipes(ScrapeConfig(timeout_s=5.0, max_concurrency=1), BOUND_S, requests_r, answers_w)
    )
    try:
        os.write(
            requests_w,
            _frame([(1 + i, f"ns/t{i}", 0.0, [("p", url)]) for i, url in enumerate(urls)]),
        )
        while not {1, 2, 3} <= {m[0] for m in frames.messages}:
            frames.arrived.clear()
            await asyncio.wait_for(frames.arrived.wait(), BOUND_S)
    finally:
        os.close(requests_w)
        await asyncio.wait_for(worker, BOUND_S)
        reader.close()
        await runner.cleanup()
    answers = {m[0]: m for m in frames.messages if m[0] in (1, 2, 3)}
    assert [answers[i][3] for i in (1, 2, 3)] == [1, 1, 1]  # pods_read
    assert [answers[i][2]["waiting"] for i in (1, 2, 3)] == [0, 1, 2]
