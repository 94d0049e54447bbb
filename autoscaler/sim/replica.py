"""One vLLM replica: continuous batching, chunked prefill, paged KV cache, preemption.

Step time (DESIGN.md "Simulator replica model", derived in calibration.md section 6)::

    t_step(ms) = T0 + alpha * B_dec + gamma * (P_tok + A_pairs / attn_equiv_tokens)
                 + beta * K_ctx / 1000

``A_pairs`` is the causal attention work of the step's prefill chunks (a chunk of ``c``
tokens after ``o`` already prefilled attends to ``c * o + c * (c + 1) / 2`` token pairs),
so prefill cost grows super-linearly with the prompt. ``attn_equiv_tokens`` is the number
of attention pairs that cost as much as one token of the linear layers (calibration.md
section 1d: attention adds ~3% to an 8B prefill at 2k tokens, i.e. 2048 / (2 * 0.03)).

Requests longer than ``max_model_len`` (prompt + output) are refused at admission as vLLM's
API server does (HTTP 400; `context_limit_error` is the one rule the emulator uses too).

Scheduling follows vLLM V1: every step, running decodes take one token each, partially
prefilled requests take the next chunk of the token budget, then waiting requests are
admitted first-come-first-served while the budget, ``max_num_seqs`` and free KV blocks
allow. A decode that needs a new 16-token block when none is free preempts the most
recently admitted request (recompute: it goes back to the head of the queue and its prompt
plus generated tokens are prefilled again).

Two ways to drive it, both exact to the same step model:
- ``step()``: one engine iteration (the HTTP emulator drives it in real time);
- ``run_until(t)``: the simulator's fast path. Pure-decode stretches (no prefill, nothing
  admissible) are advanced analytically up to the next finish, the next KV block shortage
  or ``t``: step durations then form an arithmetic series, since B is constant and the
  context grows by B tokens per step.

Decoding sequences are kept as aggregates so a step costs O(prefilling + finishing), not
O(batch): the context sum is ``base + B * step`` and block demand per step comes from a
count of sequences per (context - step) mod 16 residue.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left
from collections import deque
from dataclasses import dataclass, field

from autoscaler.errors import ConfigError

# vLLM's histogram bucket upper bounds (vllm/v1/metrics/loggers.py), +Inf implied.
TTFT_BUCKETS_S: tuple[float, ...] = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
    7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class HardwareProfile:
    """One model on one GPU configuration (calibration.md section 6)."""

    name: str
    t0_ms: float
    alpha_ms_per_seq: float
    beta_ms_per_1k_ctx: float
    gamma_ms_per_prefill_token: float
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_capacity_tokens: int
    gpus_billed: float
    gpu_resource: str = "nvidia.com/gpu"
    block_size_tokens: int = 16
    max_model_len: int = 8192  # Llama-3's context; vLLM refuses longer requests (400)
    attn_equiv_tokens: float = 34_000.0  # attention pairs per linear-token cost (8B)

    def __post_init__(self) -> None:
        for name in ("t0_ms", "alpha_ms_per_seq", "beta_ms_per_1k_ctx"):
            if getattr(self, name) < 0:
                raise ConfigError(f"profile {self.name}: {name} must be >= 0")
        if self.gamma_ms_per_prefill_token <= 0 or self.t0_ms <= 0:
            raise ConfigError(f"profile {self.name}: t0_ms and gamma must be > 0")
        if self.max_model_len < 2 or not self.attn_equiv_tokens > 0:
            raise ConfigError(
                f"profile {self.name}: max_model_len {self.max_model_len} must be >= 2 and "
                f"attn_equiv_tokens {self.attn_equiv_tokens} > 0"
            )
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < self.max_num_seqs:
            raise ConfigError(
                f"profile {self.name}: max_num_batched_tokens {self.max_num_batched_tokens}"
                f" must be >= max_num_seqs {self.max_num_seqs} >= 1"
            )

    @property
    def kv_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size_tokens

    def step_ms(
        self, decoding: int, prefill_tokens: int, context_tokens: int, attn_pairs: float = 0.0
    ) -> float:
        return (
            self.t0_ms
            + self.alpha_ms_per_seq * decoding
            + self.gamma_ms_per_prefill_token
            * (prefill_tokens + attn_pairs / self.attn_equiv_tokens)
            + self.beta_ms_per_1k_ctx * context_tokens / 1000.0
        )

    def idle_ttft_s(self, prompt_tokens: int) -> float:
        """TTFT of a request alone on an idle replica: its chunked prefill, nothing else.
        No policy can serve it faster (the bound of SLO feasibility)."""
        done = 0
        total = 0.0
        while done < prompt_tokens:
            chunk = min(prompt_tokens - done, self.max_num_batched_tokens)
            total += self.step_ms(0, chunk, done + chunk, attn_pairs=prefill_pairs(done, chunk))
            done += chunk
        return total / 1000.0


def prefill_pairs(done: int, chunk: int) -> int:
    """Causal attention pairs of prefilling ``chunk`` tokens after ``done`` tokens."""
    return chunk * done + chunk * (chunk + 1) // 2


def context_limit_error(max_model_len: int, prompt_tokens: int, output_tokens: int) -> str | None:
    """vLLM's 400 for a request over the context window (None: within it). The simulator's
    gateway and the HTTP emulator both refuse with this rule."""
    if prompt_tokens + output_tokens <= max_model_len:
        return None
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, you"
        f" requested {prompt_tokens + output_tokens} tokens ({prompt_tokens} in the messages,"
        f" {output_tokens} in the completion)."
    )


PROFILES: dict[str, HardwareProfile] = {
    p.name: p
    for p in (
        HardwareProfile("8b-h100", 6.5, 0.015, 0.047, 0.029, 256, 8192, 445_000, 1.0),
        # Llama-3.1-8B: the same engine with a 128k context window.
        HardwareProfile(
            "8b-h100-128k",
            6.5,
            0.015,
            0.047,
            0.029,
            256,
            8192,
            445_000,
            1.0,
            max_model_len=131_072,
        ),
        HardwareProfile("8b-a100", 10.5, 0.036, 0.077, 0.071, 256, 2048, 445_000, 1.0),
        # 70B: linear FLOPs per token / attention FLOPs per pair is 1.87x the 8B ratio.
        HardwareProfile(
            "70b-h100-tp4",
            17.0,
            0.033,
            0.029,
            0.071,
            256,
            8192,
            475_000,
            4.0,
            attn_equiv_tokens=63_600.0,
        ),
        HardwareProfile(
            "8b-a100-mig-3g40gb",
            20.0,
            0.08,
            0.15,
            0.17,
            256,
            2048,
            155_000,
            3.0 / 7.0,
            gpu_resource="nvidia.com/mig-3g.40gb",
        ),
    )
}


def get_profile(name: str) -> HardwareProfile:
    try:
        return PROFILES[name]
    except KeyError:
        raise ConfigError(
            f"profile: value {name!r} must be one of {', '.join(sorted(PROFILES))}"
        ) from None


class _Seq:
    """A request inside the engine (mutable, private)."""

    __slots__ = (
        "arrival_t",
        "blocks",
        "computed",
        "ctx_key",
        "finish_step",
        "first_token_t",
        "generated",
        "kv_ready",
        "last_token_t",
        "output",
        "prompt",
        "rid",
        "target",
    )

    def __init__(self, rid: int, prompt: int, output: int, arrival_t: float) -> None:
        self.rid = rid
        self.prompt = prompt
        self.output = output
        self.arrival_t = arrival_t
        self.computed = 0  # tokens of `target` already prefilled
        self.target = prompt  # tokens to prefill (prompt + generated after a preemption)
        self.generated = 0
        self.blocks = 0  # KV blocks held while prefilling (decoders: derived from ctx)
        self.ctx_key = 0  # while decoding: ctx - step (context = ctx_key + step)
        self.finish_step = -1  # while decoding: step whose end produces the last token
        self.first_token_t: float | None = None
        self.last_token_t = 0.0
        self.kv_ready = False  # prompt KV transferred in (disaggregated decode): no prefill


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    """What a vLLM /metrics page shows (cumulative counters, gauges, histogram buckets)."""

    num_requests_waiting: int
    num_requests_running: int
    kv_cache_usage_perc: float
    prompt_tokens_total: int
    generation_tokens_total: int
    num_preemptions_total: int
    request_success_total: int
    ttft_bucket_counts: tuple[int, ...]  # per bucket of TTFT_BUCKETS_S, then +Inf
    ttft_sum_s: float
    itl_bucket_counts: tuple[int, ...]  # per bucket of ITL_BUCKETS_S, then +Inf
    itl_sum_s: float
    busy_s: float  # time the GPU ran steps (what DCGM utilisation integrates)


class CounterSink:
    """Integer counters shared by every replica of a cluster, incremented together with
    each replica's own (so a cluster-wide scrape sums nothing: the simulator reads these
    once per tick instead of adding up every pod's histograms; deleted pods stay counted,
    as Prometheus' ``sum(rate(...))`` over the pods would)."""

    __slots__ = ("generation_tokens", "itl_counts", "preemptions", "prompt_tokens", "ttft_counts")

    def __init__(self) -> None:
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.preemptions = 0
        self.ttft_counts = [0] * (len(TTFT_BUCKETS_S) + 1)
        self.itl_counts = [0] * (len(ITL_BUCKETS_S) + 1)


