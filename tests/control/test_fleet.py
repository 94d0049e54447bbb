"""The controller at (small) fleet scale against the local API: more targets than the
connection pool never stall, a steady tick costs no API request, shutdown releases the
Lease even when the API server hangs. Counted ticks and calls, never timings."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from autoscaler.app import Controller
from autoscaler.domain import TargetRef
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.kube.sharding import ShardConfig, ShardManager
from autoscaler.names import CRD_GROUP, CRD_PLURAL
from tests.support.waiting import until
from tests.support.workloads import add_llm_target, controller_settings, served_page

PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 20
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 10
"""
TARGETS = 12
POOL = 4  # the main ApiClient's connection pool: fewer than the targets


@pytest.fixture
async def fleet() -> AsyncIterator[LocalKubeAPI]:
    async with served_page(PAGE) as port, LocalKubeAPI() as kube:
        for t in range(TARGETS):
            add_llm_target(kube, f"m{t}", metrics_port=port)
        yield kube


def decided(ctl: Controller, at_least: int) -> bool:
    targets = ctl.state.targets.values()
    return len(targets) == TARGETS and all(len(st.history) >= at_least for st in targets)


async def test_more_targets_than_the_connection_pool_all_decide_and_keep_the_lease(
    fleet: LocalKubeAPI,
) -> None:
    api = api_client_for(fleet.url, pool_maxsize=POOL)
    ctl = Controller(controller_settings(), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: decided(ctl, 3), 30, "every target to decide three times")
        assert ctl.leases is not None and ctl.leases.is_leader
        assert ctl.leases.transitions == 1  # never lost it while the fleet ticked
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
    ctl = Controller(controller_settings(leader_election=False), api, identity="a")
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
    leases = ShardManager(api, ShardConfig(namespace="llm", retry_period_s=0.1), "a")
    leases.start()
    try:
        await leases.informer.wait_synced()
        task = asyncio.get_running_loop().create_task(leases.run())
        await until(lambda: leases.is_leader, 10, "leadership")
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        fleet.inject("/leases/", delay_s=600, times=5)  # the API server stops answering
        await leases.release_all(timeout_s=0.2)
        assert not leases.is_leader  # stopped leading; the Lease will simply expire
    finally:
        fleet.faults.clear()
        await leases.stop()
        await api.close()


async def test_readyz_answers_from_memory_without_listing_targets(fleet: LocalKubeAPI) -> None:
    import httpx

    api = api_client_for(fleet.url)
    ctl = Controller(controller_settings(leader_election=False), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: ctl.state.ready, 30, "the first tick")
        # with tick phases the first tick can come before the target watch is open
        await until(
            lambda: any(c.verb == "watch" and c.resource == "llmautoscalers" for c in fleet.calls),
            30,
            "the target watch",
        )
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
    ctl = Controller(controller_settings(leader_election=False), api, identity="a")
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
