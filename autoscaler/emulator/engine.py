"""The simulator's replica model driven in real time, with per-request bookkeeping.

`EmulatedEngine` runs `autoscaler.sim.replica.Replica` one engine step at a time: it
computes a step, sleeps until the shared `EmuClock` reaches the step's end, then releases
what the step produced (first tokens, finished requests, streamed tokens). So TTFT,
queueing behind ``max_num_seqs``/the token budget and KV pressure (preemptions) all come
from the same model the simulator uses, only paced by the wall clock x speed.

Streamed tokens are counted per engine step: a request that has its first token gains one
token per later step unless it was preempted (it is then frozen until re-admitted).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Literal, get_args

from autoscaler.emulator.clock import EmuClock
from autoscaler.errors import ConfigError
from autoscaler.sim.replica import HardwareProfile, Replica, StepEvents, context_limit_error

FinishReason = Literal["stop", "length", "abort"]
FINISH_REASONS: Final[tuple[FinishReason, ...]] = ("stop", "length", "abort")
# What a replica computes (prefill/decode disaggregation): "prefill" only the prompt and
# its first token (whatever max_tokens asks, as a P/D proxy's max_tokens=1 request);
# "decode" no prompt, its KV taken as transferred in (sim/replica.py ``kv_ready``), the
# first token released when the request joins the decode batch; "both" the whole request.
Role = Literal["prefill", "decode", "both"]
ROLES: Final[tuple[Role, ...]] = get_args(Role)


def check_role(role: str) -> Role:
    if role not in ROLES:
        raise ConfigError(f"role: value {role!r} must be one of {', '.join(ROLES)}")
    return role


# vllm/v1/metrics/loggers.py: request_latency_buckets (e2e, queue, prefill, decode, inference).
REQUEST_LATENCY_BUCKETS_S: Final[tuple[float, ...]] = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip


def build_1_2_5_buckets(max_value: int) -> tuple[float, ...]:
    """vLLM's token-count buckets: 1, 2, 5, 10, 20, 50, ... up to ``max_value``."""
    out: list[float] = []
    for exponent in itertools.count():
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return tuple(out)
            out.append(float(value))
    raise AssertionError("unreachable")  # pragma: no cover


