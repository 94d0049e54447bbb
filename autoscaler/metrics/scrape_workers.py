"""Pod scraping in K worker processes: the controller's event loop keeps only the IPC.

One controller process is capped at one core, and scraping (GET, parse, per-pod windows)
is most of its CPU per target per tick (docs/scale.md). `ScrapeWorkers` is a
`MetricSource` like `PodScrapeSource`, with the same ``read(key, pods, now) ->
TargetReading``, that runs ``workers`` child processes, each a `PodScrapeSource` with the
same `ScrapeConfig` on its own event loop (uvloop when the controller runs on it):

- a target goes to the worker ``crc32(key) % workers`` (stable), so its pods' histories
  live in that worker only and its rates are what the in-process source computes;
- IPC is the child's stdin/stdout pipes: each frame is a 4-byte length and a `marshal`-ed
  list of messages, all the messages queued in one event-loop iteration in one frame
  (one write per worker per iteration, each side); a read sends ``(id, key, now, pods)``
  with the target's pod list only when it changed since the last one sent to that worker,
  and gets back the `TargetReading`'s fields;
- the workers come from one launcher, a fresh interpreter (``python -m
  autoscaler.commands.scrape_worker ... --fork IN:OUT ...``, never the controller's
  ``__main__``) that imports the scrape path only (~26 MB RSS, ~16 MB of it private),
  freezes it, forks one worker per pipe pair and then execs itself into the workers'
  reaper (`commands/scrape_reaper.py`, standard library only): the workers share the
  import heap copy-on-write (side by side at K=2: ~12 MB less for the group,
  docs/scale.md), and the reaper tells this process each one's exit code (``exit PID
  CODE``) and kills one on request (``kill PID``), so a PID is never killed once reused.
  A restarted worker comes from a launcher of its own. Each worker runs its cyclic GC's
  young collections when no read is in flight (`GcPacer`).

Faults (missing data is never zero): a worker that exits (its reaper gone too: killed,
its exit code unknown), or sends nothing (not even its
heartbeat, every ``heartbeat_s``) for ``hang_after_s`` and is then killed, fails its
targets' reads in flight and until it is back as errors naming the worker and its exit
code (``pods_read`` 0, no signals: the core holds); it is restarted after a backoff
(``restart_backoff_s`` doubling up to ``restart_backoff_max_s``, back to the first once a
worker stayed up ``backoff_reset_s``) with empty histories, like a restarted pod: no rate
across the gap. A read not answered within ``request_timeout_s`` is an error too; every
request has its own id, never reused, so a late answer is dropped
(``stale_responses``), never taken for a later request's. `close` closes every worker's
stdin (it exits on EOF, also when the controller dies), and kills any still running
after ``close_timeout_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import marshal
import os
import signal
import sys
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Final

import autoscaler
from autoscaler.metrics.pod_scrape import PodScrapeSource, ScrapeConfig
from autoscaler.metrics.source import PodEndpoint, TargetReading

_LEN: Final = 4  # frame header: payload length, little-endian
_HELLO: Final = 0  # message id of the worker's hello and heartbeats: (0, pid)
_FORGET: Final = -1  # (-1, key): drop a target's histories
_NO_PODS: Final = "scrape worker has no pod list for this target"
MAX_WORKERS: Final = 64
# The worker process's entry point (`serve_worker` with the GC pacer, in commands/ since
# it composes this module with commands/gc_pacing.py).
WORKER_MODULE: Final = "autoscaler.commands.scrape_worker"
# The directory holding the `autoscaler` package this process imported: the worker runs
# there, so ``-m`` (which puts the working directory first on sys.path) imports this same
# package, not another copy in the caller's working directory.
PACKAGE_ROOT: Final = os.path.dirname(os.path.dirname(os.path.abspath(autoscaler.__file__)))


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How the main process runs and watches its scrape workers (the scraping itself is
    the `ScrapeConfig`). Defaults suit a 1 s tick; tests shorten them."""

    workers: int = 2
    request_timeout_s: float = 0.0  # 0: the scrape timeout x 2 + 5 s
    heartbeat_s: float = 1.0
    hang_after_s: float = 10.0
    start_timeout_s: float = 30.0
    restart_backoff_s: float = 0.5
    restart_backoff_max_s: float = 30.0
    backoff_reset_s: float = 60.0
    close_timeout_s: float = 2.0
    event_loop: str = "auto"  # auto: uvloop in the workers when the controller runs on it

    def __post_init__(self) -> None:
        if not 1 <= self.workers <= MAX_WORKERS:
            raise ValueError(f"workers={self.workers}: must be between 1 and {MAX_WORKERS}")
        for name in (
            "heartbeat_s",
            "hang_after_s",
            "start_timeout_s",
            "restart_backoff_s",
            "restart_backoff_max_s",
            "backoff_reset_s",
            "close_timeout_s",
        ):
            value = getattr(self, name)
            if not value > 0:
                raise ValueError(f"{name}={value}: must be > 0")
        if self.request_timeout_s < 0:
            raise ValueError(f"request_timeout_s={self.request_timeout_s}: must be >= 0")
        if self.event_loop not in ("auto", "uvloop", "asyncio"):
            raise ValueError(
                f"event_loop={self.event_loop!r}: must be one of auto, uvloop, asyncio"
            )


