"""The shared pod informer and per-target views against the local API: ready URLs,
pending count, cold starts, and watches that drop, expire or carry garbage without losing
a pod -- with one pod list + watch for every target."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.config import api_client_for
from autoscaler.kube.informer import Informer
from autoscaler.kube.localapi import METRICS_PORT_ANNOTATION, LocalKubeAPI
from autoscaler.kube.pods import PodIndex, PodRecord, PodSnapshot, TargetPods, pod_record
from tests.kube.conftest import FakeSleep, uncovered_calls


def pod(name: str, app: str = "llm", namespace: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": app}},
        "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
        "status": {"phase": "Pending"},
    }


class Pods:
    """A pod informer feeding a `PodIndex` (what `ClusterCache` wires up)."""

    def __init__(self, api: ApiClient) -> None:
        self.informer: Informer[PodRecord] = Informer(
            "pods",
            client.CoreV1Api(api).list_pod_for_all_namespaces,
            pod_record,
            sleep=FakeSleep(),
        )
        self.index = PodIndex()
        self.informer.add_handler(self.index.on_event)

    def view(self, selector: str = "app=llm", namespace: str = "default") -> TargetPods:
        return self.index.view(namespace, selector, 8000, "/metrics")

    async def until(self, view: TargetPods, pred: Any) -> PodSnapshot:
        await self.informer.wait_for(lambda: pred(view.snapshot()))
        return view.snapshot()


@pytest.fixture
async def pods(kclient: ApiClient) -> AsyncIterator[Pods]:
    p = Pods(kclient)
    p.informer.start()
    await p.informer.wait_synced()
    yield p
    await p.informer.stop()


def names(s: PodSnapshot) -> set[str]:
    return {p.name for p in s.pods}


async def test_reports_ready_urls_and_pending_pods(kapi: LocalKubeAPI, pods: Pods) -> None:
    view = pods.view()
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b"))
    kapi.create("pods", pod("other", app="db"))
    kapi.create("pods", pod("elsewhere", namespace="other"))
    kapi.mark_pod_ready("default", "a", ip="10.1.0.7")
    snap = await pods.until(view, lambda s: s.ready == 1 and s.pending == 1)
    assert snap.ready_urls == ("http://10.1.0.7:8000/metrics",)
    assert names(snap) == {"a", "b"}


async def test_view_made_after_the_pods_exist_sees_them(kapi: LocalKubeAPI, pods: Pods) -> None:
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b", app="db"))
    await pods.informer.wait_for(lambda: len(pods.informer.items) == 2)
    assert names(pods.view().snapshot()) == {"a"}
    assert names(pods.view("app=db").snapshot()) == {"b"}


async def test_pod_relabelled_out_of_the_selector_leaves_the_view(
    kapi: LocalKubeAPI, pods: Pods
) -> None:
    view = pods.view()
    created = kapi.create("pods", pod("a"))
    await pods.until(view, lambda s: names(s) == {"a"})
    created["metadata"]["labels"] = {"app": "db"}
    kapi.update("pods", created)
    snap = await pods.until(view, lambda s: not s.pods)
    assert snap.pods == ()


async def test_port_annotation_overrides_metrics_port(kapi: LocalKubeAPI, pods: Pods) -> None:
    view = pods.view()
    p = pod("a")
    p["metadata"]["annotations"] = {METRICS_PORT_ANNOTATION: "41234"}
    kapi.create("pods", p)
    kapi.mark_pod_ready("default", "a", ip="127.0.0.1")
    snap = await pods.until(view, lambda s: s.ready == 1)
    assert snap.ready_urls == ("http://127.0.0.1:41234/metrics",)


async def test_learns_cold_start_from_creation_to_ready() -> None:
    now = [1_700_000_000.0]
    async with LocalKubeAPI(port=0, clock=lambda: now[0]) as api, api_client_for(api.url) as c:
        pods = Pods(c)
        pods.informer.start()
        view = pods.view()
        try:
            await pods.informer.wait_synced()
            api.create("pods", pod("a"))
            api.create("pods", pod("b"))
            now[0] += 42
            api.mark_pod_ready("default", "a")
            now[0] += 30
            api.mark_pod_ready("default", "b")
            snap = await pods.until(view, lambda s: len(s.cold_start_samples_s) == 2)
            # A second Ready report of the same pod is not a second sample.
            api.mark_pod_ready("default", "a")
            api.create("pods", pod("c"))
            await pods.until(view, lambda s: "c" in names(s))
        finally:
            await pods.informer.stop()
    assert uncovered_calls(api) == []
    assert sorted(snap.cold_start_samples_s) == [42.0, 72.0]
    assert sorted(view.snapshot().cold_start_samples_s) == [42.0, 72.0]
    assert view.snapshot().cold_start_total == 2


async def test_dropped_watch_resumes_from_resource_version_without_missing_pods(
    kapi: LocalKubeAPI, pods: Pods
) -> None:
    view = pods.view()
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b"))
    await pods.until(view, lambda s: names(s) == {"a", "b"})
    # The stream closes; these changes happen before the informer reconnects.
    kapi.drop_all_watches()
    kapi.create("pods", pod("c"))
    kapi.delete("pods", "default", "a")
    kapi.mark_pod_ready("default", "b", ip="10.0.0.2")
    snap = await pods.until(view, lambda s: names(s) == {"b", "c"} and s.ready == 1)
    assert pods.informer.lists == 1  # resumed, not re-listed
    assert pods.informer.watches >= 2
    assert snap.ready_urls == ("http://10.0.0.2:8000/metrics",)


async def test_expired_watch_relists_and_drops_pods_deleted_meanwhile(
    kapi: LocalKubeAPI, pods: Pods
) -> None:
    view = pods.view()
    kapi.create("pods", pod("a"))
    kapi.create("pods", pod("b"))
    await pods.until(view, lambda s: names(s) == {"a", "b"})
    kapi.drop_all_watches()
    kapi.delete("pods", "default", "a")
    kapi.create("pods", pod("c"))
    kapi.compact()  # the gap is gone from history: the resume gets 410
    snap = await pods.until(view, lambda s: names(s) == {"b", "c"})
    assert pods.informer.lists == 2
    assert snap.synced


async def test_watch_dropped_after_some_events_misses_nothing(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.drop_watches("/pods", after_events=1, times=3)
    pods = Pods(kclient)
    pods.informer.start()
    view = pods.view()
    try:
        await pods.informer.wait_synced()
        for i in range(6):
            kapi.create("pods", pod(f"p{i}"))
        snap = await pods.until(view, lambda s: len(s.pods) == 6)
    finally:
        await pods.informer.stop()
    assert names(snap) == {f"p{i}" for i in range(6)}
    assert pods.informer.watches >= 4


@pytest.mark.parametrize(
    "garbage",
    ["Too many requests, please try again later.", '{"kind": "Status"}', "[1, 2]", "null"],
)
async def test_malformed_watch_line_is_skipped_and_the_watch_goes_on(
    kapi: LocalKubeAPI, kclient: ApiClient, garbage: str
) -> None:
    kapi.garble_watches("/pods", garbage)
    pods = Pods(kclient)
    pods.informer.start()
    view = pods.view()
    try:
        await pods.informer.wait_synced()
        kapi.create("pods", pod("a"))
        snap = await pods.until(view, lambda s: names(s) == {"a"})
    finally:
        await pods.informer.stop()
    assert snap.synced
    assert pods.informer.malformed == 1
    assert (pods.informer.lists, pods.informer.watches) == (1, 1)  # the same stream


async def test_one_pod_list_and_watch_serve_every_target(kapi: LocalKubeAPI, pods: Pods) -> None:
    views = [pods.view(f"app=m{i}") for i in range(20)]
    for i in range(20):
        kapi.create("pods", pod(f"m{i}-0", app=f"m{i}"))
    await pods.informer.wait_for(lambda: all(len(v.snapshot().pods) == 1 for v in views))
    pod_calls = [c for c in kapi.calls if c.resource == "pods"]
    assert sorted(c.verb for c in pod_calls) == ["list", "watch"]


def test_rejects_empty_selector() -> None:
    with pytest.raises(ValueError, match="label_selector"):
        TargetPods("default", "", 8000, "/metrics")


def rec(name: str, labels: dict[str, str], namespace: str = "default") -> PodRecord:
    return pod_record({"metadata": {"name": name, "namespace": namespace, "labels": labels}})


def test_index_routes_pods_by_label_and_set_based_selectors_by_namespace() -> None:
    index = PodIndex()
    a = index.view("default", "app=a,tier in (gpu)", 8000, "/metrics")
    b = index.view("default", "app in (b)", 8000, "/metrics")  # no equality: namespace scan
    index.on_event(("default", "a-0"), None, rec("a-0", {"app": "a", "tier": "gpu"}))
    index.on_event(("default", "a-1"), None, rec("a-1", {"app": "a", "tier": "cpu"}))
    index.on_event(("default", "b-0"), None, rec("b-0", {"app": "b"}))
    index.on_event(("other", "a-9"), None, rec("a-9", {"app": "a", "tier": "gpu"}, "other"))
    assert set(a.pods) == {"a-0"} and set(b.pods) == {"b-0"}
    # Relabelled from a to b: leaves a's view, joins b's.
    index.on_event(("default", "a-0"), None, rec("a-0", {"app": "b"}))
    assert set(a.pods) == set() and set(b.pods) == {"a-0", "b-0"}
    # A view made later is seeded from the pods carrying its label only.
    late = index.view("default", "tier=cpu", 8000, "/metrics")
    assert set(late.pods) == {"a-1"}
    index.on_event(("default", "a-1"), None, None)
    assert set(late.pods) == set()
    assert ("default", "tier", "cpu") not in index._by_label  # nothing left behind


def test_dropped_view_is_no_longer_fed_or_kept() -> None:
    index = PodIndex()
    a = index.view("default", "app=a", 8000, "/metrics")
    index.view("default", "app in (b)", 8000, "/metrics")
    index.drop_view("default", "app=a", 8000, "/metrics")
    index.drop_view("default", "app in (b)", 8000, "/metrics")
    index.on_event(("default", "a-0"), None, rec("a-0", {"app": "a"}))
    assert a.pods == {} and index.views == 0
    assert not index._views_by_label and not index._views_by_ns


async def test_list_in_pages_caches_every_pod_and_misses_no_change_between_pages(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    for i in range(7):
        kapi.create("pods", pod(f"p{i}"))
    core = client.CoreV1Api(kclient)
    pages: list[dict[str, Any]] = []
    real_list = core.list_pod_for_all_namespaces

    async def list_pods(**kw: Any) -> Any:
        if not kw.get("watch"):
            pages.append(kw)
            if len(pages) == 2:  # a change between two pages of the one list
                kapi.delete("pods", "default", "p0")
                kapi.create("pods", pod("late"))
        return await real_list(**kw)

    informer: Informer[PodRecord] = Informer(
        "pods", list_pods, pod_record, page_size=3, sleep=FakeSleep()
    )
    informer.start()
    try:
        await informer.wait_synced()
        assert len(pages) == 3 and all(p["limit"] == 3 for p in pages)
        assert informer.lists == 3
        assert "_continue" not in pages[0] and pages[1]["_continue"]
        # every pod listed once; the watch from the first page's version then shows the
        # changes made while the later pages were read
        await informer.wait_for(lambda: ("default", "p0") not in informer.items)
        await informer.wait_for(lambda: ("default", "late") in informer.items)
        assert sorted(n for _, n in informer.items) == sorted(
            [*(f"p{i}" for i in range(1, 7)), "late"]
        )
    finally:
        await informer.stop()


async def test_a_list_smaller_than_a_page_is_one_request(kapi: LocalKubeAPI, pods: Pods) -> None:
    for i in range(3):
        kapi.create("pods", pod(f"q{i}"))
    await pods.informer.wait_for(lambda: len(pods.informer.items) == 3)
    assert pods.informer.lists == 1


def _raw_pod(name: str, labels: dict[str, str], node: str = "gpu-1") -> dict[str, Any]:
    """A pod as decoded from a watch event: every string a fresh object."""
    import json

    return dict(
        json.loads(
            json.dumps(
                {
                    "metadata": {
                        "name": name,
                        "namespace": "fleet",
                        "uid": f"u-{name}",
                        "labels": labels,
                    },
                    "spec": {"nodeName": node},
                    "status": {"phase": "Running", "podIP": "10.0.0.1"},
                }
            )
        )
    )


def test_pods_with_the_same_labels_share_one_mapping_until_the_last_is_gone() -> None:
    import gc

    from autoscaler.kube import pods as pods_module

    rs = {"app": "m0001", "pod-template-hash": "7d9f8c6b5"}
    key = tuple(sorted(rs.items()))
    a, b = (pod_record(_raw_pod(n, rs)) for n in ("m0001-a", "m0001-b"))
    other = pod_record(_raw_pod("m0002-a", {"app": "m0002", "pod-template-hash": "7d9f8c6b5"}))
    assert a.labels == rs and a.labels is b.labels and other.labels is not a.labels
    assert other.labels == {"app": "m0002", "pod-template-hash": "7d9f8c6b5"}
    assert a.namespace is b.namespace and a.phase is b.phase and a.node is b.node
    assert a.name == "m0001-a" and b.uid == "u-m0001-b"  # what differs stays each pod's own
    assert key in pods_module._LABEL_SETS
    del a, b
    gc.collect()
    assert key not in pods_module._LABEL_SETS  # gone with its last pod: rollouts leak nothing
    again = pod_record(_raw_pod("m0001-d", rs))
    assert again.labels == rs and pods_module._LABEL_SETS[key] is again.labels
    assert pod_record(_raw_pod("bare", {})).labels == {}