class Histogram:
    """Cumulative Prometheus-style histogram (per-bucket counts, +Inf last, and a sum)."""

    __slots__ = ("bounds", "counts", "total")

    def __init__(self, bounds: Iterable[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value


class RequestRejected(Exception):
    """The engine cannot take this request (too long, not accepting); HTTP status given."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class RequestState:
    """One request's life inside the engine (mutable; owned by the engine's loop)."""

    __slots__ = (
        "admitted_emu",
        "arrival_emu",
        "client_gone",
        "finish_reason",
        "finished_emu",
        "first_step",
        "first_token_emu",
        "lost_steps",
        "max_tokens",
        "paused_at_step",
        "prompt_tokens",
        "rid",
        "stop_at_max",
        "stream",
        "wake",
    )

    def __init__(
        self,
        rid: int,
        prompt_tokens: int,
        max_tokens: int,
        arrival_emu: float,
        stream: bool,
        stop_at_max: bool,
    ) -> None:
        self.rid = rid
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.arrival_emu = arrival_emu
        self.stream = stream
        self.stop_at_max = stop_at_max  # True: finish_reason "length", else "stop"
        self.wake = asyncio.Event()
        self.admitted_emu: float | None = None
        self.first_token_emu: float | None = None
        self.finished_emu: float | None = None
        self.finish_reason: FinishReason | None = None
        self.first_step = 0
        self.lost_steps = 0
        self.paused_at_step: int | None = None
        self.client_gone = False

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def tokens(self, steps: int) -> int:
        """Tokens generated so far, given the engine's step counter."""
        if self.finish_reason is not None:
            return self.max_tokens if self.finish_reason != "abort" else self._live(steps)
        if self.first_token_emu is None:
            return 0
        return self._live(steps)

    def _live(self, steps: int) -> int:
        if self.first_token_emu is None:
            return 0
        end = self.paused_at_step - 1 if self.paused_at_step is not None else steps
        n = 1 + end - self.first_step - self.lost_steps
        return max(1, min(n, self.max_tokens - 1 if self.max_tokens > 1 else 1))


@dataclass(frozen=True, slots=True)
class EngineCounters:
    """Counters kept beside the replica model (what vLLM's frontend observes)."""

    finished: dict[FinishReason, int]
    e2e: Histogram
    queue: Histogram
    prefill: Histogram
    decode: Histogram
    inference: Histogram
    prompt_tokens: Histogram
    generation_tokens: Histogram


class EmulatedEngine:
    """A `Replica` stepped in real time; `submit` requests, `await state.wake` for output."""

    def __init__(
        self,
        profile: HardwareProfile,
        clock: EmuClock,
        *,
        max_model_len: int | None = None,
        stream_interval_s: float = 0.02,
        role: Role = "both",
    ) -> None:
        self.role = check_role(role)
        if max_model_len is None:
            max_model_len = profile.max_model_len  # what the simulator's gateway enforces
        if max_model_len < 2:
            raise ConfigError(f"max_model_len: value {max_model_len} must be >= 2")
        if not stream_interval_s > 0:
            raise ConfigError(f"stream_interval_s: value {stream_interval_s} must be > 0")
        # The replica model refuses by the profile's limit; carry an override into it.
        self.profile = dataclasses.replace(profile, max_model_len=max_model_len)
        self.clock = clock
        self.max_model_len = max_model_len
        self.stream_interval_s = stream_interval_s
        self.replica = Replica(self.profile, start_s=clock.now())
        self.steps = 0
        self.accepting = True
        self._ids = itertools.count(1)
        self._active: dict[int, RequestState] = {}
        self._queued: dict[int, RequestState] = {}  # never admitted yet, arrival order
        self._paused: dict[int, RequestState] = {}  # preempted after their first token
        self._streams: dict[int, RequestState] = {}  # streaming and decoding
        self._to_wake: list[RequestState] = []
        self._preemptions_seen = 0
        self._work = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._task: asyncio.Task[None] | None = None
        token_buckets = build_1_2_5_buckets(max_model_len)
        self.counters = EngineCounters(
            finished=dict.fromkeys(FINISH_REASONS, 0),
            e2e=Histogram(REQUEST_LATENCY_BUCKETS_S),
            queue=Histogram(REQUEST_LATENCY_BUCKETS_S),
            prefill=Histogram(REQUEST_LATENCY_BUCKETS_S),
            decode=Histogram(REQUEST_LATENCY_BUCKETS_S),
            inference=Histogram(REQUEST_LATENCY_BUCKETS_S),
            prompt_tokens=Histogram(token_buckets),
            generation_tokens=Histogram(token_buckets),
        )

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._drive(), name="emulated-engine")

    async def close(self) -> None:
        """Stop stepping; anything still in flight is aborted."""
        self.accepting = False
        self.abort_all()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    @property
    def in_flight(self) -> int:
        return len(self._active)

    async def wait_idle(self) -> None:
        """Until no request is in flight (used by a graceful drain)."""
        await self._idle.wait()

    def abort_all(self) -> list[int]:
        """Drop every request (pod killed): each ends with finish_reason ``abort``.

        The engine starts over from an empty replica model, as a restarted pod would."""
        self.replica = Replica(self.profile, start_s=self.clock.now())
        self._preemptions_seen = 0
        now = self.clock.now()
        dropped = list(self._active)
        for st in list(self._active.values()):
            self._end(st, now, "abort")
        self._queued.clear()
        self._paused.clear()
        self._streams.clear()
        self._wake_pending()
        return dropped

    # ------------------------------------------------------------------ requests
    def submit(
        self, prompt_tokens: int, max_tokens: int, *, stream: bool, stop_at_max: bool = True
    ) -> RequestState:
        if not self.accepting:
            raise RequestRejected(503, "replica is shutting down and accepts no new requests")
        if prompt_tokens < 1:
            raise RequestRejected(400, f"prompt: {prompt_tokens} tokens, must be >= 1")
        if max_tokens < 1:
            raise RequestRejected(400, f"max_tokens: value {max_tokens} must be >= 1")
        too_long = context_limit_error(self.max_model_len, prompt_tokens, max_tokens)
        if too_long is not None:
            raise RequestRejected(400, too_long)
        if self.role == "prefill":
            max_tokens = 1  # the prompt and its first token only
        elif self.role == "decode" and max_tokens < 2:
            raise RequestRejected(
                400,
                f"max_tokens: value {max_tokens} must be >= 2 on a decode replica (its first"
                " token comes from prefill)",
            )
        now = self.clock.now()
        st = RequestState(next(self._ids), prompt_tokens, max_tokens, now, stream, stop_at_max)
        kv_ready = self.role == "decode"
        if not self.replica.add_request(st.rid, prompt_tokens, max_tokens, now, kv_ready=kv_ready):
            raise RequestRejected(
                400,
                f"request needs {prompt_tokens + max_tokens} KV tokens, more than the"
                f" replica's KV capacity {self.profile.kv_capacity_tokens}",
            )
        self._active[st.rid] = st
        self._queued[st.rid] = st
        self._idle.clear()
        self._work.set()
        return st

    def forget(self, st: RequestState) -> None:
        """The client went away; its request still runs (the replica model has no
        per-request abort) and is counted as ``abort`` when it ends."""
        st.client_gone = True

    # ------------------------------------------------------------------ driving
    async def _drive(self) -> None:
        last_tick = self.clock.real_now()
        behind_steps = 0
        while True:
            if self.replica.idle:
                self._wake_pending()
                self._work.clear()
                if self.replica.idle:
                    await self._work.wait()
                continue
            step_start = self.replica.clock_s
            events = self.replica.step()
            self.steps += 1
            self._account(step_start, events)
            lag_s = self.clock.real_at(self.replica.clock_s) - self.clock.real_now()
            if lag_s > 0.0005:
                await asyncio.sleep(lag_s)
                behind_steps = 0
            else:
                behind_steps += 1
                if behind_steps < 32:
                    continue
                behind_steps = 0
                self._release(last_tick)
                await asyncio.sleep(0)
            last_tick = self._release(last_tick)

    def _release(self, last_tick: float) -> float:
        self._wake_pending()
        now = self.clock.real_now()
        if now - last_tick >= self.stream_interval_s:
            for st in self._streams.values():
                st.wake.set()
            return now
        return last_tick

    def _wake_pending(self) -> None:
        for st in self._to_wake:
            st.wake.set()
        self._to_wake.clear()

    def _account(self, step_start: float, ev: StepEvents) -> None:
        rep = self.replica
        preempted = rep.num_preemptions_total != self._preemptions_seen
        self._preemptions_seen = rep.num_preemptions_total
        if self._queued or self._paused or preempted:
            ids = rep.in_flight_ids()
            waiting = set(ids[rep.num_running :])
            for rid, st_q in list(self._queued.items()):
                if rid not in waiting:
                    del self._queued[rid]
                    st_q.admitted_emu = max(step_start, st_q.arrival_emu)
                    self.counters.queue.observe(st_q.admitted_emu - st_q.arrival_emu)
            for rid, st_p in list(self._paused.items()):
                if rid not in waiting and st_p.paused_at_step is not None:
                    st_p.lost_steps += self.steps - st_p.paused_at_step
                    st_p.paused_at_step = None
                    del self._paused[rid]
            if preempted:
                for rid in waiting:
                    st_w = self._active.get(rid)
                    if st_w and st_w.first_token_emu is not None and st_w.paused_at_step is None:
                        st_w.paused_at_step = self.steps
                        self._paused[rid] = st_w
        for rid, t in ev.first_tokens:
            st = self._active.get(rid)
            if st is None:
                continue
            if st.admitted_emu is None:  # admitted and prefilled within this step
                st.admitted_emu = max(step_start, st.arrival_emu)
            st.first_token_emu = t
            st.first_step = self.steps
            if st.stream:
                self._streams[rid] = st
            self._to_wake.append(st)
        for rid, t in ev.finished:
            st_f = self._active.get(rid)
            if st_f is None:
                continue
            reason: FinishReason = "length" if st_f.stop_at_max else "stop"
            self._end(st_f, t, "abort" if st_f.client_gone else reason)

    def _end(self, st: RequestState, t: float, reason: FinishReason) -> None:
        st.finished_emu = t
        st.finish_reason = reason
        self._active.pop(st.rid, None)
        self._queued.pop(st.rid, None)
        self._paused.pop(st.rid, None)
        self._streams.pop(st.rid, None)
        c = self.counters
        c.finished[reason] += 1
        c.e2e.observe(t - st.arrival_emu)
        c.prompt_tokens.observe(st.prompt_tokens)
        c.generation_tokens.observe(st.tokens(self.steps))
        if st.admitted_emu is not None:
            c.inference.observe(t - st.admitted_emu)
            if st.first_token_emu is not None:
                c.prefill.observe(st.first_token_emu - st.admitted_emu)
                c.decode.observe(t - st.first_token_emu)
        self._to_wake.append(st)
        if not self._active:
            self._idle.set()

    # ------------------------------------------------------------------ load injection
    def inject(self, n: int, prompt_tokens: int, output_tokens: int) -> list[RequestState]:
        """Add ``n`` requests with no client at once (a sudden queue)."""
        if n < 1:
            raise ConfigError(f"queue jump: n value {n} must be >= 1")
        return [
            self.submit(prompt_tokens, output_tokens, stream=False, stop_at_max=True)
            for _ in range(n)
        ]
