"""Scrape worker processes: real child processes scraping real vLLM pages on loopback.

Integration tests: they wait on real events (a worker's hello, its exit) with a bound,
never on a timer, and assert no timing.
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from autoscaler.metrics.engines import VLLM_REQUEST_SAMPLES
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.scrape_workers import (
    ScrapeWorkers,
    WorkerConfig,
    _frame,
    serve_pipes,
    worker_index,
)
from autoscaler.metrics.source import PodEndpoint
from tests.metrics.vllm_pods import FakeVllm, serve_route, start_pods
from tests.metrics.worker_frames import Frames
from tests.support.processes import alive

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"
BOUND_S = 60.0  # every wait on a real event is bounded by this
KEYS = [f"ns/model-{i}" for i in range(8)]
QUICK = WorkerConfig(workers=2, restart_backoff_s=0.05, heartbeat_s=0.2)

Factory = Callable[..., ScrapeWorkers]


@pytest.fixture
async def make_workers() -> AsyncIterator[Factory]:
    made: list[ScrapeWorkers] = []
    pids: set[int] = set()

    def make(config: ScrapeConfig | None = None, worker: WorkerConfig = QUICK) -> ScrapeWorkers:
        source = ScrapeWorkers(config or ScrapeConfig(timeout_s=5.0), worker)
        made.append(source)
        return source

    yield make
    for source in made:
        pids.update(p for p in source.pids() if p is not None)
        pids.update(source.reaper_pids())
        await source.close()
    assert [p for p in pids if alive(p)] == []


@pytest.fixture
async def fleet() -> AsyncIterator[tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]]:
    """Two pods per target, each target's pods their own, counters exported."""
    pods = [FakeVllm() for _ in range(2 * len(KEYS))]
    for i, pod in enumerate(pods):
        pod.set(waiting=i, running=10 + i, kv=0.05 * (i % 10))
        pod.serve(prompt_tokens=0, ttfts=[])
    runner, urls = await start_pods(pods)
    endpoints = {
        key: [PodEndpoint(f"{key}-pod-{j}", urls[2 * k + j]) for j in range(2)]
        for k, key in enumerate(KEYS)
    }
    yield pods, endpoints
    await runner.cleanup()


def keys_of(source: ScrapeWorkers, index: int) -> list[str]:
    return [k for k in KEYS if source.worker_of(k) == index]