@dataclass(slots=True)
class StepEvents:
    """Outcome of stepping: (request id, time) of first tokens and of completions."""

    duration_s: float = 0.0
    first_tokens: list[tuple[int, float]] = field(default_factory=list)
    finished: list[tuple[int, float]] = field(default_factory=list)


class Replica:
    """A single engine; time is the replica's own clock (``clock_s``), set by the caller."""

    def __init__(
        self, profile: HardwareProfile, start_s: float = 0.0, sink: CounterSink | None = None
    ) -> None:
        self.profile = profile
        # counters also go to `sink` (a throwaway one when none is shared)
        self._sink = sink if sink is not None else CounterSink()
        self.clock_s = start_s
        self.step_time_scale = 1.0  # >1 under time-slicing interference
        self._bs = profile.block_size_tokens
        self._free_blocks = profile.kv_blocks
        self._step = 0
        self._allocated_for = -1  # the step whose decode blocks are already allocated
        self._waiting: deque[_Seq] = deque()
        self._running: dict[int, _Seq] = {}  # admission order; the last is preempted first
        self._prefilling: list[_Seq] = []
        self._n_dec = 0
        self._dec_ctx_base = 0  # sum(ctx_key) over decoders
        self._key_counts = [0] * self._bs  # decoders per ctx_key mod block size
        self._finish_heap: list[tuple[int, int]] = []  # (finish_step, rid)
        self._by_rid: dict[int, _Seq] = {}
        self.load = 0  # requests in flight (waiting + running): the router's count
        # counters (vLLM /metrics)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.num_preemptions_total = 0
        self.request_success_total = 0
        self.busy_s = 0.0
        self._ttft_counts = [0] * (len(TTFT_BUCKETS_S) + 1)
        self._ttft_sum = 0.0
        self._itl_counts = [0] * (len(ITL_BUCKETS_S) + 1)
        self._itl_sum = 0.0
        # raw samples for exact report quantiles: (interval s, tokens with that interval)
        self.itl_samples: list[tuple[float, int]] = []
        self.events = StepEvents()

    # ---------------------------------------------------------------- inputs / views
    def add_request(
        self,
        rid: int,
        prompt_tokens: int,
        output_tokens: int,
        now_s: float,
        kv_ready: bool = False,
    ) -> bool:
        """Queue a request; False (not queued) when it exceeds ``max_model_len`` or can
        never fit in the KV cache (vLLM answers 400 to both).

        ``kv_ready``: a disaggregated decode replica's request, whose prompt was prefilled
        elsewhere and whose KV arrived with its first token at ``now_s``. It waits until
        its prompt's blocks and a sequence slot are free, then joins the decode batch at the
        start of a step without prefill work (sim/disagg.py, the emulator's decode role);
        joining is its ``first_tokens`` event (the prefill's token released to the client;
        no TTFT is recorded here). Its first interval (handoff to its next token, admission
        wait included) is an ITL sample. A preempted one is recomputed here like any other
        request."""
        if prompt_tokens < 1 or output_tokens < 1:
            raise ConfigError(
                f"request {rid}: prompt {prompt_tokens} and output {output_tokens} must be >= 1"
            )
        if kv_ready and output_tokens < 2:
            raise ConfigError(
                f"request {rid}: output {output_tokens} must be >= 2 for a KV-ready request"
                " (its first token came from prefill)"
            )
        if prompt_tokens + output_tokens > self.profile.kv_capacity_tokens or context_limit_error(
            self.profile.max_model_len, prompt_tokens, output_tokens
        ):
            return False
        if not self._running and not self._waiting and self.clock_s < now_s:
            self.clock_s = now_s  # idle engine: nothing happened in between
        seq = _Seq(rid, prompt_tokens, output_tokens, now_s)
        if kv_ready:
            seq.kv_ready = True
            seq.generated = 1
            seq.first_token_t = now_s
            seq.last_token_t = now_s
        self._waiting.append(seq)
        self._by_rid[rid] = seq
        self.load += 1
        return True

    @property
    def num_waiting(self) -> int:
        return len(self._waiting)

    @property
    def num_running(self) -> int:
        return len(self._running)

    @property
    def idle(self) -> bool:
        return not self._waiting and not self._running

    def kv_usage(self) -> float:
        total = self.profile.kv_blocks
        return (total - self._free_blocks) / total

    def in_flight_ids(self) -> list[int]:
        return [s.rid for s in self._running.values()] + [s.rid for s in self._waiting]

    def metrics(self) -> ReplicaMetrics:
        return ReplicaMetrics(
            num_requests_waiting=len(self._waiting),
            num_requests_running=len(self._running),
            kv_cache_usage_perc=self.kv_usage(),
            prompt_tokens_total=self.prompt_tokens_total,
            generation_tokens_total=self.generation_tokens_total,
            num_preemptions_total=self.num_preemptions_total,
            request_success_total=self.request_success_total,
            ttft_bucket_counts=tuple(self._ttft_counts),
            ttft_sum_s=self._ttft_sum,
            itl_bucket_counts=tuple(self._itl_counts),
            itl_sum_s=self._itl_sum,
            busy_s=self.busy_s,
        )

    def drain_events(self) -> StepEvents:
        ev = self.events
        self.events = StepEvents()
        return ev

    # ---------------------------------------------------------------- stepping
    def step(self) -> StepEvents:
        """Run one engine iteration from ``clock_s``; returns its duration and the events
        since the last drain (exactly this step's when the caller only uses `step`)."""
        dt = 0.0 if self.idle else self._explicit_step()
        ev = self.drain_events()
        ev.duration_s = dt
        return ev

    def run_until(self, t_s: float) -> None:
        """Advance until the clock reaches ``t_s`` (a step in flight may end after it)."""
        while self.clock_s < t_s:
            if not self._running and not self._waiting:
                self.clock_s = t_s
                return
            pure_decode = self._n_dec and not self._prefilling and not self._can_admit()
            if pure_decode and self._advance_decode(t_s):
                continue
            self._explicit_step()

    # ---------------------------------------------------------------- internals
    def _can_admit(self) -> bool:
        if not self._waiting or len(self._running) >= self.profile.max_num_seqs:
            return False
        if self._waiting[0].kv_ready:
            return self._can_land(self._waiting[0])
        budget = self.profile.max_num_batched_tokens - self._n_dec
        if budget <= 0:
            return False
        head = self._waiting[0]
        chunk = min(head.target, budget)
        return self._free_blocks >= -(-chunk // self._bs)

    def _ctx(self, seq: _Seq) -> int:
        return seq.ctx_key + self._step

    def _decoder_blocks(self, seq: _Seq) -> int:
        # Before this step's allocation a decoder holds ceil((ctx - 1) / bs) blocks.
        ctx = self._ctx(seq) - (0 if self._allocated_for == self._step else 1)
        return -(-ctx // self._bs)

    def _new_blocks_at(self, step: int) -> int:
        # A decoder needs a new block when its context reaches 16k + 1 in this step.
        return self._key_counts[(1 - step) % self._bs]

    def _new_blocks_over(self, n: int) -> int:
        bs = self._bs
        full, rem = divmod(n, bs)
        total = full * self._n_dec
        s0 = self._step
        kc = self._key_counts
        for i in range(rem):
            total += kc[(1 - (s0 + full * bs + i)) % bs]
        return total

    def _steps_until_block_shortage(self, limit: int) -> int:
        """Largest n <= limit such that the next n decode steps get all their blocks."""
        free = self._free_blocks
        n_dec = self._n_dec
        bs = self._bs
        full = min(limit // bs, free // n_dec if n_dec else limit)
        n = full * bs
        free -= full * n_dec
        kc = self._key_counts
        s = self._step + n
        while n < limit:
            need = kc[(1 - s) % bs]
            if need > free:
                return n
            free -= need
            n += 1
            s += 1
        return n

    def _add_decoder(self, seq: _Seq, next_step: int) -> None:
        # Context at `next_step` is prompt + generated (the last token not yet in KV).
        ctx = seq.prompt + seq.generated
        seq.ctx_key = ctx - next_step
        seq.finish_step = next_step + (seq.output - seq.generated) - 1
        self._n_dec += 1
        self._dec_ctx_base += seq.ctx_key
        self._key_counts[seq.ctx_key % self._bs] += 1
        heapq.heappush(self._finish_heap, (seq.finish_step, seq.rid))

    def _remove_decoder(self, seq: _Seq) -> None:
        self._n_dec -= 1
        self._dec_ctx_base -= seq.ctx_key
        self._key_counts[seq.ctx_key % self._bs] -= 1
        seq.finish_step = -1

    def _preempt_last(self) -> None:
        _, seq = self._running.popitem()
        if seq.finish_step >= 0:
            self._free_blocks += self._decoder_blocks(seq)
            seq.generated = self._ctx(seq) - seq.prompt
            seq.last_token_t = self.clock_s
            self._remove_decoder(seq)
        else:
            self._free_blocks += seq.blocks
            self._prefilling.remove(seq)
        seq.blocks = 0
        seq.computed = 0
        seq.target = seq.prompt + seq.generated
        self._waiting.appendleft(seq)
        self.num_preemptions_total += 1
        self._sink.preemptions += 1

    def _record_itl(self, interval_s: float, tokens: int) -> None:
        if tokens <= 0:
            return
        b = bisect_left(ITL_BUCKETS_S, interval_s)
        self._itl_counts[b] += tokens
        self._sink.itl_counts[b] += tokens
        self._itl_sum += interval_s * tokens
        self.itl_samples.append((interval_s, tokens))

    def _finish(self, seq: _Seq, t: float) -> None:
        del self._running[seq.rid]
        del self._by_rid[seq.rid]
        self.load -= 1
        self.request_success_total += 1
        self.events.finished.append((seq.rid, t))

    def _land_blocks(self, seq: _Seq) -> int:
        # Held before this step's allocation: ceil((ctx - 1) / bs), ctx = prompt + 1.
        return -(-seq.prompt // self._bs)

    def _can_land(self, seq: _Seq) -> bool:
        """A KV-ready request joins only when its blocks, its first decode block and every
        running decoder's new block this step all fit (never causing a preemption)."""
        need = self._land_blocks(seq) + (1 if (seq.prompt + 1) % self._bs == 1 else 0)
        return self._free_blocks - need >= self._new_blocks_at(self._step)

    def _land(self) -> list[_Seq]:
        """Move KV-ready requests at the head of the queue into the decode batch (FCFS)."""
        landed: list[_Seq] = []
        while (
            self._waiting
            and self._waiting[0].kv_ready
            and len(self._running) < self.profile.max_num_seqs
            and self._can_land(self._waiting[0])
        ):
            seq = self._waiting.popleft()
            seq.kv_ready = False  # a later preemption recomputes it locally
            self._free_blocks -= self._land_blocks(seq)
            self._running[seq.rid] = seq
            self._add_decoder(seq, self._step)
            self.events.first_tokens.append((seq.rid, self.clock_s))
            landed.append(seq)
        return landed

    def _explicit_step(self) -> float:
        prof = self.profile
        bs = self._bs
        landed = self._land() if self._waiting and self._waiting[0].kv_ready else []
        s = self._step
        # 1. blocks for this step's decodes; preempt the newest request while short.
        while self._n_dec and self._new_blocks_at(s) > self._free_blocks:
            self._preempt_last()
        self._free_blocks -= self._new_blocks_at(s)
        self._allocated_for = s
        if landed:
            landed = [q for q in landed if q.finish_step >= 0]  # (never preempted: guard)
        n_dec = self._n_dec
        budget = prof.max_num_batched_tokens - n_dec
        ctx_tokens = self._dec_ctx_base + n_dec * s
        prefill_tokens = 0
        attn_pairs = 0
        chunks: list[tuple[_Seq, int]] = []
        # 2. continue partial prefills in admission order.
        for seq in self._prefilling:
            if budget <= 0:
                break
            chunk = min(seq.target - seq.computed, budget)
            need = -(-(seq.computed + chunk) // bs) - seq.blocks
            if need > self._free_blocks:
                continue  # wait for finishing decoders to free blocks
            self._free_blocks -= need
            seq.blocks += need
            chunks.append((seq, chunk))
            budget -= chunk
        # 3. admit waiting requests FCFS.
        while (
            budget > 0
            and self._waiting
            and not self._waiting[0].kv_ready  # lands at the next step's start
            and len(self._running) < prof.max_num_seqs
            and self._free_blocks >= -(-min(self._waiting[0].target, budget) // bs)
        ):
            seq = self._waiting.popleft()
            chunk = min(seq.target, budget)
            need = -(-chunk // bs)
            self._free_blocks -= need
            seq.blocks = need
            self._running[seq.rid] = seq
            self._prefilling.append(seq)
            chunks.append((seq, chunk))
            budget -= chunk
        for seq, chunk in chunks:
            prefill_tokens += chunk
            attn_pairs += prefill_pairs(seq.computed, chunk)
            ctx_tokens += seq.computed + chunk
        if n_dec == 0 and not chunks:
            # Only stalled prefills hold the cache: preempt the newest, as vLLM does.
            if self._prefilling:
                self._preempt_last()
                return self._explicit_step()
            dt = prof.t0_ms * self.step_time_scale / 1000.0
            self.clock_s += dt
            return dt
        dt = prof.step_ms(n_dec, prefill_tokens, ctx_tokens, attn_pairs)
        dt *= self.step_time_scale / 1000.0
        self.clock_s += dt
        self.busy_s += dt
        t = self.clock_s
        self._step = s + 1
        # 4. decodes produce a token each.
        self.generation_tokens_total += n_dec
        self._sink.generation_tokens += n_dec
        if landed:
            # a landed request's first interval runs from its handoff, not its step start
            self._record_itl(dt, n_dec - len(landed))
            for seq in landed:
                self._record_itl(t - seq.last_token_t, 1)
                seq.last_token_t = t
        else:
            self._record_itl(dt, n_dec)
        self._finish_decoders_through(s, t)
        # 5. completed prefills produce a token (the first one, or the next after recompute).
        for seq, chunk in chunks:
            seq.computed += chunk
            if seq.computed < seq.target:
                continue
            self._prefilling.remove(seq)
            seq.generated += 1
            self.generation_tokens_total += 1
            sink = self._sink
            sink.generation_tokens += 1
            if seq.first_token_t is None:
                seq.first_token_t = t
                ttft = t - seq.arrival_t
                b = bisect_left(TTFT_BUCKETS_S, ttft)
                self._ttft_counts[b] += 1
                sink.ttft_counts[b] += 1
                self._ttft_sum += ttft
                self.prompt_tokens_total += seq.prompt
                sink.prompt_tokens += seq.prompt
                self.events.first_tokens.append((seq.rid, t))
            else:
                self._record_itl(t - seq.last_token_t, 1)
            seq.last_token_t = t
            held = seq.blocks
            seq.blocks = 0
            if seq.generated >= seq.output:
                self._free_blocks += held
                self._finish(seq, t)
            else:
                self._add_decoder(seq, s + 1)
                # Decoders' blocks are derived from context; reconcile the held count.
                self._free_blocks += held - self._decoder_blocks_at(seq, s + 1, prior=True)
        return dt

    def _decoder_blocks_at(self, seq: _Seq, step: int, prior: bool) -> int:
        # Blocks held before `step` allocates: ceil((ctx at step - 1) / bs).
        ctx = seq.ctx_key + step - (1 if prior else 0)
        return -(-ctx // self._bs)

    def _finish_decoders_through(self, last_step: int, t: float) -> None:
        heap = self._finish_heap
        while heap and heap[0][0] <= last_step:
            fstep, rid = heapq.heappop(heap)
            seq = self._by_rid.get(rid)
            if seq is None or seq.finish_step != fstep:
                continue  # stale entry (preempted or re-added)
            # Blocks held during its last step (context at that step).
            blocks = -(-(seq.ctx_key + fstep) // self._bs)
            self._free_blocks += blocks
            self._remove_decoder(seq)
            seq.generated = seq.output
            seq.last_token_t = t
            self._finish(seq, t)

    def _next_finish_step(self) -> int | None:
        heap = self._finish_heap
        while heap:
            fstep, rid = heap[0]
            seq = self._by_rid.get(rid)
            if seq is not None and seq.finish_step == fstep:
                return fstep
            heapq.heappop(heap)
        return None

    def _advance_decode(self, t_s: float) -> bool:
        """Advance a pure-decode stretch analytically; False if an explicit step is due."""
        s = self._step
        n_dec = self._n_dec
        nf = self._next_finish_step()
        limit = (nf - s + 1) if nf is not None else 1 << 30
        # Time limit: smallest n with sum_{k<n} (a + b k) >= dt.
        prof = self.profile
        scale = self.step_time_scale / 1000.0
        a = prof.step_ms(n_dec, 0, self._dec_ctx_base + n_dec * s) * scale
        b = prof.beta_ms_per_1k_ctx * n_dec / 1000.0 * scale
        gap = t_s - self.clock_s
        if b > 0:
            # b/2 n^2 + (a - b/2) n - gap >= 0
            h = a - b / 2
            n_time = math.ceil((-h + math.sqrt(h * h + 2 * b * gap)) / b - 1e-9)
        else:
            n_time = math.ceil(gap / a - 1e-9)
        n = max(1, min(limit, n_time))
        n = self._steps_until_block_shortage(n)
        if n <= 1:
            return False
        new_blocks = self._new_blocks_over(n)
        duration = n * a + b * n * (n - 1) / 2
        self._free_blocks -= new_blocks
        self.clock_s += duration
        self.busy_s += duration
        self._step = s + n
        self.generation_tokens_total += n * n_dec
        self._sink.generation_tokens += n * n_dec
        self._record_itl(duration / n, n * n_dec)
        self._finish_decoders_through(s + n - 1, self.clock_s)
        return True
