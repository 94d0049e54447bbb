"""The gate alone (no sockets): FIFO, spreading, per-replica concurrency, cap, timeout,
cancellation and shutdown."""

from __future__ import annotations

import asyncio

import pytest

from autoscaler.activator.gate import Gate, HoldFull, HoldTimeout, ShuttingDown


def gate(**kw: object) -> Gate:
    args: dict[str, object] = {"name": "ns/m", "cap": 10, "timeout_s": 60.0, "max_per_replica": 2}
    args.update(kw)
    return Gate(**args)  # type: ignore[arg-type]


async def test_held_requests_are_dispatched_in_arrival_order_spread_over_ready_pods() -> None:
    g = gate(max_per_replica=2)
    tasks = [asyncio.create_task(g.acquire()) for _ in range(5)]
    await asyncio.sleep(0)
    assert g.held == 5
    g.set_endpoints(["10.0.0.1:8000", "10.0.0.2:8000"])
    await asyncio.sleep(0)
    done = [t for t in tasks if t.done()]
    assert [t.result()[0] for t in done] == [
        "10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.1:8000", "10.0.0.2:8000"
    ]  # fmt: skip
    assert tasks[4] not in done and g.held == 1 and g.in_flight == 4  # 2 per replica
    g.release("10.0.0.2:8000")
    assert (await tasks[4])[0] == "10.0.0.2:8000" and g.held == 0


async def test_warm_gate_answers_at_once_without_holding() -> None:
    g = gate()
    g.set_endpoints(["a:1"])
    ep, held_s = await g.acquire()
    assert (ep, held_s, g.held, g.in_flight) == ("a:1", 0.0, 0, 1)


async def test_cap_refuses_with_429_and_retry_after() -> None:
    g = gate(cap=2, retry_after_s=7)
    tasks = [asyncio.create_task(g.acquire()) for _ in range(2)]
    await asyncio.sleep(0)
    with pytest.raises(HoldFull) as err:
        await g.acquire()
    assert err.value.status == 429 and err.value.retry_after_s == 7 and "cap 2" in str(err.value)
    for t in tasks:
        t.cancel()


async def test_timeout_is_503_naming_the_target_and_the_wait() -> None:
    g = gate(timeout_s=0.01)
    with pytest.raises(HoldTimeout) as err:
        await g.acquire()
    assert err.value.status == 503 and "ns/m" in str(err.value) and "waited" in str(err.value)
    assert g.held == 0 and g.stats.timed_out == 1


async def test_cancelled_waiter_frees_its_place_and_is_skipped_at_dispatch() -> None:
    g = gate(cap=2, max_per_replica=1)
    first = asyncio.create_task(g.acquire())
    second = asyncio.create_task(g.acquire())
    await asyncio.sleep(0)
    first.cancel()
    await asyncio.sleep(0)
    assert g.held == 1 and g.stats.abandoned == 1
    g.set_endpoints(["a:1"])
    assert (await second)[0] == "a:1" and g.in_flight == 1


async def test_close_answers_every_held_request_with_a_retryable_error() -> None:
    g = gate()
    tasks = [asyncio.create_task(g.acquire()) for _ in range(3)]
    await asyncio.sleep(0)
    g.close()
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, ShuttingDown) and r.retry_after_s == 5 for r in results)
    assert g.held == 0
    with pytest.raises(ShuttingDown):
        await g.acquire()


async def test_on_change_reports_held_changes_and_in_flight_edges() -> None:
    seen: list[tuple[int, int]] = []
    g = gate(on_change=lambda gg: seen.append((gg.held, gg.in_flight)))
    t = asyncio.create_task(g.acquire())
    await asyncio.sleep(0)
    g.set_endpoints(["a:1"])
    ep, _ = await t
    g.release(ep)
    assert seen[0] == (1, 0) and (0, 1) in seen and seen[-1] == (0, 0)