def worker_index(key: str, workers: int) -> int:
    """The worker a target's reads go to (the same in every process and run)."""
    return zlib.crc32(key.encode()) % workers


def _frame(messages: list[Any]) -> bytes:
    payload = marshal.dumps(messages)
    return len(payload).to_bytes(_LEN, "little") + payload


def _frames(buffer: bytearray) -> list[Any]:
    """Every whole frame's messages, removed from ``buffer`` (a partial one stays)."""
    out: list[Any] = []
    at, size = 0, len(buffer)
    while size - at >= _LEN:
        n = int.from_bytes(buffer[at : at + _LEN], "little")
        if size - at - _LEN < n:
            break
        out.extend(marshal.loads(buffer[at + _LEN : at + _LEN + n]))
        at += _LEN + n
    if at:
        del buffer[:at]
    return out


class _Outbox:
    """Messages queued during one event-loop iteration, written as one frame."""

    __slots__ = ("_loop", "_queued", "_write")

    def __init__(self, loop: asyncio.AbstractEventLoop, write: Callable[[bytes], object]) -> None:
        self._loop = loop
        self._write = write
        self._queued: list[Any] = []

    def put(self, message: Any) -> None:
        if not self._queued:
            self._loop.call_soon(self.flush)
        self._queued.append(message)

    def flush(self) -> None:
        if self._queued:
            messages, self._queued = self._queued, []
            self._write(_frame(messages))


# ----------------------------------------------------------------------- main process
@dataclass(slots=True)
class _Pending:
    future: asyncio.Future[TargetReading]
    now: float
    expected: int


def _failed(now: float, expected: int, error: str) -> TargetReading:
    return TargetReading(t=now, pods_read=0, pods_expected=expected, errors=(error,))


def _exit_text(code: int | None) -> str:
    if code is None:
        return "exit code unknown"
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"exit code {code} ({signal.Signals(-code).name})"
    return f"exit code {code}"


class _WorkerOutput(asyncio.Protocol):
    """A worker's stdout, as the main process reads it: frames of answers. Its end (EOF)
    says nothing about how the worker ended: its reaper's ``exit`` line does."""

    def __init__(self, worker: _Worker) -> None:
        self.worker = worker

    def data_received(self, data: bytes) -> None:
        w = self.worker
        w.inbox += data
        w.owner._received(w, _frames(w.inbox))


