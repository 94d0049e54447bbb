"""An HTTP server that behaves like one vLLM replica to its clients (aiohttp).

Routes: ``/v1/completions`` and ``/v1/chat/completions`` (OpenAI-compatible, streaming
SSE or not, with ``usage``), ``/v1/models``, ``/health`` (503 until the cold start has
elapsed in emulated time, and again while draining) and ``/metrics`` (vLLM's names); with
``sleep_mode``, vLLM's dev-mode ``/sleep``, ``/wake_up`` and ``/is_sleeping`` (`sleep`).
Timing comes from `EmulatedEngine`. Prompt tokens are counted as whitespace-separated
words (a list of token ids counts one per id); chat adds 4 template tokens per message.
Generated text is synthetic words, one per token.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
import uuid
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from autoscaler.emulator.clock import EmuClock
from autoscaler.emulator.engine import (
    EmulatedEngine,
    RequestRejected,
    RequestState,
    Role,
    check_role,
)
from autoscaler.emulator.metrics import CONTENT_TYPE, MetricsPage, Naming
from autoscaler.emulator.sleep import WAKE_S_8B, SleepState, add_routes
from autoscaler.errors import ConfigError
from autoscaler.sim.replica import HardwareProfile, get_profile

CHAT_TOKENS_PER_MESSAGE = 4
_WORDS = (
    "the", "model", "token", "queue", "cache", "batch", "replica", "scale", "latency",
    "prefill", "decode", "burst", "warm", "pool", "signal", "policy", "forecast", "pod",
)  # fmt: skip


def word(rid: int, i: int) -> str:
    """The ``i``-th synthetic token of request ``rid`` (deterministic, JSON-safe)."""
    return " " + _WORDS[(rid * 7 + i) % len(_WORDS)]


@dataclass(frozen=True, slots=True)
class ReplicaConfig:
    """What differs between emulated replicas."""

    model: str = "meta-llama/Llama-3.1-8B-Instruct"
    profile: HardwareProfile | str = "8b-h100-128k"  # Llama-3.1's 128k context window
    cold_start_s: float = 0.0  # emulated seconds before /health turns 200
    max_model_len: int | None = None  # None: the profile's (what the simulator enforces)
    naming: Naming = "v1"
    default_max_tokens: int = 64  # when the client sets none (finish_reason "stop")
    stream_interval_s: float = 0.02  # real seconds between streamed-token flushes
    # vLLM's --enable-sleep-mode with VLLM_SERVER_DEV_MODE=1: /sleep, /wake_up, /is_sleeping
    sleep_mode: bool = False
    wake_s: float = WAKE_S_8B  # emulated seconds a /wake_up takes (calibration.md section 3)
    role: Role = "both"  # prefill/decode disaggregation: which work it does (engine.Role)

    def resolved_profile(self) -> HardwareProfile:
        return get_profile(self.profile) if isinstance(self.profile, str) else self.profile

    def __post_init__(self) -> None:
        if not self.cold_start_s >= 0:
            raise ConfigError(f"cold_start_s: value {self.cold_start_s!r} must be >= 0")
        if not self.wake_s >= 0:
            raise ConfigError(f"wake_s: value {self.wake_s!r} must be >= 0")
        if self.naming not in ("v1", "v0"):
            raise ConfigError(f"naming: value {self.naming!r} must be 'v1' or 'v0'")
        check_role(self.role)
        if self.default_max_tokens < 1:
            raise ConfigError(f"default_max_tokens: value {self.default_max_tokens} must be >= 1")


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


def _error(status: int, message: str) -> web.Response:
    kind = {400: "BadRequestError", 404: "NotFoundError", 503: "ServiceUnavailableError"}
    body = {
        "object": "error",
        "message": message,
        "type": kind.get(status, "InternalServerError"),
        "param": None,
        "code": status,
    }
    return web.json_response(body, status=status)


def _count_prompt(prompt: Any) -> int:
    if isinstance(prompt, str):
        return len(prompt.split())
    if isinstance(prompt, list) and prompt and all(isinstance(x, int) for x in prompt):
        return len(prompt)
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        return len(prompt[0].split())
    raise BadRequest(
        f"prompt: value of type {type(prompt).__name__} must be a string, a one-string"
        " list or a non-empty list of token ids"
    )


def _count_messages(messages: Any) -> int:
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages: must be a non-empty list of {role, content} objects")
    total = 0
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise BadRequest(f"messages[{i}]: must be an object with a string 'role'")
        content = msg.get("content", "")
        if isinstance(content, list):
            content = " ".join(
                str(part.get("text", "")) for part in content if isinstance(part, dict)
            )
        if content is not None and not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content: must be a string or a list of parts")
        total += len((content or "").split()) + CHAT_TOKENS_PER_MESSAGE
    return total


class EmulatedReplica:
    """One emulated vLLM server on loopback (a handle with ``.url`` and ``.port``)."""

    def __init__(self, name: str, config: ReplicaConfig, clock: EmuClock) -> None:
        self.name = name
        self.config = config
        self.clock = clock
        self.engine = EmulatedEngine(
            config.resolved_profile(),
            clock,
            max_model_len=config.max_model_len,
            stream_interval_s=config.stream_interval_s,
            role=config.role,
        )
        self.metrics_page = MetricsPage(self.engine, config.model, config.naming)
        self.sleep = SleepState(clock, config.wake_s)
        self.started_emu = clock.now()
        self.draining = False
        self.port = 0
        self.host = "127.0.0.1"
        self._runner: web.AppRunner | None = None
        self._handlers = 0
        self._no_handlers = asyncio.Event()
        self._no_handlers.set()
        self._created = int(time.time())

    # ------------------------------------------------------------------ lifecycle
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def ready(self) -> bool:
        """True once the cold start has elapsed (in emulated time) and until draining."""
        return not self.draining and self.clock.now() - self.started_emu >= self.config.cold_start_s

    def seconds_until_ready(self) -> float:
        """Real seconds left of the cold start (0 when ready)."""
        left = self.config.cold_start_s - (self.clock.now() - self.started_emu)
        return max(0.0, self.clock.real_duration(left))

    async def start(self, port: int = 0, host: str = "127.0.0.1") -> None:
        """Listen on ``host:port``; any 127.x.y.z is loopback (a pod IP of its own)."""
        app = web.Application()
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        if self.config.sleep_mode:
            add_routes(app, self.sleep, self.engine.abort_all, self.engine.wait_idle)
        # A short shutdown bound: stop() has already drained or aborted the engine, so a
        # handler still open at cleanup only waits on a client that went away.
        runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await runner.setup()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            self.host, self.port = host, sock.getsockname()[1]
            site = web.SockSite(runner, sock)
            await site.start()
        except BaseException:
            sock.close()
            await runner.cleanup()
            raise
        self._runner = runner
        self.engine.start()

    async def stop(self, drain: bool = True, timeout_s: float = 30.0) -> None:
        """Graceful (``drain``): refuse new requests, finish in-flight ones, then close.
        Otherwise abort everything in flight at once (a killed pod)."""
        self.draining = True
        self.engine.accepting = False
        if drain:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.engine.wait_idle(), timeout_s)
        self.engine.abort_all()
        if self._runner is not None:
            # Let handlers write their last bytes before the sockets close.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._no_handlers.wait(), 2.0)
            await self._runner.cleanup()
            self._runner = None
        await self.engine.close()

    # ------------------------------------------------------------------ routes
    async def _health(self, _: web.Request) -> web.Response:
        if self.ready:
            return web.Response(status=200)
        return web.Response(status=503, text="starting" if not self.draining else "draining")

    async def _metrics(self, _: web.Request) -> web.Response:
        if not self.ready and not self.draining:
            return web.Response(status=503, text="starting")
        return web.Response(body=self.metrics_page.render(), headers={"Content-Type": CONTENT_TYPE})

    async def _models(self, _: web.Request) -> web.Response:
        if not self.ready:
            return _error(503, "server is not ready")
        model = {
            "id": self.config.model,
            "object": "model",
            "created": self._created,
            "owned_by": "vllm",
            "root": self.config.model,
            "parent": None,
            "max_model_len": self.engine.max_model_len,
        }
        return web.json_response({"object": "list", "data": [model]})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    # ------------------------------------------------------------------ serving
    async def _serve(self, request: web.Request, chat: bool) -> web.StreamResponse:
        self._handlers += 1
        self._no_handlers.clear()
        try:
            if not self.ready:
                reason = "draining" if self.draining else "starting (cold start)"
                return _error(503, f"replica {self.name} is {reason}")
            try:
                body = await request.json()
            except (json.JSONDecodeError, UnicodeDecodeError):
                return _error(400, "request body: must be a JSON object")
            try:
                parsed = self._parse(body, chat)
                # asleep: accepted, not scheduled until /wake_up (vLLM's paused scheduler)
                await self.sleep.wait_awake()
                st = self.engine.submit(
                    parsed.prompt_tokens,
                    parsed.max_tokens,
                    stream=parsed.stream,
                    stop_at_max=parsed.stop_at_max,
                )
            except BadRequest as err:
                return _error(err.status, err.message)
            except RequestRejected as err:
                return _error(err.status, err.message)
            try:
                if parsed.stream:
                    return await self._stream(request, st, parsed, chat)
                return await self._whole(st, parsed, chat)
            except asyncio.CancelledError:
                self.engine.forget(st)
                raise
            except ConnectionResetError:
                # The client went away mid-stream (a load generator cut at the end of a
                # demo): forget the request; nothing is left to answer, no traceback.
                self.engine.forget(st)
                return web.Response(status=499)
        finally:
            self._handlers -= 1
            if not self._handlers:
                self._no_handlers.set()

    def _parse(self, body: Any, chat: bool) -> _Parsed:
        if not isinstance(body, dict):
            raise BadRequest("request body: must be a JSON object")
        model = body.get("model", self.config.model)
        if model != self.config.model:
            raise BadRequest(f"The model `{model}` does not exist.", status=404)
        if chat:
            prompt_tokens = _count_messages(body.get("messages"))
        else:
            if "prompt" not in body:
                raise BadRequest("prompt: field is required")
            prompt_tokens = _count_prompt(body["prompt"])
        if prompt_tokens < 1:
            raise BadRequest("prompt: must contain at least one token")
        raw_max = body.get("max_completion_tokens", body.get("max_tokens"))
        if raw_max is None:
            max_tokens, stop_at_max = self.config.default_max_tokens, False
        elif isinstance(raw_max, bool) or not isinstance(raw_max, int) or raw_max < 1:
            raise BadRequest(f"max_tokens: value {raw_max!r} must be an integer >= 1")
        else:
            max_tokens, stop_at_max = raw_max, True
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise BadRequest(f"stream: value {stream!r} must be a boolean")
        opts = body.get("stream_options") or {}
        include_usage = bool(isinstance(opts, dict) and opts.get("include_usage"))
        return _Parsed(str(model), prompt_tokens, max_tokens, stop_at_max, stream, include_usage)

    def _usage(self, st: RequestState, completion: int) -> dict[str, int]:
        return {
            "prompt_tokens": st.prompt_tokens,
            "total_tokens": st.prompt_tokens + completion,
            "completion_tokens": completion,
        }

    async def _whole(self, st: RequestState, p: _Parsed, chat: bool) -> web.Response:
        while not st.finished:
            await st.wake.wait()
            st.wake.clear()
        if st.finish_reason == "abort":
            return _error(503, f"replica {self.name} stopped before the request finished")
        n = st.tokens(self.engine.steps)
        text = "".join(word(st.rid, i) for i in range(n))
        created = int(time.time())
        if chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": st.finish_reason,
                "stop_reason": None,
            }
            obj, prefix = "chat.completion", "chatcmpl-"
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": st.finish_reason,
                "stop_reason": None,
            }
            obj, prefix = "text_completion", "cmpl-"
        return web.json_response(
            {
                "id": prefix + uuid.uuid4().hex,
                "object": obj,
                "created": created,
                "model": p.model,
                "choices": [choice],
                "usage": self._usage(st, n),
            }
        )

    async def _stream(
        self, request: web.Request, st: RequestState, p: _Parsed, chat: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            status=200, headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        obj = "chat.completion.chunk" if chat else "text_completion"
        head = json.dumps({"id": rid, "object": obj, "created": created, "model": p.model})[:-1]

        def event(payload: str, finish: str | None = None) -> str:
            fr = "null" if finish is None else json.dumps(finish)
            if chat:
                choice = f'{{"index":0,"delta":{payload},"logprobs":null,"finish_reason":{fr}}}'
            else:
                choice = (
                    f'{{"index":0,"text":{payload},"logprobs":null,"finish_reason":{fr},'
                    '"stop_reason":null}'
                )
            return f'data: {head}, "choices": [{choice}]}}\n\n'

        def token(i: int) -> str:
            w = json.dumps(word(st.rid, i))
            return event(f'{{"content":{w}}}' if chat else w)

        if chat:
            await resp.write(event('{"role":"assistant","content":""}').encode())
        sent = 0
        while True:
            if not st.finished:
                await st.wake.wait()
                st.wake.clear()
            n = st.tokens(self.engine.steps)
            if st.finish_reason == "abort":
                err = {"error": {"message": f"replica {self.name} stopped", "code": 503}}
                await resp.write(f"data: {json.dumps(err)}\n\n".encode())
                break
            if n > sent:
                last = n if not st.finished else n - 1
                chunk = "".join(token(i) for i in range(sent, last))
                if st.finished:
                    tail = json.dumps(word(st.rid, n - 1))
                    chunk += event(f'{{"content":{tail}}}' if chat else tail, st.finish_reason)
                await resp.write(chunk.encode())
                sent = n
            if st.finished:
                if p.include_usage:
                    usage = json.dumps(self._usage(st, n))
                    final = f'data: {head}, "choices": [], "usage": {usage}}}\n\n'
                    await resp.write(final.encode())
                break
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


@dataclass(frozen=True, slots=True)
class _Parsed:
    model: str
    prompt_tokens: int
    max_tokens: int
    stop_at_max: bool
    stream: bool
    include_usage: bool
