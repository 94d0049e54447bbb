"""A target with variants on kube-apiserver 1.24 with the real scheduler: one model as two
Deployments, full GPUs (``nvidia.com/gpu`` on one fake-kubelet node) and MIG slices
(``nvidia.com/mig-2g.20gb``, three on another). Under load the controller, as its
ServiceAccount, grows the cheaper MIG variant first, the H100 variant once the slices run
out, and on the way down shrinks the H100 variant first. Status (``status.variants``,
the ``Variants`` column of ``kubectl get llmas``) and the per-variant Events are read back
from the API server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from kubernetes_asyncio.client import ApiClient

from autoscaler.app import Controller
from autoscaler.target import API_VERSION
from tests.control.test_variants_local import GPU, MIG, llama_target
from tests.real.conftest import GPU_TAINT, vllm_deployment
from tests.real.kubectl import Kube
from tests.real.test_controller_real import settings
from tests.support.fake_kubelet import FakeKubelet
from tests.support.waiting import until


def variant_deployment(name: str, namespace: str, replicas: int, resource: str) -> dict[str, Any]:
    return vllm_deployment(name, namespace, replicas, resource=resource)


class Sampler:
    """The ``spec.replicas`` of ``deps`` as read from the API server every 100 ms, on
    change."""

    def __init__(self, kube: Kube, deps: list[dict[str, Any]]) -> None:
        self.kube = kube
        self.deps = deps
        self.seen: list[tuple[int, ...]] = []

    async def run(self) -> None:
        while True:
            now = tuple([int((await self.kube.read(d))["spec"]["replicas"]) for d in self.deps])
            if not self.seen or self.seen[-1] != now:
                self.seen.append(now)
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def nodes(api: ApiClient) -> AsyncIterator[tuple[FakeKubelet, FakeKubelet]]:
    """A node of 4 full GPUs and a node of 3 MIG 2g.20gb slices, each a fake kubelet."""
    async with (
        FakeKubelet(api, "h100-node", subnet=251, taint=GPU_TAINT, resources={GPU: "4"}) as full,
        FakeKubelet(api, "mig-node", subnet=252, taint=GPU_TAINT, resources={MIG: "3"}) as mig,
    ):
        yield full, mig


async def test_under_load_mig_grows_first_then_the_h100_and_the_h100_shrinks_first(
    kube: Kube, namespace: str, admin_api: ApiClient, controller_api: ApiClient
) -> None:
    started = time.monotonic()
    async with nodes(admin_api) as (full, slices):
        await kube.apply(variant_deployment("llama-h100", namespace, 1, GPU))
        await kube.apply(variant_deployment("llama-mig", namespace, 0, MIG))
        await until(lambda: len(full.ready_pods()) == 1, 30, "the h100 pod Ready")
        target = llama_target(5, namespace, pollingInterval=0.5)
        await kube.create(target)
        ctl = Controller(settings(), controller_api, identity="ctrl-variants")
        sampler = Sampler(
            kube, [variant_deployment(n, namespace, 0, GPU) for n in ("llama-h100", "llama-mig")]
        )  # (h100, mig)
        sampling = asyncio.create_task(sampler.run())
        await ctl.start()
        try:
            await until(lambda: ctl.state.is_leader, 15, "leadership")
            (pod,) = full.replicas.values()
            pod.engine.inject(600, 512, 4096)  # ~340 waiting: asks for the max, 5
            await until(lambda: sampler.seen[-1:] == [(2, 3)], 30, "h100=2, mig=3")
            up = sampler.seen
            # the slices first, one a second; the second H100 only once all 3 are taken
            assert [m for _, m in up] == sorted(m for _, m in up), up
            assert all(m == 3 for h, m in up if h == 2), up
            assert (1, 3) in up, up
            assert len(slices.ready_pods()) <= 3  # the scheduler never had a 4th slice
            await until(lambda: len(slices.ready_pods()) == 3, 15, "three MIG pods Ready")

            obj = await kube.read(target)
            deadline = time.monotonic() + 10
            while obj.get("status", {}).get("variantSummary") != "h100=2,mig=3":
                assert time.monotonic() < deadline, obj.get("status")
                await asyncio.sleep(0.2)
                obj = await kube.read(target)
            rows = {v["name"]: v for v in obj["status"]["variants"]}
            assert (rows["h100"]["desiredReplicas"], rows["mig"]["desiredReplicas"]) == (2, 3)
            assert rows["mig"]["cost"] == 1.33 and rows["h100"]["cost"] == 4.0

            assert kube._session is not None  # `kubectl get llmas`: the Variants column
            path = f"/apis/{API_VERSION}/namespaces/{namespace}/llmautoscalers"
            accept = "application/json;as=Table;v=v1;g=meta.k8s.io"
            async with kube._session.get(kube.url + path, headers={"Accept": accept}) as resp:
                table: dict[str, Any] = await resp.json()
            names = [c["name"] for c in table["columnDefinitions"]]
            row = dict(zip(names, table["rows"][0]["cells"], strict=True))
            assert row["Variants"] == "h100=2,mig=3"

            events = await kube.get(f"/api/v1/namespaces/{namespace}/events")
            ours = [e for e in events["items"] if e["reason"].startswith("VariantScaled")]
            on_mig = [e for e in ours if e["involvedObject"]["name"] == "llama-mig"]
            assert any("variant mig: 0 -> 1 replicas (scale-up" in e["message"] for e in on_mig)
            (h100_up,) = [e for e in ours if e["involvedObject"]["name"] == "llama-h100"]
            assert "skipped cheaper: mig (no free slot" in h100_up["message"]

            # the load goes: the H100 (most expensive) shrinks first, then the slices
            await asyncio.sleep(1.2)  # out of the last scale-up's rate period
            mark = len(sampler.seen)
            for rep in [*full.replicas.values(), *slices.replicas.values()]:
                rep.engine.abort_all()
            await until(lambda: sampler.seen[-1:] == [(1, 0)], 30, "h100=1, mig=0")
            down = sampler.seen[mark - 1 :]
            assert down[:2] == [(2, 3), (1, 3)], down
            assert all(h == 1 for h, _ in down[1:]), down
        finally:
            sampling.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampling
            await ctl.stop()
    assert time.monotonic() - started < 40