@dataclass(eq=False)
class _Launch(asyncio.SubprocessProtocol):
    """One launcher process (then the reaper of the workers it forked), as the main
    process sees it: ``pid INDEX PID`` and ``exit PID CODE`` lines on its stdout, ``kill
    PID`` lines to its stdin."""

    owner: ScrapeWorkers
    workers: list[_Worker]
    transport: asyncio.SubprocessTransport | None = None
    lines: bytearray = field(default_factory=bytearray)
    by_pid: dict[int, _Worker] = field(default_factory=dict)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd != 1:
            return
        self.lines += data
        *whole, rest = self.lines.split(b"\n")
        self.lines = bytearray(rest)
        for line in whole:
            verb, *args = line.split()
            if verb == b"pid" and len(args) == 2:
                index, pid = int(args[0]), int(args[1])
                w = self.workers[index]
                if w.launch is self:
                    w.pid = pid
                    self.by_pid[pid] = w
            elif verb == b"exit" and len(args) == 2:
                gone = self.by_pid.pop(int(args[0]), None)
                if gone is not None and gone.launch is self:
                    self.owner._exited(gone, f"exited with {_exit_text(int(args[1]))}")

    def connection_lost(self, exc: Exception | None) -> None:
        """Gone, and every line it wrote was read: a worker of this launch it did not
        report is gone with it (a launcher that failed before forking, or a reaper
        killed), its exit code unknown."""
        code = self.transport.get_returncode() if self.transport is not None else None
        for w in self.workers:
            if w.launch is self:
                if w.pid is not None:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(w.pid, signal.SIGKILL)  # never a worker left unwatched
                self.owner._exited(
                    w, f"exited (exit code unknown: its launcher {_exit_text(code)})"
                )
        if self.transport is not None:
            self.transport.close()
        self.owner._launches.discard(self)
        self.done.set()

    def kill(self, pid: int) -> bool:
        """Ask the reaper to SIGKILL ``pid`` (only it knows the PID was not reused)."""
        pipe: Any = self.transport.get_pipe_transport(0) if self.transport else None
        if pipe is None or pipe.is_closing():
            return False
        pipe.write(f"kill {pid}\n".encode())
        return True


@dataclass(eq=False)
class _Worker:
    """One worker process as the main process sees it."""

    index: int
    owner: ScrapeWorkers
    state: str = "down"  # down (restart pending) | starting | up | closed
    pid: int | None = None
    launch: _Launch | None = None
    writer: Any = None  # its stdin's write transport (uvloop's is no asyncio subclass)
    reader: asyncio.BaseTransport | None = None
    outbox: _Outbox | None = None
    inbox: bytearray = field(default_factory=bytearray)
    pending: dict[int, _Pending] = field(default_factory=dict)
    deadlines: deque[tuple[float, int]] = field(default_factory=deque)
    sent: dict[str, Sequence[PodEndpoint]] = field(default_factory=dict)
    last_heard: float = 0.0
    up_since: float = 0.0
    ready: asyncio.Future[None] | None = None
    exited: asyncio.Event = field(default_factory=asyncio.Event)
    reason: str = "not started"  # why it is down
    killed_because: str | None = None
    backoff_s: float = 0.0
    restart_at: float = 0.0
    restarts: int = 0
    _watch: asyncio.TimerHandle | None = None
    _restart: asyncio.TimerHandle | None = None

    # -- helpers ---------------------------------------------------------------------------
    def name(self) -> str:
        return f"scrape worker {self.index} (pid {self.pid})"

    def fail_pending(self, error: str) -> None:
        pending, self.pending = self.pending, {}
        self.deadlines.clear()
        for p in pending.values():
            if not p.future.done():
                p.future.set_result(_failed(p.now, p.expected, error))


