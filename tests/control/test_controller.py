"""The controller process (`llm-autoscaler run`'s composition) against the local
Kubernetes API: policies from LLMAutoscaler objects, status written back, and two
instances with leader election never both writing. Real sockets and real (short) time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from autoscaler.app import Controller
from autoscaler.domain import TargetRef
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL, METRICS_PORT_ANNOTATION
from autoscaler.policy.document import policy_hash
from autoscaler.settings import Settings
from tests.support.waiting import until
from tests.support.workloads import add_llm_target, controller_settings, served_page

REF = TargetRef("llm", "llama")
PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 20
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 10
"""


@pytest.fixture
async def cluster() -> AsyncIterator[tuple[LocalKubeAPI, int]]:
    # One metrics server stands in for every pod (pods get IP 127.0.0.1 + this port).
    async with served_page(PAGE) as port, LocalKubeAPI() as kube:
        add_llm_target(kube, "llama")
        yield kube, port


def replicas(kube: LocalKubeAPI) -> int:
    dep = kube.get("deployments", "llm", "llama", group="apps")
    assert dep is not None
    return int(dep["spec"]["replicas"])


def _last_t(ctl: Controller) -> float:
    status = ctl.state.status(REF)
    return status.history[-1].t if status is not None and status.history else float("-inf")


def _decided(ctl: Controller, after_t: float) -> int:
    """Decisions this instance made for the target after ``after_t`` (its clock)."""
    status = ctl.state.status(REF)
    return 0 if status is None else sum(1 for d in status.history if d.t > after_t)


def set_metrics_port(kube: LocalKubeAPI, port: int) -> None:
    for i in range(2):
        pod = kube.get("pods", "llm", f"llama-{i}")
        assert pod is not None
        pod["metadata"].setdefault("annotations", {})[METRICS_PORT_ANNOTATION] = str(port)
        kube.update("pods", pod)


async def test_run_scales_from_the_crd_and_writes_status(cluster: tuple[LocalKubeAPI, int]) -> None:
    kube, port = cluster
    set_metrics_port(kube, port)
    api = api_client_for(kube.url)
    ctl = Controller(controller_settings(leader_election=False), api, identity="a")
    await ctl.start()
    try:
        await until(lambda: replicas(kube) == 4, 10, "2 pods x 20 waiting / 10 per replica = 4")

        def status() -> dict[str, Any]:
            obj = kube.get(CRD_PLURAL, "llm", "llama", group=CRD_GROUP)
            return (obj or {}).get("status") or {}

        await until(lambda: status().get("desiredReplicas") == 4, 10, "status written")
        assert status()["lastReason"] in ("scale-up", "steady", "within-tolerance")
        st = ctl.state.status(REF)
        assert st is not None
        assert status()["profile"] == st.spec.profile == "recommended"
        assert status()["policyHash"] == policy_hash(st.spec.policy)
        events = kube.list_objects("events", "llm")
        assert any("2 -> 4" in e.get("message", "") for e in events)
    finally:
        await ctl.stop()
        await api.close()


async def test_two_instances_never_both_write_and_fail_over(
    cluster: tuple[LocalKubeAPI, int],
) -> None:
    kube, port = cluster
    set_metrics_port(kube, port)
    apis = [api_client_for(kube.url) for _ in range(2)]
    a = Controller(controller_settings(), apis[0], identity="a")
    b = Controller(controller_settings(), apis[1], identity="b")
    await a.start()
    await b.start()
    try:
        await until(lambda: a.state.is_leader or b.state.is_leader, 10, "a leader")
        assert not (a.state.is_leader and b.state.is_leader)
        await until(lambda: replicas(kube) == 4, 10, "the leader to scale")
        leader, follower = (a, b) if a.state.is_leader else (b, a)
        # Counted reconciles, not a sleep: both instances decide 3 more times each.
        t0 = {id(c): _last_t(c) for c in (a, b)}
        await until(
            lambda: all(_decided(c, t0[id(c)]) >= 3 for c in (a, b)),
            20,
            "three more decisions by each instance",
        )
        patches = [c for c in kube.calls if c.resource == "deployments/scale" and c.verb == "patch"]
        assert len(patches) == 1 and patches[0].status == 200  # one decision, one writer
        await leader.stop()
        await until(lambda: follower.state.is_leader, 10, "failover to the follower")
        # The follower now acts: someone scales down to 1, the new leader scales back up.
        dep = kube.get("deployments", "llm", "llama", group="apps")
        assert dep is not None
        dep["spec"]["replicas"] = 1
        kube.update("deployments", dep, group="apps")
        await until(lambda: replicas(kube) >= 2, 10, "the new leader to scale")
    finally:
        await a.stop()
        await b.stop()
        for api in apis:
            await api.close()


def test_lease_namespace_flag_wins_over_pod_namespace_and_watch_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from autoscaler.app import _lease_namespace

    monkeypatch.delenv("POD_NAMESPACE", raising=False)
    assert _lease_namespace(Settings(namespace=None)) == "default"
    assert _lease_namespace(Settings(namespace="llm")) == "llm"
    monkeypatch.setenv("POD_NAMESPACE", "llm-autoscaler")
    assert _lease_namespace(Settings(namespace="llm")) == "llm-autoscaler"
    assert _lease_namespace(Settings(lease_namespace="ops")) == "ops"


@pytest.mark.parametrize(
    ("mode", "writes"), [("direct", True), ("keda", False), ("advisory", False)]
)
async def test_process_mode_keda_or_advisory_never_writes_replicas(
    cluster: tuple[LocalKubeAPI, int], mode: str, writes: bool
) -> None:
    kube, port = cluster
    api = api_client_for(kube.url)
    ctl = Controller(controller_settings(leader_election=False, mode=mode), api, identity="a")
    await ctl.start()
    try:
        assert ctl.loop is not None
        assert ctl.loop.dry_run is (not writes)
    finally:
        await ctl.stop()
        await api.close()