async def test_reads_what_the_in_process_source_reads_for_the_same_pages(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    pods, endpoints = fleet
    workers = make_workers()
    local = PodScrapeSource(ScrapeConfig(timeout_s=5.0))
    pods[3].status = 503  # one failed pod: the same error, left out of pods_read
    try:
        for tick, now in enumerate((100.0, 110.0, 120.0)):
            for key in KEYS:
                theirs = await workers.read(key, endpoints[key], now)
                ours = await local.read(key, endpoints[key], now)
                assert theirs == ours
                if tick:
                    assert "prompt_tokens_per_s" in theirs.signals or theirs.pods_read < 2
            for i, pod in enumerate(pods):
                pod.serve(prompt_tokens=100 * (i + 1), ttfts=[0.03] * (i + 1))
    finally:
        await local.close()
    assert {workers.worker_of(k) for k in KEYS} == {0, 1}  # both workers did read
    # each side (worker, then in-process) asks a detected vLLM pod for its families only
    for pod in pods[:3] + pods[4:]:
        assert pod.asked == [(), (), *[VLLM_REQUEST_SAMPLES] * 4]
    bad = await workers.read(KEYS[1], endpoints[KEYS[1]], 130.0)
    assert bad.pods_read == 1 and "503" in bad.errors[0]


async def test_a_worker_scrapes_whole_pages_when_filtering_is_off(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    pods, endpoints = fleet
    workers = make_workers(ScrapeConfig(timeout_s=5.0, filter_families=False))
    for now in (1.0, 2.0):
        reading = await workers.read(KEYS[0], endpoints[KEYS[0]], now)
        assert reading.pods_read == 2
    assert [pod.asked for pod in pods[:2]] == [[(), ()], [(), ()]]


async def test_a_targets_histories_stay_in_its_worker_so_rates_are_right(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    pods, endpoints = fleet
    workers = make_workers(worker=WorkerConfig(workers=3, heartbeat_s=0.2))
    assert [workers.worker_of(k) for k in KEYS] == [worker_index(k, 3) for k in KEYS]
    for key in KEYS:
        first = await workers.read(key, endpoints[key], 0.0)
        assert "prompt_tokens_per_s" not in first.signals  # one scrape: no rate yet
    for tick in range(1, 4):
        for pod in pods:
            pod.serve(prompt_tokens=40.0, ttfts=[])
        for key in KEYS:
            reading = await workers.read(key, endpoints[key], 2.0 * tick)
            assert reading.pods_read == 2, reading.errors
            # each pod +40 tokens per 2 s, the target's two pods summed
            assert reading.signals["prompt_tokens_per_s"] == pytest.approx(40.0), key
    assert workers.stale_responses == 0


async def test_a_killed_worker_reads_as_errors_then_restarts_with_empty_histories(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    pods, endpoints = fleet
    workers = make_workers()
    for key in KEYS:
        await workers.read(key, endpoints[key], 0.0)
    for pod in pods:
        pod.serve(prompt_tokens=10, ttfts=[])
    victim, other = keys_of(workers, 0)[0], keys_of(workers, 1)[0]
    pid = workers.pids()[0]
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    await asyncio.wait_for(workers.wait_exited(0), BOUND_S)

    down = await workers.read(victim, endpoints[victim], 1.0)
    assert down.pods_read == 0 and down.pods_expected == 2 and down.signals == {}
    assert "scrape worker 0" in down.errors[0] and "-9 (SIGKILL)" in down.errors[0]
    assert str(pid) in down.errors[0]
    unaffected = await workers.read(other, endpoints[other], 1.0)
    assert unaffected.pods_read == 2 and "prompt_tokens_per_s" in unaffected.signals

    await asyncio.wait_for(workers.wait_up(0), BOUND_S)
    assert workers.restarts(0) == 1 and workers.pids()[0] not in (None, pid)
    back = await workers.read(victim, endpoints[victim], 2.0)
    assert back.pods_read == 2 and back.errors == ()
    assert "prompt_tokens_per_s" not in back.signals  # a new worker: no rate across the gap
    for pod in pods:
        pod.serve(prompt_tokens=10, ttfts=[])
    again = await workers.read(victim, endpoints[victim], 3.0)
    assert again.signals["prompt_tokens_per_s"] == pytest.approx(20.0)


async def test_a_hung_worker_times_out_as_an_error_and_is_killed_and_restarted(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    _, endpoints = fleet
    workers = make_workers(
        worker=WorkerConfig(
            workers=2,
            request_timeout_s=0.5,
            heartbeat_s=0.1,
            hang_after_s=1.0,
            restart_backoff_s=0.05,
        )
    )
    await workers.start()
    key = keys_of(workers, 1)[0]
    pid = workers.pids()[1]
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # alive but silent: no answers, no heartbeats
    try:
        stuck = await workers.read(key, endpoints[key], 0.0)
        assert stuck.pods_read == 0 and stuck.signals == {}
        assert "scrape worker 1" in stuck.errors[0] and "no answer within 0.5s" in stuck.errors[0]
        await asyncio.wait_for(workers.wait_exited(1), BOUND_S)
    finally:
        if alive(pid):
            os.kill(pid, signal.SIGCONT)
    down = await workers.read(key, endpoints[key], 1.0)
    assert "hung" in down.errors[0] and "SIGKILL" in down.errors[0]
    await asyncio.wait_for(workers.wait_up(1), BOUND_S)
    back = await workers.read(key, endpoints[key], 2.0)
    assert back.pods_read == 2 and back.errors == ()


async def test_an_answer_after_its_timeout_is_dropped_not_given_to_the_next_read(
    make_workers: Factory,
) -> None:
    page = (FIXTURES / "vllm_v1_0.10.txt").read_text()
    held = asyncio.Event()
    release = asyncio.Event()
    served = 0

    async def handler(_: web.Request) -> web.Response:
        nonlocal served
        served += 1
        if served == 1:  # the first scrape waits, then serves a page of its own
            held.set()
            await release.wait()
            body = page.replace("vllm:num_requests_waiting{", "vllm:num_requests_waiting_x{")
            return web.Response(body=body.encode(), content_type="text/plain")
        return web.Response(body=page.encode(), content_type="text/plain")

    runner, port = await serve_route("/metrics", handler)
    url = f"http://127.0.0.1:{port}/metrics"
    pods = [PodEndpoint("p", url)]
    workers = make_workers(
        ScrapeConfig(timeout_s=BOUND_S),
        WorkerConfig(workers=1, request_timeout_s=0.3, heartbeat_s=0.1, hang_after_s=BOUND_S),
    )
    try:
        late = await workers.read("t", pods, 1.0)
        assert late.pods_read == 0 and "no answer within 0.3s" in late.errors[0]
        await asyncio.wait_for(held.wait(), BOUND_S)
        second = asyncio.ensure_future(workers.read("t", pods, 2.0))
        release.set()  # the first answer now arrives, after its request gave up
        reading = await asyncio.wait_for(second, BOUND_S)
        assert reading.t == 2.0 and reading.pods_read == 1 and reading.signals["waiting"] == 11
        await asyncio.wait_for(workers.until(lambda: workers.stale_responses > 0), BOUND_S)
        assert workers.stale_responses == 1
    finally:
        await runner.cleanup()


async def test_a_worker_runs_the_controllers_package_not_one_in_the_working_directory(
    make_workers: Factory,
    fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``python -m`` imports from the working directory first: a benchmark measuring an
    older revision (its package on PYTHONPATH) from a checkout of a newer one once ran
    the newer workers under the older controller."""
    decoy = tmp_path / "autoscaler" / "commands"
    decoy.mkdir(parents=True)
    (tmp_path / "autoscaler" / "__init__.py").write_text("")
    (decoy / "__init__.py").write_text("")
    (decoy / "scrape_worker.py").write_text("raise SystemExit('the decoy ran')\n")
    monkeypatch.chdir(tmp_path)
    pods, endpoints = fleet
    workers = make_workers()
    reading = await workers.read(KEYS[0], endpoints[KEYS[0]], 1.0)
    assert reading.pods_read == 2 and reading.errors == ()


async def test_close_stops_every_worker_even_a_stopped_one(make_workers: Factory) -> None:
    workers = make_workers(worker=WorkerConfig(workers=3, close_timeout_s=0.5))
    await workers.start()
    pids = [p for p in workers.pids() if p is not None]
    assert len(pids) == 3 and all(alive(p) for p in pids)
    os.kill(pids[2], signal.SIGSTOP)  # cannot act on EOF: killed after close_timeout_s
    await asyncio.wait_for(workers.close(), BOUND_S)
    assert [p for p in pids if alive(p)] == []
    after = await workers.read("t", [PodEndpoint("p", "http://127.0.0.1:9/metrics")], 5.0)
    assert after.pods_read == 0 and after.errors == ("scrape workers closed",)


async def test_forget_drops_a_targets_histories_in_its_worker(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    pods, endpoints = fleet
    workers = make_workers()
    key = KEYS[0]
    await workers.read(key, endpoints[key], 0.0)
    for pod in pods:
        pod.serve(prompt_tokens=10, ttfts=[])
    workers.forget(key)
    reading = await workers.read(key, endpoints[key], 1.0)
    assert reading.pods_read == 2 and "prompt_tokens_per_s" not in reading.signals


async def test_a_changed_pod_list_reaches_the_worker(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    _, endpoints = fleet
    workers = make_workers()
    key = KEYS[0]
    both = endpoints[key]
    assert (await workers.read(key, both, 0.0)).pods_read == 2
    assert (await workers.read(key, both[:1], 1.0)).pods_expected == 1
    one = await workers.read(key, both[:1], 2.0)  # unchanged: not sent again, still read
    assert one.pods_read == 1 and one.signals["waiting"] == 0
    assert (await workers.read(key, both, 3.0)).pods_read == 2


def test_bad_worker_settings_name_the_field_and_rule() -> None:
    with pytest.raises(ValueError, match="workers=0: must be between 1 and 64"):
        WorkerConfig(workers=0)
    with pytest.raises(ValueError, match="hang_after_s=0: must be > 0"):
        WorkerConfig(hang_after_s=0)


def test_on_uvloop_the_workers_read_restart_and_close_like_on_asyncio() -> None:
    uvloop = pytest.importorskip("uvloop")

    async def scenario() -> list[int]:
        pod = FakeVllm()
        pod.set(waiting=4, running=9, kv=0.5)
        runner, urls = await start_pods([pod])
        pods = [PodEndpoint("p", urls[0])]
        workers = ScrapeWorkers(ScrapeConfig(timeout_s=5.0), QUICK)
        try:
            assert workers.command()[-2] == "uvloop"  # the workers run on uvloop too
            first = await workers.read("t", pods, 0.0)
            assert first.pods_read == 1 and first.signals["waiting"] == 4
            index = workers.worker_of("t")
            pid = workers.pids()[index]
            assert pid is not None
            os.kill(pid, signal.SIGKILL)
            await asyncio.wait_for(workers.wait_exited(index), BOUND_S)
            assert "SIGKILL" in (await workers.read("t", pods, 1.0)).errors[0]
            await asyncio.wait_for(workers.wait_up(index), BOUND_S)
            assert (await workers.read("t", pods, 2.0)).pods_read == 1
            return [pid, *(p for p in workers.pids() if p is not None)]
        finally:
            await workers.close()
            await runner.cleanup()

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        pids = runner.run(scenario())
    assert len(pids) == 3 and [p for p in pids if alive(p)] == []


def test_workers_exit_when_the_controller_process_is_killed() -> None:
    """EOF on their stdin ends them: a SIGKILLed controller leaves no scrape worker."""
    script = (
        "import asyncio, json\n"
        "from autoscaler.metrics.scrape_workers import ScrapeWorkers, WorkerConfig\n"
        "async def main():\n"
        "    workers = ScrapeWorkers(worker=WorkerConfig(workers=2))\n"
        "    await workers.start()\n"
        "    print(json.dumps(workers.pids()), flush=True)\n"
        "    await asyncio.Event().wait()\n"
        "asyncio.run(main())\n"
    )
    controller = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert controller.stdout is not None
        ready, _, _ = select.select([controller.stdout], [], [], BOUND_S)
        assert ready, "the controller did not start its workers"
        pids = json.loads(controller.stdout.readline())
        assert len(pids) == 2
        handles = [os.pidfd_open(p) for p in pids]  # readable once the process has exited
    finally:
        controller.kill()
        controller.wait(BOUND_S)
    try:
        for fd in handles:
            ready, _, _ = select.select([fd], [], [], BOUND_S)
            assert ready, "a scrape worker outlived its controller"
    finally:
        for fd in handles:
            os.close(fd)


async def test_the_worker_side_answers_by_id_forgets_and_runs_its_idle_hook() -> None:
    """`serve_pipes` in this process, on real pipes: what a worker process runs."""
    pod = FakeVllm()
    pod.set(waiting=4, running=9, kv=0.5)
    pod.serve(prompt_tokens=0, ttfts=[])
    runner, urls = await start_pods([pod])
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    loop = asyncio.get_running_loop()
    frames = Frames()
    reader, _ = await loop.connect_read_pipe(lambda: frames, os.fdopen(answers_r, "rb", 0))
    idle: list[int] = []
    worker = asyncio.ensure_future(
        serve_pipes(
            ScrapeConfig(timeout_s=5.0), BOUND_S, requests_r, answers_w, lambda: idle.append(1)
        )
    )

    async def answers(ids: set[int]) -> dict[int, Any]:
        while not ids <= {m[0] for m in frames.messages}:
            frames.arrived.clear()
            await asyncio.wait_for(frames.arrived.wait(), BOUND_S)
        return {m[0]: m for m in frames.messages if m[0] in ids}

    try:
        pods = [("p", urls[0])]
        os.write(requests_w, _frame([(1, "ns/a", 0.0, pods), (2, "ns/b", 0.0, pods)]))
        first = await answers({1, 2})
        t, signals, pods_read, expected = first[1][1:5]  # (id, t, signals, read, expected, ...)
        assert (t, pods_read, expected) == (0.0, 1, 1) and signals["waiting"] == 4
        assert first[1][-1] == "ns/a" and first[2][-1] == "ns/b"
        pod.serve(prompt_tokens=100, ttfts=[])
        # b: its pod list is kept (None: unchanged); a: forgotten, so unknown to the worker
        os.write(requests_w, _frame([(-1, "ns/a"), (3, "ns/b", 1.0, None), (4, "ns/a", 1.0, None)]))
        second = await answers({3, 4})
        assert second[3][3] == 1 and second[3][2]["prompt_tokens_per_s"] == pytest.approx(100.0)
        assert second[4][3] == 0 and second[4][5] == (
            "scrape worker has no pod list for this target",
        )
        assert frames.messages[0][0] == 0  # the hello came first
    finally:
        os.close(requests_w)  # EOF: the worker closes its source and returns
        await asyncio.wait_for(worker, BOUND_S)
        reader.close()
        await runner.cleanup()
    assert idle  # ran once nothing was in flight


# ------------------------------------------------------------- launcher, fork and reaper
def parent_of(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def cmdline(pid: int) -> list[bytes]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")


def shared_dirty_kb(pid: int) -> int:
    """Anonymous pages written before a fork and still shared: the launcher's heap."""
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Shared_Dirty:"):
            return int(line.split()[1])
    raise AssertionError("no Shared_Dirty in smaps_rollup")


async def test_workers_are_forked_from_one_launcher_that_becomes_their_reaper(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    _, endpoints = fleet
    workers = make_workers()
    for key in KEYS:
        assert (await workers.read(key, endpoints[key], 0.0)).pods_read == 2
    pids = [p for p in workers.pids() if p is not None]
    assert len(pids) == 2
    (reaper,) = workers.reaper_pids()
    assert [parent_of(p) for p in pids] == [reaper, reaper]
    argv = cmdline(reaper)
    assert b"-S" in argv and argv[3].endswith(b"scrape_reaper.py")  # no site-packages
    assert sorted(int(a) for a in argv[4:] if a) == sorted(pids)
    # the import heap is shared copy-on-write, not one copy per worker
    assert all(shared_dirty_kb(p) > 4096 for p in pids)


async def test_a_restarted_worker_comes_from_a_launcher_of_its_own(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    _, endpoints = fleet
    workers = make_workers()
    await workers.start()
    first = workers.pids()
    assert first[0] is not None and first[1] is not None
    os.kill(first[0], signal.SIGTERM)
    await asyncio.wait_for(workers.wait_exited(0), BOUND_S)
    key = keys_of(workers, 0)[0]
    down = await workers.read(key, endpoints[key], 1.0)
    assert "exited with exit code -15 (SIGTERM)" in down.errors[0]
    await asyncio.wait_for(workers.wait_up(0), BOUND_S)
    now = workers.pids()
    assert now[1] == first[1] and now[0] not in (None, first[0])
    assert now[0] is not None
    reapers = workers.reaper_pids()
    assert len(reapers) == 2 and parent_of(now[0]) != parent_of(first[1])
    assert (await workers.read(key, endpoints[key], 2.0)).pods_read == 2


async def test_a_killed_reaper_takes_its_workers_down_as_errors_and_they_restart(
    make_workers: Factory, fleet: tuple[list[FakeVllm], dict[str, list[PodEndpoint]]]
) -> None:
    """Never a worker nobody watches: without its reaper the exit code is unknown, so
    the workers are killed, read as errors saying so, and started again."""
    _, endpoints = fleet
    workers = make_workers()
    await workers.start()
    before = [p for p in workers.pids() if p is not None]
    (reaper,) = workers.reaper_pids()
    os.kill(reaper, signal.SIGKILL)
    for index in (0, 1):
        await asyncio.wait_for(workers.wait_exited(index), BOUND_S)
    key = keys_of(workers, 1)[0]
    down = await workers.read(key, endpoints[key], 1.0)
    assert down.pods_read == 0 and "exit code unknown: its launcher exit code -9" in down.errors[0]
    for index in (0, 1):
        await asyncio.wait_for(workers.wait_up(index), BOUND_S)
    assert (await workers.read(key, endpoints[key], 2.0)).pods_read == 2
    await asyncio.wait_for(asyncio.to_thread(_until_gone, before), BOUND_S)


def _until_gone(pids: list[int]) -> None:
    handles = []
    for pid in pids:
        try:
            handles.append(os.pidfd_open(pid))
        except ProcessLookupError:
            continue  # gone already
    for fd in handles:
        select.select([fd], [], [], BOUND_S)
        os.close(fd)


REAPER_SCRIPT = """
import os, sys, time
from autoscaler.commands.scrape_worker import REAPER
pids = []
for code in (None, 3):
    pid = os.fork()
    if pid == 0:
        if code is None:
            time.sleep(BOUND_S)  # until killed
        os._exit(code or 0)
    pids.append(pid)
print(" ".join(map(str, pids)), flush=True)
os.execv(sys.executable, [sys.executable, "-I", "-S", REAPER, *map(str, pids)])
"""


def test_the_reaper_reports_each_exit_kills_only_its_own_children_and_then_exits() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", REAPER_SCRIPT.replace("BOUND_S", repr(BOUND_S))],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=Path(__file__).parents[2],
    )
    assert proc.stdin is not None and proc.stdout is not None
    try:
        blocked, exits_3 = map(int, proc.stdout.readline().split())
        assert proc.stdout.readline().split() == [b"exit", str(exits_3).encode(), b"3"]
        # not its child (this test process): ignored; its blocked child: SIGKILLed
        proc.stdin.write(f"kill {os.getpid()}\nkill {blocked}\n".encode())
        proc.stdin.flush()
        assert proc.stdout.readline().split() == [b"exit", str(blocked).encode(), b"-9"]
        assert proc.wait(BOUND_S) == 0  # every child reaped: done
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(BOUND_S)