class ScrapeWorkers:
    """`MetricSource` scraping in ``worker.workers`` child processes; create inside a
    running event loop (the workers start on the first read, or `start`)."""

    def __init__(
        self, config: ScrapeConfig | None = None, worker: WorkerConfig | None = None
    ) -> None:
        self.config = config or ScrapeConfig()
        self.worker_config = worker or WorkerConfig()
        w = self.worker_config
        self.request_timeout_s = w.request_timeout_s or self.config.timeout_s * 2 + 5.0
        self._loop = asyncio.get_running_loop()
        self._workers = [_Worker(i, self) for i in range(w.workers)]
        self._index: dict[str, int] = {}
        self._next_id = 1
        self._closed = False
        self._started = False
        self.stale_responses = 0  # answers that came after their request timed out
        self._launches: set[_Launch] = set()
        self._state_event = asyncio.Event()

    def _changed(self) -> None:
        """A worker changed state (or a late answer was dropped): wake `until`."""
        self._state_event.set()
        self._state_event = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------
    def _loop_choice(self) -> str:
        choice = self.worker_config.event_loop
        if choice == "auto":
            return "uvloop" if type(self._loop).__module__.startswith("uvloop") else "asyncio"
        return choice

    def command(self) -> list[str]:
        """The worker's command line."""
        config = json.dumps(asdict(self.config))
        w = self.worker_config
        return [
            sys.executable,
            "-m",
            WORKER_MODULE,
            config,
            self._loop_choice(),
            str(w.heartbeat_s),
        ]

    async def start(self) -> None:
        """Start every worker and wait until each has said hello (or failed: its reads
        are then errors until a restart succeeds)."""
        if not self._started:
            self._started = True
            self._spawn(*self._workers)
        await asyncio.gather(*(self._await_ready(w) for w in self._workers))

    def _spawn(self, *workers: _Worker) -> None:
        """Start ``workers`` from one launcher: forked from it, they share its imports."""
        if self._closed:
            return
        for w in workers:
            w.state = "starting"
            w.ready = self._loop.create_future()
            w.exited = asyncio.Event()
            w.inbox.clear()
            w.sent.clear()
            w.pid = None
            w.last_heard = self._loop.time()
            w.killed_because = None
            self._schedule_watch(w)
        self._changed()
        name = f"scrape-workers-{'-'.join(str(w.index) for w in workers)}-start"
        self._loop.create_task(self._exec(list(workers)), name=name)

    async def _exec(self, workers: list[_Worker]) -> None:
        launch = _Launch(self, workers)
        # ours, per worker: (its stdin's write end, its stdout's read end)
        ends: list[tuple[int, int]] = []
        theirs: list[int] = []
        try:
            for _ in workers:
                in_r, in_w = os.pipe()
                theirs.append(in_r)
                out_r, out_w = os.pipe()
                theirs.append(out_w)
                ends.append((in_w, out_r))
            for w in workers:
                w.launch = launch
            pairs = [f"{theirs[2 * k]}:{theirs[2 * k + 1]}" for k in range(len(workers))]
            transport, _ = await self._loop.subprocess_exec(
                lambda: launch,
                *self.command(),
                "--fork",
                *pairs,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=None,
                cwd=PACKAGE_ROOT,
                pass_fds=theirs,
            )
        except OSError as err:
            for in_w, out_r in ends:
                os.close(in_w)
                os.close(out_r)
            for w in workers:
                w.launch = None
                self._exited(w, f"could not start: {err}")
            return
        finally:
            for fd in theirs:
                os.close(fd)  # theirs now: EOF on a worker's stdin comes from us alone
        launch.transport = transport
        self._launches.add(launch)
        for w, (in_w, out_r) in zip(workers, ends, strict=True):
            writer: Any = None
            try:
                writer, _ = await self._loop.connect_write_pipe(
                    asyncio.Protocol, os.fdopen(in_w, "wb", 0)
                )
                reader, _ = await self._loop.connect_read_pipe(
                    functools.partial(_WorkerOutput, w), os.fdopen(out_r, "rb", 0)
                )
            except Exception as err:  # never a worker we cannot talk to
                if writer is not None:
                    writer.close()
                self._kill(w, f"pipes not usable: {err!r}")
                continue
            if w.launch is not launch:  # gone already (perhaps restarted: not ours to touch)
                writer.close()
                reader.close()
                continue
            w.writer, w.reader = writer, reader
            w.outbox = _Outbox(self._loop, writer.write)
            if self._closed:
                self._stop(w)

    async def _await_ready(self, w: _Worker) -> None:
        if w.ready is not None and not w.ready.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(w.ready), self.worker_config.start_timeout_s)

    def _schedule_watch(self, w: _Worker) -> None:
        if w._watch is not None:
            w._watch.cancel()
        c = self.worker_config
        period = min(1.0, self.request_timeout_s / 4, c.hang_after_s / 4, c.heartbeat_s)
        w._watch = self._loop.call_later(period, self._check, w)

    def _check(self, w: _Worker) -> None:
        """Expire requests past their deadline; kill a worker gone silent."""
        w._watch = None
        if w.state in ("down", "closed"):
            return
        now = self._loop.time()
        while w.deadlines and w.deadlines[0][0] <= now:
            _, rid = w.deadlines.popleft()
            p = w.pending.pop(rid, None)
            if p is not None and not p.future.done():
                error = f"{w.name()}: no answer within {self.request_timeout_s:g}s"
                p.future.set_result(_failed(p.now, p.expected, error))
        silent = now - w.last_heard
        c = self.worker_config
        if w.state == "starting" and silent > c.start_timeout_s:
            self._kill(w, f"did not start within {c.start_timeout_s:g}s")
        elif w.state == "up" and silent > c.hang_after_s:
            self._kill(w, f"sent nothing for {silent:.1f}s (hung)")
        self._schedule_watch(w)

    def _kill(self, w: _Worker, why: str) -> None:
        """Kill a worker; its exit (its reaper's ``exit`` line) does the rest."""
        w.killed_because = why
        if w.launch is not None and w.pid is not None:
            if not w.launch.kill(w.pid):  # the reaper is gone: its end fails the worker
                with contextlib.suppress(ProcessLookupError):
                    os.kill(w.pid, signal.SIGKILL)
        elif w.launch is None:
            self._exited(w, why)
        elif w.launch.transport is not None:  # not forked yet: the launcher hangs
            with contextlib.suppress(ProcessLookupError):
                w.launch.transport.kill()  # its end fails its workers

    def _close_pipes(self, w: _Worker) -> None:
        for pipe in (w.writer, w.reader):
            if pipe is not None:
                pipe.close()
        w.writer = w.reader = None

    def _exited(self, w: _Worker, how: str) -> None:
        now = self._loop.time()
        if w.killed_because is not None:
            how = f"{w.killed_because}: killed, {how}"
            w.killed_because = None
        error = f"{w.name()} {how}"
        w.reason = error
        was_up = w.state == "up"
        w.fail_pending(error)
        if w.ready is not None and not w.ready.done():
            w.ready.set_result(None)
        w.launch = None
        self._close_pipes(w)
        w.outbox = None
        w.exited.set()
        if w._watch is not None:
            w._watch.cancel()
            w._watch = None
        if self._closed:
            w.state = "closed"
            self._changed()
            return
        c = self.worker_config
        if was_up and now - w.up_since >= c.backoff_reset_s:
            w.backoff_s = c.restart_backoff_s
        else:
            w.backoff_s = min(max(w.backoff_s * 2, c.restart_backoff_s), c.restart_backoff_max_s)
        w.state = "down"
        w.restart_at = now + w.backoff_s
        w.restarts += 1
        w._restart = self._loop.call_later(w.backoff_s, self._spawn, w)
        self._changed()
        print(f"llm-autoscaler: {error}; restarting in {w.backoff_s:g}s", file=sys.stderr)

    def _received(self, w: _Worker, messages: list[Any]) -> None:
        w.last_heard = self._loop.time()
        for m in messages:
            rid = m[0]
            if rid == _HELLO:
                if w.state == "starting":
                    w.state = "up"
                    w.reason = "up"
                    w.up_since = w.last_heard
                    if w.ready is not None and not w.ready.done():
                        w.ready.set_result(None)
                    self._changed()
                continue
            p = w.pending.pop(rid, None)
            if p is None:
                self.stale_responses += 1
                self._changed()
                continue
            _, t, signals, pods_read, expected, errors, rejected, key = m
            if errors and errors[0] == _NO_PODS:
                w.sent.pop(key, None)  # send the list again next time
            if not p.future.done():
                p.future.set_result(
                    TargetReading(
                        t=t,
                        signals=signals,
                        pods_read=pods_read,
                        pods_expected=expected,
                        errors=errors,
                        rejected=rejected,
                    )
                )

    # -- MetricSource ----------------------------------------------------------------------
    def worker_of(self, key: str) -> int:
        index = self._index.get(key)
        if index is None:
            index = self._index[key] = worker_index(key, len(self._workers))
        return index

    def pids(self) -> list[int | None]:
        """Each worker's process id (None while it is down)."""
        return [w.pid if w.state in ("starting", "up") else None for w in self._workers]

    def restarts(self, index: int) -> int:
        return self._workers[index].restarts

    async def until(self, condition: Callable[[], bool]) -> None:
        """Until ``condition()`` holds, checked when a worker changes state or a late
        answer is dropped (tests; callers bound the wait)."""
        while not condition():
            if self._closed:
                raise RuntimeError("scrape workers closed")
            await self._state_event.wait()

    async def wait_up(self, index: int) -> None:
        """Until worker ``index`` has said hello."""
        await self.until(lambda: self._workers[index].state == "up")

    async def wait_exited(self, index: int) -> None:
        """Until worker ``index``'s current process has exited (tests)."""
        await self._workers[index].exited.wait()

    async def read(self, key: str, pods: Sequence[PodEndpoint], now: float) -> TargetReading:
        if self._closed:
            return _failed(now, len(pods), "scrape workers closed")
        if not self._started:
            await self.start()
        w = self._workers[self.worker_of(key)]
        if w.state == "starting":
            await self._await_ready(w)
        if w.state != "up" or w.outbox is None:
            if w.state == "down":
                wait = max(0.0, w.restart_at - self._loop.time())
                return _failed(now, len(pods), f"{w.reason}; restarting in {wait:.1f}s")
            return _failed(now, len(pods), f"{w.reason} (state {w.state})")
        pod_list = None
        if w.sent.get(key) != pods:
            pod_list = [(p.name, p.url) for p in pods]
            w.sent[key] = pods
        rid = self._next_id
        self._next_id += 1
        future: asyncio.Future[TargetReading] = self._loop.create_future()
        w.pending[rid] = _Pending(future, now, len(pods))
        w.deadlines.append((self._loop.time() + self.request_timeout_s, rid))
        w.outbox.put((rid, key, now, pod_list))
        try:
            return await future
        finally:
            w.pending.pop(rid, None)

    def forget(self, key: str) -> None:
        """Drop a target's histories (target deleted), in its worker."""
        w = self._workers[self.worker_of(key)]
        self._index.pop(key, None)
        w.sent.pop(key, None)
        if w.outbox is not None:
            w.outbox.put((_FORGET, key))

    def _stop(self, w: _Worker) -> None:
        if w.writer is not None:
            w.writer.close()  # EOF: the worker closes its source and exits

    async def close(self) -> None:
        """Stop every worker: EOF on its stdin, killed after ``close_timeout_s``; then
        its reaper ends too."""
        self._closed = True
        for w in self._workers:
            if w._restart is not None:
                w._restart.cancel()
            if w.outbox is not None:
                w.outbox.flush()
            w.fail_pending("scrape workers closed")
            self._stop(w)
        live = [w for w in self._workers if w.state in ("starting", "up")]
        timeout = self.worker_config.close_timeout_s
        if live:
            waits = [asyncio.ensure_future(w.exited.wait()) for w in live]
            _, late = await asyncio.wait(waits, timeout=timeout)
            if late:
                for w in live:
                    if not w.exited.is_set():
                        self._kill(w, "did not exit on EOF")
                await asyncio.wait(late, timeout=timeout)
            for f in waits:
                f.cancel()
        launches = [asyncio.ensure_future(x.done.wait()) for x in self._launches]
        if launches:  # each ends once its workers are reaped
            await asyncio.wait(launches, timeout=timeout)
            for f in launches:
                f.cancel()

    def reaper_pids(self) -> list[int]:
        """The launchers' (then reapers') process ids, while they run (benchmarks)."""
        return [
            pid
            for x in self._launches
            if x.transport is not None and (pid := x.transport.get_pid()) is not None
        ]


