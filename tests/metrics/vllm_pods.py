"""Real aiohttp servers on 127.0.0.1 serving vLLM V1 pages whose values tests control (and
any object's `page()`, one server per pod: `serve_each`).

A `FakeVllm` answers ``?name[]=`` as current vLLM does (its ``/metrics`` is
prometheus_client's ASGI app: `CollectorRegistry.restricted_registry`), or as the
servers that do not filter (``filtering``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0]


@dataclass
class FakeVllm:
    """One pod's engine state, exported with vLLM V1 names and labels."""

    model: str = "llama"
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)
    status: int = 200
    # "prometheus_client": ``name[]`` restricts the page; "ignored": the whole page (a
    # prometheus-fastapi-instrumentator route); "empty": nothing (prometheus_client < 0.20
    # behind a multiprocess registry, whose collector has no names to look up)
    filtering: Literal["prometheus_client", "ignored", "empty"] = "prometheus_client"
    asked: list[tuple[str, ...]] = field(default_factory=list)  # each request's name[]

    def __post_init__(self) -> None:
        names = ["model_name", "engine"]
        r = self.registry
        self.waiting = Gauge("vllm:num_requests_waiting", "waiting", names, registry=r)
        self.running = Gauge("vllm:num_requests_running", "running", names, registry=r)
        self.gpu_kv = Gauge("vllm:gpu_cache_usage_perc", "kv", names, registry=r)
        self.kv = Gauge("vllm:kv_cache_usage_perc", "kv", names, registry=r)
        self.prompt = Counter("vllm:prompt_tokens", "prompt", names, registry=r)
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds", "ttft", names, buckets=TTFT_BUCKETS, registry=r
        )

    def key(self) -> tuple[str, str]:
        return (self.model, "0")

    def set(self, waiting: float, running: float, kv: float) -> None:
        self.waiting.labels(*self.key()).set(waiting)
        self.running.labels(*self.key()).set(running)
        self.gpu_kv.labels(*self.key()).set(kv)
        self.kv.labels(*self.key()).set(kv)

    def serve(self, prompt_tokens: float, ttfts: list[float]) -> None:
        self.prompt.labels(*self.key()).inc(prompt_tokens)
        child = self.ttft.labels(*self.key())  # exported from now on, even if empty
        for v in ttfts:
            child.observe(v)

    def page(self, names: Sequence[str] = ()) -> bytes:
        """The page, restricted to ``names`` (sample names) when some are given."""
        self.asked.append(tuple(names))
        if not names or self.filtering == "ignored":
            return generate_latest(self.registry)
        if self.filtering == "empty":
            return b""
        return generate_latest(self.registry.restricted_registry(names))


async def start_pods(pods: list[FakeVllm]) -> tuple[web.AppRunner, list[str]]:
    """One server, one path per pod (``/pod/<i>/metrics``); returns runner and URLs."""

    async def handler(request: web.Request) -> web.Response:
        pod = pods[int(request.match_info["i"])]
        if pod.status != 200:
            return web.Response(status=pod.status, text="unavailable")
        body = pod.page(request.query.getall("name[]", []))
        return web.Response(body=body, content_type="text/plain")

    runner, port = await serve_route("/pod/{i}/metrics", handler)
    return runner, [f"http://127.0.0.1:{port}/pod/{i}/metrics" for i in range(len(pods))]


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def serve_route(path: str, handler: Handler) -> tuple[web.AppRunner, int]:
    """``handler`` at GET ``path`` on 127.0.0.1 (a free port); the runner and its port."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner, runner.addresses[0][1]


class Paged(Protocol):
    def page(self) -> bytes: ...


async def serve_each(pods: Sequence[Paged]) -> tuple[list[web.AppRunner], list[str]]:
    """One server per pod at ``/metrics`` (one Prometheus scrape config for all); returns
    the runners and their ``host:port``."""
    runners, netlocs = [], []
    for pod in pods:

        async def handler(_: web.Request, pod: Paged = pod) -> web.Response:
            return web.Response(body=pod.page(), content_type="text/plain")

        runner, port = await serve_route("/metrics", handler)
        runners.append(runner)
        netlocs.append(f"127.0.0.1:{port}")
    return runners, netlocs
