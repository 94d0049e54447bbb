"""The emulator over real sockets: OpenAI API shapes, cold start, /metrics, queueing, KV."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from autoscaler.emulator import EmulatorFleet
from autoscaler.emulator.engine import REQUEST_LATENCY_BUCKETS_S
from autoscaler.sim.replica import ITL_BUCKETS_S, TTFT_BUCKETS_S
from tests.emulator.conftest import tiny_profile

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


async def read_sse(resp: aiohttp.ClientResponse) -> tuple[list[dict[str, Any]], bool]:
    events: list[dict[str, Any]] = []
    done = False
    async for raw in resp.content:
        line = raw.decode().strip()
        if not line.startswith("data: "):
            continue
        data = line.removeprefix("data: ")
        if data == "[DONE]":
            done = True
            continue
        events.append(json.loads(data))
    return events, done


async def scrape(http: aiohttp.ClientSession, url: str) -> dict[str, list[Sample]]:
    async with http.get(url + "/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {fam.name: fam.samples for fam in text_string_to_metric_families(text)}


def value(samples: dict[str, list[Sample]], family: str, sample: str | None = None) -> float:
    name = sample or family
    return sum(s.value for s in samples[family] if s.name == name)


async def test_streaming_completion_sends_each_token_then_done(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    body = {
        "model": MODEL,
        "prompt": "hello " * 30,
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with http.post(rep.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        events, done = await read_sse(resp)
    assert done
    texts = [e["choices"][0]["text"] for e in events if e["choices"]]
    assert len(texts) == 12 and all(t.strip() for t in texts)
    finals = [e["choices"][0]["finish_reason"] for e in events if e["choices"]]
    assert finals[-1] == "length" and set(finals[:-1]) == {None}
    assert events[-1]["usage"] == {"prompt_tokens": 30, "completion_tokens": 12, "total_tokens": 42}
    assert all(e["object"] == "text_completion" and e["model"] == MODEL for e in events)


async def test_non_streaming_completion_reports_usage_and_text(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    body = {"model": MODEL, "prompt": list(range(50)), "max_tokens": 7}
    async with http.post(rep.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        out = await resp.json()
    assert out["object"] == "text_completion"
    assert len(out["choices"][0]["text"].split()) == 7
    assert out["choices"][0]["finish_reason"] == "length"
    assert out["usage"] == {"prompt_tokens": 50, "completion_tokens": 7, "total_tokens": 57}


async def test_chat_completion_streams_deltas_and_answers_whole(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi there"}]
    body = {"model": MODEL, "messages": messages, "max_tokens": 5, "stream": True}
    async with http.post(rep.url + "/v1/chat/completions", json=body) as resp:
        assert resp.status == 200
        events, done = await read_sse(resp)
    assert done and events[0]["choices"][0]["delta"]["role"] == "assistant"
    contents = [e["choices"][0]["delta"].get("content", "") for e in events[1:]]
    assert len(contents) == 5 and events[-1]["choices"][0]["finish_reason"] == "length"
    assert all(e["object"] == "chat.completion.chunk" for e in events)
    del body["stream"]
    async with http.post(rep.url + "/v1/chat/completions", json=body) as resp:
        out = await resp.json()
    assert out["object"] == "chat.completion"
    assert out["choices"][0]["message"]["role"] == "assistant"
    assert out["usage"]["prompt_tokens"] == 4 + 2 * 4  # words + 4 template tokens a message
    assert out["usage"]["completion_tokens"] == 5


async def test_without_max_tokens_finishes_with_stop_at_default_length(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    async with http.post(rep.url + "/v1/completions", json={"prompt": "a b c"}) as resp:
        out = await resp.json()
    assert out["choices"][0]["finish_reason"] == "stop"
    assert out["usage"]["completion_tokens"] == rep.config.default_max_tokens


async def test_models_lists_the_served_model(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a", model="my-model")
    async with http.get(rep.url + "/v1/models") as resp:
        out = await resp.json()
    assert [m["id"] for m in out["data"]] == ["my-model"]
    assert out["data"][0]["max_model_len"] == rep.engine.max_model_len == 131_072


async def test_rejects_bad_requests_naming_the_field(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a")
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"prompt": "x", "max_tokens": 0}, 400, "max_tokens"),
        ({"prompt": "x", "max_tokens": "ten"}, 400, "max_tokens"),
        ({"max_tokens": 3}, 400, "prompt"),
        ({"prompt": "x", "model": "nope"}, 404, "nope"),
        ({"prompt": "x " * 10, "max_tokens": 140_000}, 400, "maximum context length"),
        ({"prompt": "x", "stream": "yes"}, 400, "stream"),
    ]
    for body, status, needle in cases:
        async with http.post(rep.url + "/v1/completions", json=body) as resp:
            out = await resp.json()
        assert resp.status == status, body
        assert needle in out["message"] and out["object"] == "error", out


async def test_health_is_503_until_the_cold_start_elapses(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    fleet.set_speed(10.0)
    t0 = fleet.clock.now()  # emulated seconds: the assertion does not depend on CPU load
    rep = await fleet.start_replica("a", cold_start_s=3.0)  # 0.3 s real at speed 10
    statuses: list[int] = []
    for _ in range(600):  # counted polls (30 s real at most), not a timed bound
        async with http.get(rep.url + "/health") as resp:
            statuses.append(resp.status)
        if resp.status == 200:
            ready_at = fleet.clock.now()
            break
        async with http.post(rep.url + "/v1/completions", json={"prompt": "x"}) as r2:
            assert r2.status == 503
        await asyncio.sleep(0.05)
    assert statuses[0] == 503 and statuses[-1] == 200
    assert ready_at - t0 >= 3.0


async def test_metrics_parse_with_vllm_v1_names_types_labels_and_buckets(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a", model="m1")
    body = {"prompt": "w " * 100, "max_tokens": 20}
    async with http.post(rep.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
    async with http.get(rep.url + "/metrics") as resp:
        text = await resp.text()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    expected_types = {
        "vllm:num_requests_running": "gauge",
        "vllm:num_requests_waiting": "gauge",
        "vllm:kv_cache_usage_perc": "gauge",
        "vllm:prompt_tokens": "counter",
        "vllm:generation_tokens": "counter",
        "vllm:num_preemptions": "counter",
        "vllm:request_success": "counter",
        "vllm:time_to_first_token_seconds": "histogram",
        "vllm:inter_token_latency_seconds": "histogram",
        "vllm:e2e_request_latency_seconds": "histogram",
        "vllm:request_queue_time_seconds": "histogram",
        "vllm:request_prefill_time_seconds": "histogram",
        "vllm:request_decode_time_seconds": "histogram",
    }
    for name, kind in expected_types.items():
        assert fams[name].type == kind, name
        for s in fams[name].samples:
            assert s.labels["model_name"] == "m1" and s.labels["engine"] == "0"
    assert "vllm:gpu_cache_usage_perc" not in fams
    for name, bounds in (
        ("vllm:time_to_first_token_seconds", TTFT_BUCKETS_S),
        ("vllm:inter_token_latency_seconds", ITL_BUCKETS_S),
        ("vllm:e2e_request_latency_seconds", REQUEST_LATENCY_BUCKETS_S),
    ):
        les = [s.labels["le"] for s in fams[name].samples if s.name.endswith("_bucket")]
        assert les == [repr(float(b)) for b in bounds] + ["+Inf"]
    success = {
        s.labels["finished_reason"]: s.value
        for s in fams["vllm:request_success"].samples
        if s.name == "vllm:request_success_total"
    }
    assert success == {"stop": 0.0, "length": 1.0, "abort": 0.0}
    samples = {f.name: f.samples for f in fams.values()}
    assert value(samples, "vllm:prompt_tokens", "vllm:prompt_tokens_total") == 100
    assert value(samples, "vllm:generation_tokens", "vllm:generation_tokens_total") == 20
    ttft_count = value(
        samples, "vllm:time_to_first_token_seconds", "vllm:time_to_first_token_seconds_count"
    )
    assert ttft_count == 1


async def test_metrics_v0_naming_uses_gpu_cache_and_time_per_output_token(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a", naming="v0")
    async with http.get(rep.url + "/metrics") as resp:
        fams = {f.name: f for f in text_string_to_metric_families(await resp.text())}
    assert "vllm:gpu_cache_usage_perc" in fams and "vllm:kv_cache_usage_perc" not in fams
    assert "vllm:time_per_output_token_seconds" in fams
    assert "vllm:inter_token_latency_seconds" not in fams
    assert all("engine" not in s.labels for s in fams["vllm:num_requests_waiting"].samples)


async def test_queue_grows_beyond_max_num_seqs(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    rep = await fleet.start_replica("a", profile=tiny_profile(max_num_seqs=4))
    fleet.set_speed(4.0)
    body = {"prompt": "w " * 20, "max_tokens": 200}
    url = rep.url + "/v1/completions"
    tasks = [asyncio.create_task(http.post(url, json=body)) for _ in range(12)]
    for _ in range(400):
        if rep.engine.in_flight == 12:
            break
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.05)  # a few engine steps
    m = await scrape(http, rep.url)
    assert value(m, "vllm:num_requests_running") == 4
    assert value(m, "vllm:num_requests_waiting") == 8
    responses = await asyncio.gather(*tasks)
    for r in responses:
        assert r.status == 200
        r.release()
    m = await scrape(http, rep.url)
    assert value(m, "vllm:num_requests_waiting") == 0
    queue_sum = value(m, "vllm:request_queue_time_seconds", "vllm:request_queue_time_seconds_sum")
    assert queue_sum > 0  # the last 8 waited for a batch slot


async def test_kv_pressure_fills_the_cache_and_preempts(
    fleet: EmulatorFleet, http: aiohttp.ClientSession
) -> None:
    # 40 blocks of 16 tokens; 8 requests growing to 160 tokens each cannot all fit.
    rep = await fleet.start_replica("a", profile=tiny_profile(kv_capacity_tokens=640))
    fleet.set_speed(4.0)
    body = {"prompt": "w " * 60, "max_tokens": 100}
    tasks = [
        asyncio.create_task(http.post(rep.url + "/v1/completions", json=body)) for _ in range(8)
    ]
    peak_kv = 0.0
    while not all(t.done() for t in tasks):
        m = await scrape(http, rep.url)
        peak_kv = max(peak_kv, value(m, "vllm:kv_cache_usage_perc"))
        await asyncio.sleep(0.02)
    for t in tasks:
        r = t.result()
        body_out = await r.json()
        assert r.status == 200 and body_out["usage"]["completion_tokens"] == 100
    m = await scrape(http, rep.url)
    assert peak_kv > 0.9
    assert value(m, "vllm:num_preemptions", "vllm:num_preemptions_total") > 0
    assert value(m, "vllm:kv_cache_usage_perc") == 0