# ------------------------------------------------------------------------ worker process
class _Inbox(asyncio.Protocol):
    """The worker's stdin: frames of requests; EOF ends the worker."""

    def __init__(self, handle: Callable[[list[Any]], None], done: asyncio.Event) -> None:
        self.buffer = bytearray()
        self.handle = handle
        self.done = done

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        self.handle(_frames(self.buffer))

    def eof_received(self) -> bool:
        self.done.set()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.done.set()


async def serve_pipes(
    config: ScrapeConfig,
    heartbeat_s: float,
    in_fd: int,
    out_fd: int,
    on_idle: Callable[[], object] = lambda: None,
) -> None:
    """The worker's side: requests from ``in_fd``, answers (and a hello, then a heartbeat
    every ``heartbeat_s``) to ``out_fd``, until EOF on ``in_fd``; ``on_idle`` runs once
    the last read in flight was answered and its frame written (after the page client's
    receive buffers were freed: none is held between two bursts of reads)."""
    loop = asyncio.get_running_loop()
    source = PodScrapeSource(config)
    pods: dict[str, tuple[PodEndpoint, ...]] = {}
    done = asyncio.Event()
    writer, _ = await loop.connect_write_pipe(asyncio.Protocol, os.fdopen(out_fd, "wb", 0))
    outbox = _Outbox(loop, writer.write)
    tasks: set[asyncio.Task[None]] = set()
    # Targets read at once: the controller sends a whole tick's reads (500 targets x 8
    # pods at 1,000 targets and 2 workers) in one frame, and each read starts its pods'
    # scrapes (a task, coroutine and future each) that then queue on the page
    # semaphore; at most ``max_concurrency`` targets at once keeps ~8x fewer of them
    # alive (the tick's peak, 5-6 MB of RSS a worker, benchmarks/bench_rss.py) and never
    # starves the semaphore (each admitted target has >= 1 pod). Not less: a target
    # waiting on a hung pod holds its slot, and so does that pod a page slot.
    admit = asyncio.Semaphore(config.max_concurrency)

    def idle() -> None:  # after the last answer's frame went out
        if not tasks:
            source.release_buffers()  # up to 64 x 64 KiB, not held between ticks
            on_idle()

    def answered(task: asyncio.Task[None]) -> None:
        tasks.discard(task)
        if not tasks:
            loop.call_soon(idle)

    async def answer(rid: int, key: str, now: float, endpoints: tuple[PodEndpoint, ...]) -> None:
        async with admit:
            r = await source.read(key, endpoints, now)
        outbox.put(
            (
                rid,
                r.t,
                dict(r.signals),
                r.pods_read,
                r.pods_expected,
                r.errors,
                dict(r.rejected),
                key,
            )
        )

    def handle(messages: list[Any]) -> None:
        for m in messages:
            rid, key = m[0], m[1]
            if rid == _FORGET:
                pods.pop(key, None)
                source.forget(key)
                continue
            _, _, now, pod_list = m
            if pod_list is not None:
                pods[key] = tuple(PodEndpoint(name, url) for name, url in pod_list)
            endpoints = pods.get(key)
            if endpoints is None:
                outbox.put((rid, now, {}, 0, 0, (_NO_PODS,), {}, key))
                continue
            task = loop.create_task(answer(rid, key, now, endpoints))
            tasks.add(task)
            task.add_done_callback(answered)

    beating: list[asyncio.TimerHandle] = []

    def beat() -> None:
        outbox.put((_HELLO, os.getpid()))
        beating[:] = [loop.call_later(heartbeat_s, beat)]

    reader, _ = await loop.connect_read_pipe(
        lambda: _Inbox(handle, done), os.fdopen(in_fd, "rb", 0)
    )
    beat()  # hello
    await done.wait()
    for timer in beating:
        timer.cancel()
    reader.close()
    for task in list(tasks):
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await source.close()
    outbox.flush()
    writer.close()


def serve_worker(argv: list[str], on_idle: Callable[[], object] = lambda: None) -> int:
    """A worker process's life, from its command line ``CONFIG_JSON LOOP HEARTBEAT_S``
    (`ScrapeWorkers.command`): reads on stdin, answers on stdout, until EOF.
    ``on_idle`` runs whenever the last read in flight has been answered."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C: the controller stops us
    config = ScrapeConfig(**json.loads(argv[0]))
    loop_choice, heartbeat_s = argv[1], float(argv[2])
    out_fd = os.dup(1)
    os.dup2(2, 1)  # a stray print goes to stderr, not into the frames
    factory = None
    if loop_choice == "uvloop":
        import uvloop

        factory = uvloop.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(serve_pipes(config, heartbeat_s, 0, out_fd, on_idle))
    return 0
