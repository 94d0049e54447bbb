"""PodWatcher against the local API: ready URLs, pending count, cold starts, and watches
that drop or expire without losing a pod."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi import METRICS_PORT_ANNOTATION, LocalKubeAPI
from autoscaler.kube.pods import PodSnapshot, PodWatcher
from tests.kube.conftest import FakeSleep, uncovered_calls


def pod(name: str, app: str = "llm", created: str = "2024-05-01T10:00:00Z") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "labels": {"app": app}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
        "status": {"phase": "Pending"},
    }


@pytest.fixture
async def watcher(kclient: ApiClient) -> AsyncIterator[PodWatcher]:
    w = PodWatcher(kclient, "default", "app=llm", metrics_port=8000, sleep=FakeSleep())
    w.start()
    await w.wait_until(lambda s: s.synced)
    yield w
    await w.stop()


def names(s: PodSnapshot) -> set[str]:
    return {p.name for p in s.pods}


async def test_reports_ready_urls_and_pending_pods(kapi: LocalKubeAPI, watcher: PodWatcher) -> None:
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b"))
    kapi.create("pods", pod("other", app="db"))
    kapi.mark_pod_ready("default", "a", ip="10.1.0.7")
    snap = await watcher.wait_until(lambda s: s.ready == 1 and s.pending == 1)
    assert snap.ready_urls == ("http://10.1.0.7:8000/metrics",)
    assert names(snap) == {"a", "b"}


async def test_port_annotation_overrides_metrics_port(
    kapi: LocalKubeAPI, watcher: PodWatcher
) -> None:
    p = pod("a")
    p["metadata"]["annotations"] = {METRICS_PORT_ANNOTATION: "41234"}
    kapi.create("pods", p)
    kapi.mark_pod_ready("default", "a", ip="127.0.0.1")
    snap = await watcher.wait_until(lambda s: s.ready == 1)
    assert snap.ready_urls == ("http://127.0.0.1:41234/metrics",)


async def test_learns_cold_start_from_creation_to_ready() -> None:
    now = [1_700_000_000.0]
    async with LocalKubeAPI(port=0, clock=lambda: now[0]) as api, api_client_for(api.url) as c:
        w = PodWatcher(c, "default", "app=llm", sleep=FakeSleep())
        w.start()
        try:
            await w.wait_until(lambda s: s.synced)
            api.create("pods", pod("a"))
            api.create("pods", pod("b"))
            now[0] += 42
            api.mark_pod_ready("default", "a")
            now[0] += 30
            api.mark_pod_ready("default", "b")
            snap = await w.wait_until(lambda s: len(s.cold_start_samples_s) == 2)
            # A second Ready report of the same pod is not a second sample.
            api.mark_pod_ready("default", "a")
            api.create("pods", pod("c"))
            await w.wait_until(lambda s: "c" in names(s))
        finally:
            await w.stop()
    assert uncovered_calls(api) == []
    assert sorted(snap.cold_start_samples_s) == [42.0, 72.0]
    assert sorted(w.snapshot().cold_start_samples_s) == [42.0, 72.0]


async def test_dropped_watch_resumes_from_resource_version_without_missing_pods(
    kapi: LocalKubeAPI, watcher: PodWatcher
) -> None:
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b"))
    await watcher.wait_until(lambda s: names(s) == {"a", "b"})
    # The stream closes; these changes happen before the watcher reconnects.
    kapi.drop_all_watches()
    kapi.create("pods", pod("c"))
    kapi.delete("pods", "default", "a")
    kapi.mark_pod_ready("default", "b", ip="10.0.0.2")
    snap = await watcher.wait_until(lambda s: names(s) == {"b", "c"} and s.ready == 1)
    assert watcher.relists == 1  # resumed, not re-listed
    assert watcher.reconnects >= 1
    assert snap.ready_urls == ("http://10.0.0.2:8000/metrics",)


async def test_expired_watch_relists_and_drops_pods_deleted_meanwhile(
    kapi: LocalKubeAPI, watcher: PodWatcher
) -> None:
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b"))
    await watcher.wait_until(lambda s: names(s) == {"a", "b"})
    kapi.drop_all_watches()
    kapi.delete("pods", "default", "a")
    kapi.create("pods", pod("c"))
    kapi.compact()  # the gap is gone from history: the resume gets 410
    snap = await watcher.wait_until(lambda s: names(s) == {"b", "c"})
    assert watcher.relists == 2
    assert snap.synced


async def test_watch_dropped_after_some_events_misses_nothing(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.drop_watches("/pods", after_events=1, times=3)
    w = PodWatcher(kclient, "default", "app=llm", sleep=FakeSleep())
    w.start()
    try:
        await w.wait_until(lambda s: s.synced)
        for i in range(6):
            kapi.create("pods", pod(f"p{i}"))
        snap = await w.wait_until(lambda s: len(s.pods) == 6)
    finally:
        await w.stop()
    assert names(snap) == {f"p{i}" for i in range(6)}
    assert w.reconnects >= 3


async def test_rejects_empty_selector(kclient: ApiClient) -> None:
    with pytest.raises(ValueError, match="label_selector"):
        PodWatcher(kclient, "default", "")
