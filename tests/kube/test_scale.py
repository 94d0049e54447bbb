"""ScaleClient against the local API over a real socket: optimistic concurrency, retries,
ownership refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kubernetes_asyncio.client import ApiClient

from autoscaler import __version__
from autoscaler.errors import ActuationError, ConflictError, OwnershipError
from autoscaler.kube.config import FIELD_MANAGER, USER_AGENT, KubeClients, load_api_client
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.scale import ScaleClient
from autoscaler.retry import RetryPolicy
from tests.kube.conftest import FakeSleep
from tests.support.workloads import deployment

SCALE_PATH = "/deployments/llm/scale"


def generation(kapi: LocalKubeAPI) -> int:
    dep = kapi.get("deployments", "default", "llm", "apps")
    assert dep is not None
    return int(dep["metadata"]["generation"])


async def reconcile_once(sc: ScaleClient, decide: object) -> int:
    """The control loop's path: read, decide from what was read, write with that version;
    on conflict re-read and re-decide (at most 3 times)."""
    assert callable(decide)
    for _ in range(3):
        info = await sc.get_scale("Deployment", "default", "llm")
        desired = int(decide(info.spec_replicas))
        try:
            await sc.set_replicas("Deployment", "default", "llm", desired, info.resource_version)
            return desired
        except ConflictError:
            continue
    raise AssertionError("never converged")


async def test_reads_scale_with_selector_and_version(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm", replicas=2), "apps")
    info = await ScaleClient(kclient).get_scale("Deployment", "default", "llm")
    assert info.spec_replicas == 2
    assert info.selector == "app=llm"
    assert (
        info.resource_version
        == kapi.get("deployments", "default", "llm", "apps")["metadata"]["resourceVersion"]
    )  # type: ignore[index]


async def test_conflict_raises_and_stale_decision_is_not_applied(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    sc = ScaleClient(kclient)
    stale = await sc.get_scale("Deployment", "default", "llm")
    # Someone scales by hand between our read and our write.
    dep = kapi.get("deployments", "default", "llm", "apps")
    assert dep is not None
    dep["spec"]["replicas"] = 5
    kapi.update("deployments", dep, "apps")
    with pytest.raises(ConflictError, match="re-decide"):
        await sc.set_replicas(
            "Deployment", "default", "llm", stale.spec_replicas + 1, stale.resource_version
        )
    assert (await sc.get_scale("Deployment", "default", "llm")).spec_replicas == 5


async def test_caller_redecides_after_conflict_from_fresh_read(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    sc = ScaleClient(kclient)
    seen: list[int] = []

    def decide(current: int) -> int:
        seen.append(current)
        if len(seen) == 1:  # a human scales to 5 while we decide on the first read
            dep = kapi.get("deployments", "default", "llm", "apps")
            assert dep is not None
            dep["spec"]["replicas"] = 5
            kapi.update("deployments", dep, "apps")
        return current + 1

    applied = await reconcile_once(sc, decide)
    assert seen == [1, 5]
    assert applied == 6
    assert (await sc.get_scale("Deployment", "default", "llm")).spec_replicas == 6


async def test_retries_429_and_5xx_with_growing_jittered_backoff(
    kapi: LocalKubeAPI, kclient: ApiClient, fake_sleep: FakeSleep
) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    policy = RetryPolicy(attempts=5, base_delay_s=0.1, max_delay_s=1.0)
    sc = ScaleClient(kclient, retry=policy, sleep=fake_sleep, rand=lambda: 1.0)
    info = await sc.get_scale("Deployment", "default", "llm")
    kapi.inject(SCALE_PATH, 429, method="PATCH")
    kapi.inject(SCALE_PATH, 503, method="PATCH")
    kapi.inject(SCALE_PATH, 500, method="PATCH")
    result = await sc.set_replicas("Deployment", "default", "llm", 3, info.resource_version)
    assert result.info.spec_replicas == 3
    assert result.retries == 3
    assert fake_sleep.delays == [0.1, 0.2, 0.4]
    assert generation(kapi) == 2  # exactly one applied change


async def test_error_after_the_write_landed_is_not_applied_twice(
    kapi: LocalKubeAPI, kclient: ApiClient, fake_sleep: FakeSleep
) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    sc = ScaleClient(kclient, sleep=fake_sleep, rand=lambda: 0.5)
    info = await sc.get_scale("Deployment", "default", "llm")
    kapi.inject(SCALE_PATH, 500, method="PATCH", after_apply=True)
    result = await sc.set_replicas("Deployment", "default", "llm", 4, info.resource_version)
    assert result.resolved_after_ambiguous
    assert result.info.spec_replicas == 4
    assert generation(kapi) == 2
    patches = [c for c in kapi.calls if c.verb == "patch" and c.resource == "deployments/scale"]
    assert [c.status for c in patches] == [500, 409]


async def test_ambiguous_error_then_other_writer_is_still_a_conflict(
    kapi: LocalKubeAPI, kclient: ApiClient, fake_sleep: FakeSleep
) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    sc = ScaleClient(kclient, sleep=fake_sleep)
    info = await sc.get_scale("Deployment", "default", "llm")
    kapi.inject(SCALE_PATH, 502, method="PATCH")
    dep = kapi.get("deployments", "default", "llm", "apps")
    assert dep is not None
    dep["spec"]["replicas"] = 7
    kapi.update("deployments", dep, "apps")
    with pytest.raises(ConflictError):
        await sc.set_replicas("Deployment", "default", "llm", 4, info.resource_version)
    assert (await sc.get_scale("Deployment", "default", "llm")).spec_replicas == 7


async def test_timeout_is_retried_and_applied_once(kapi: LocalKubeAPI, kclient: ApiClient) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    policy = RetryPolicy(attempts=3, request_timeout_s=0.2)
    sc = ScaleClient(kclient, retry=policy, sleep=FakeSleep(), rand=lambda: 0.0)
    info = await sc.get_scale("Deployment", "default", "llm")
    kapi.inject(SCALE_PATH, None, method="PATCH", delay_s=0.6)
    result = await sc.set_replicas("Deployment", "default", "llm", 2, info.resource_version)
    assert result.info.spec_replicas == 2
    assert result.retries >= 1
    assert generation(kapi) == 2


async def test_gives_up_after_attempts_without_writing(
    kapi: LocalKubeAPI, kclient: ApiClient, fake_sleep: FakeSleep
) -> None:
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    sc = ScaleClient(kclient, retry=RetryPolicy(attempts=3), sleep=fake_sleep)
    info = await sc.get_scale("Deployment", "default", "llm")
    kapi.inject(SCALE_PATH, 503, method="PATCH", times=10)
    with pytest.raises(ActuationError, match="gave up after 3 attempts: HTTP 503"):
        await sc.set_replicas("Deployment", "default", "llm", 9, info.resource_version)
    assert len(fake_sleep.delays) == 2
    assert generation(kapi) == 1


def hpa(name: str, target: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 5,
        },
    }


async def test_refuses_target_owned_by_hpa(kapi: LocalKubeAPI, kclient: ApiClient) -> None:
    kapi.create("deployments", deployment("llm"), "apps")
    kapi.create("horizontalpodautoscalers", hpa("other-hpa", "other"), "autoscaling")
    sc = ScaleClient(kclient)
    await sc.check_ownership("Deployment", "default", "llm")  # an HPA on another target
    kapi.create("horizontalpodautoscalers", hpa("llm-hpa", "llm"), "autoscaling")
    with pytest.raises(OwnershipError, match="HorizontalPodAutoscaler default/llm-hpa"):
        await sc.check_ownership("Deployment", "default", "llm")


async def test_refuses_target_owned_by_keda_scaledobject(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    kapi.create("deployments", deployment("llm"), "apps")
    so = {
        "metadata": {"name": "llm-so", "namespace": "default"},
        "spec": {"scaleTargetRef": {"name": "llm"}, "triggers": []},
    }
    kapi.create("scaledobjects", so, "keda.sh")
    with pytest.raises(OwnershipError, match="ScaledObject default/llm-so"):
        await ScaleClient(kclient).check_ownership("Deployment", "default", "llm")


async def test_every_call_names_the_controller_and_writes_name_its_field_manager(
    kapi: LocalKubeAPI, tmp_path: Path
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "local", "cluster": {"server": kapi.url}}],
                "users": [{"name": "me", "user": {"token": "t"}}],
                "contexts": [{"name": "local", "context": {"cluster": "local", "user": "me"}}],
                "current-context": "local",
            }
        )
    )
    kapi.create("deployments", deployment("llm", replicas=1), "apps")
    api = await load_api_client(str(kubeconfig))
    clients = KubeClients.split(api)  # the per-role pools must keep the identity too
    try:
        for role in (clients.api, clients.watch, clients.lease):
            sc = ScaleClient(role)
            info = await sc.get_scale("Deployment", "default", "llm")
            await sc.set_replicas("Deployment", "default", "llm", 2, info.resource_version)
    finally:
        await clients.close()
        await api.close()
    assert len(kapi.calls) == 6
    assert {c.user_agent for c in kapi.calls} == {USER_AGENT} == {f"llm-autoscaler/{__version__}"}
    writes = [c for c in kapi.calls if c.verb == "patch"]
    assert len(writes) == 3
    assert {c.field_manager for c in writes} == {FIELD_MANAGER} == {"llm-autoscaler"}
    assert {c.field_manager for c in kapi.calls if c.verb == "get"} == {None}
