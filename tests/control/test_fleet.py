"""The controller at (small) fleet scale against the local API: more targets than the
connection pool never stall, a steady tick costs no API request, shutdown releases the
Lease even when the API server hangs. Counted ticks and calls, never timings."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from autoscaler.app import Controller
from autoscaler.domain import TargetRef
from autoscaler.kube.config import api_client_for
from autoscaler.kube.crd import spec_to_object
from autoscaler.kube.leader import LeaderElector, LeaseConfig
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.kube.names import CRD_GROUP, CRD_PLURAL, METRICS_PORT_ANNOTATION
from autoscaler.policy.schema import load_policy
from autoscaler.settings import GrpcSettings, HttpSettings, Settings
from autoscaler.store.base import ScaleTargetRef, TargetSpec
from tests.support.waiting import until

PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 20
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 10
"""
TARGETS = 12
POOL = 4  # the main ApiClient's connection pool: fewer than the targets


@pytest.fixture
async def fleet() -> AsyncIterator[LocalKubeAPI]:
    app = web.Application()
    app.router.add_get("/metrics", lambda _: web.Response(text=PAGE))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    async with LocalKubeAPI() as kube:
        for t in range(TARGETS):
            add_target(kube, f"m{t}", port)
        yield kube
    await runner.cleanup()


def add_target(kube: LocalKubeAPI, name: str, port: int) -> None:
    labels = {"app": name}
    kube.create(
        "deployments",
        {
            "metadata": {"name": name, "namespace": "llm"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
                },
            },
        },
        group="apps",
    )
    for i in range(2):
        kube.create(
            "pods",
            {
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": "llm",
                    "labels": labels,
                    "annotations": {METRICS_PORT_ANNOTATION: str(port)},
                },
                "spec": {"containers": [{"name": "vllm", "image": "vllm"}]},
            },
        )
        kube.mark_pod_ready("llm", f"{name}-{i}", ip="127.0.0.1")
    spec = TargetSpec(
        ref=TargetRef("llm", name),
        policy=load_policy(
            {"maxReplicaCount": 8, "metrics": [{"signal": "waiting", "target": 10}]}
        ),
        scale_target_ref=ScaleTargetRef(name=name),
    )
    kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)


def settings(**kw: Any) -> Settings:
    return Settings(
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=0.2,
        lease_duration_s=1.5,
        namespace="llm",
        **kw,
    )


def decided(ctl: Controller, at_least: int) -> bool:
    targets = ctl.state.targets.values()
    return len(targets) == TARGETS and all(len(st.history) >= at_least for st in targets)


async def test_more_targets_than_the_connection_pool_all_decide_and_keep_the_lease(
    fleet: LocalKubeAPI,
) -> None:
    api = api_client_for(fleet.url, pool_maxsize=POOL)
    ctl = Controller(settings(), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: decided(ctl, 3), 30, "every target to decide three times")
        assert ctl.elector is not None and ctl.elector.is_leader
        assert ctl.elector.transitions == 1  # never lost it while the fleet ticked
        scaled = [
            d
            for d in fleet.list_objects("deployments", "llm", group="apps")
            if d["spec"]["replicas"] == 4
        ]
        assert len(scaled) == TARGETS  # 2 pods x 20 waiting / 10 per replica = 4, everywhere
    finally:
        await ctl.stop()
        await api.close()
    pod_watches = [c for c in fleet.calls if c.resource == "pods" and c.verb == "watch"]
    assert len(pod_watches) == 1  # one shared pod watch, not one per target


async def test_a_steady_tick_makes_no_api_request(fleet: LocalKubeAPI) -> None:
    api = api_client_for(fleet.url)
    ctl = Controller(settings(leader_election=False), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: decided(ctl, 3), 30, "every target to scale and settle")
        await until(
            lambda: all(
                st.last_decision and not st.last_decision.changed
                for st in ctl.state.targets.values()
            ),
            30,
            "every target to hold",
        )
        before = len(fleet.calls)
        ticks = ctl.state.ticks
        await until(lambda: ctl.state.ticks >= ticks + 5, 30, "five more ticks")
        during = fleet.calls[before:]
    finally:
        await ctl.stop()
        await api.close()
    assert [(c.verb, c.resource) for c in during] == []


async def test_release_is_bounded_when_the_api_server_hangs(fleet: LocalKubeAPI) -> None:
    api = api_client_for(fleet.url)
    try:
        elector = LeaderElector(api, LeaseConfig(namespace="llm"), "a")
        assert await elector.try_acquire_or_renew()
        fleet.inject("/leases/", delay_s=600, times=5)  # the API server stops answering
        await elector.release(timeout_s=0.2)
        assert not elector.is_leader  # stopped leading; the Lease will simply expire
    finally:
        fleet.faults.clear()
        await api.close()


async def test_readyz_answers_from_memory_without_listing_targets(fleet: LocalKubeAPI) -> None:
    import httpx

    api = api_client_for(fleet.url)
    ctl = Controller(settings(leader_election=False), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: ctl.state.ready, 30, "the first tick")
        assert ctl.http is not None
        before = len(fleet.calls)
        async with httpx.AsyncClient(base_url=ctl.http.url) as http:
            answers = [(await http.get("/readyz")).status_code for _ in range(20)]
        during = [c for c in fleet.calls[before:] if c.resource == "llmautoscalers"]
    finally:
        await ctl.stop()
        await api.close()
    assert answers == [200] * 20
    assert during == []  # no LIST per probe (it was one LIST of every target per probe)


async def test_a_deleted_target_leaves_nothing_in_the_pod_index(fleet: LocalKubeAPI) -> None:
    api = api_client_for(fleet.url)
    ctl = Controller(settings(leader_election=False), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: decided(ctl, 1), 30, "every target to decide")
        assert ctl.cache is not None and ctl.cache.index.views == TARGETS
        fleet.delete(CRD_PLURAL, "llm", "m0", group=CRD_GROUP)
        await until(
            lambda: ctl.cache is not None and ctl.cache.index.views == TARGETS - 1,
            30,
            "m0's view to go",
        )
        assert TargetRef("llm", "m0") not in ctl.state.targets
    finally:
        await ctl.stop()
        await api.close()
