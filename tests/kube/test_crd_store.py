"""CrdPolicyStore against the local API: round trip, stale versions, watch, status."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.domain import Decision, Reason, TargetRef
from autoscaler.errors import ConfigError
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.policy.schema import load_policy
from autoscaler.store.base import NotFound, PreconditionFailed
from autoscaler.store.crd import CrdPolicyStore
from autoscaler.target import ScaleTargetRef, TargetSpec, object_to_spec, spec_to_object
from autoscaler.target_status import Condition
from tests.kube.conftest import FakeSleep

GROUP = "autoscaling.llmscaler.io"


def spec(name: str = "llm", max_replicas: int = 8) -> TargetSpec:
    return TargetSpec(
        ref=TargetRef("default", name),
        policy=load_policy({"minReplicaCount": 1, "maxReplicaCount": max_replicas}),
        scale_target_ref=ScaleTargetRef(kind="Deployment", name=f"{name}-vllm"),
        mode="advisory",
        metrics_port=8080,
        selector={"app": name},
    )


def test_spec_object_round_trip_keeps_every_field() -> None:
    s = spec()
    obj = spec_to_object(s)
    obj["metadata"]["resourceVersion"] = "1"
    assert obj["spec"]["scaleTargetRef"]["name"] == "llm-vllm"
    assert obj["spec"]["selector"] == {"matchLabels": {"app": "llm"}}
    assert object_to_spec(obj) == s


def test_invalid_object_names_field_value_and_rule() -> None:
    obj: dict[str, Any] = spec_to_object(spec())
    obj["spec"]["mode"] = "yolo"
    obj["spec"]["maxReplicaCount"] = 0
    with pytest.raises(ConfigError) as err:
        object_to_spec(obj)
    text = str(err.value)
    assert "spec.mode: value 'yolo' must be one of direct, keda, advisory" in text
    assert "spec.maxReplicaCount" in text


async def test_put_get_list_delete_round_trip(kapi: LocalKubeAPI, kclient: ApiClient) -> None:
    store = CrdPolicyStore(kclient, "default")
    stored = await store.put(spec())
    assert (await store.get(TargetRef("default", "llm"))).spec == spec()
    assert [t.spec.ref.name for t in await store.list()] == ["llm"]
    raw = kapi.get("llmautoscalers", "default", "llm", GROUP)
    assert raw is not None and raw["metadata"]["resourceVersion"] == stored.version
    await store.delete(TargetRef("default", "llm"), if_match=stored.version)
    with pytest.raises(NotFound):
        await store.get(TargetRef("default", "llm"))


async def test_stale_version_is_a_precondition_failure(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    store = CrdPolicyStore(kclient, "default")
    first = await store.put(spec(max_replicas=8))
    second = await store.put(spec(max_replicas=10), if_match=first.version)
    with pytest.raises(PreconditionFailed, match="stale"):
        await store.put(spec(max_replicas=12), if_match=first.version)
    with pytest.raises(PreconditionFailed):
        await store.delete(TargetRef("default", "llm"), if_match=first.version)
    current = await store.get(TargetRef("default", "llm"))
    assert current.version == second.version
    assert current.spec.policy.max_replica_count == 10


async def test_put_without_version_replaces_existing(kclient: ApiClient) -> None:
    store = CrdPolicyStore(kclient, "default")
    await store.put(spec(max_replicas=8))
    await store.put(spec(max_replicas=9))
    assert (await store.get(TargetRef("default", "llm"))).spec.policy.max_replica_count == 9


async def test_invalid_object_is_skipped_and_reported(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    store = CrdPolicyStore(kclient, "default")
    await store.put(spec("good"))
    bad = spec_to_object(spec("bad"))
    bad["spec"]["metricsPort"] = 0
    kapi.create("llmautoscalers", bad, GROUP)
    assert [t.spec.ref.name for t in await store.list()] == ["good"]
    assert "spec.metricsPort: value 0" in store.invalid[TargetRef("default", "bad")]


async def test_watch_yields_full_list_on_each_change_across_a_dropped_stream(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    store = CrdPolicyStore(kclient, None, sleep=FakeSleep())
    await store.put(spec("a"))
    seen: list[list[str]] = []
    gen = store.watch()

    async def next_names() -> list[str]:
        targets = await asyncio.wait_for(anext(gen), 5)
        names = [t.spec.ref.name for t in targets]
        seen.append(names)
        return names

    try:
        assert await next_names() == ["a"]
        await store.put(spec("b"))
        assert await next_names() == ["a", "b"]
        kapi.drop_all_watches()
        kapi.delete("llmautoscalers", "default", "a", GROUP)
        assert await next_names() == ["b"]
        kapi.drop_all_watches()
        await store.put(spec("c"))
        kapi.compact()
        names = await next_names()
        while names != ["b", "c"]:
            names = await next_names()
    finally:
        await gen.aclose()


@pytest.mark.parametrize("garbage", ["Too many requests", '{"kind": "Status"}'])
async def test_policy_watch_skips_a_malformed_event_and_keeps_following(
    kapi: LocalKubeAPI, kclient: ApiClient, garbage: str
) -> None:
    store = CrdPolicyStore(kclient, None, sleep=FakeSleep())
    await store.put(spec("a"))
    kapi.garble_watches("/llmautoscalers", garbage, times=2)
    gen = store.watch()
    try:
        assert [t.spec.ref.name for t in await asyncio.wait_for(anext(gen), 5)] == ["a"]
        await store.put(spec("b"))
        targets = await asyncio.wait_for(anext(gen), 5)
        assert [t.spec.ref.name for t in targets] == ["a", "b"]
    finally:
        await gen.aclose()


async def test_status_writes_do_not_re_yield_or_re_validate_the_targets(
    kapi: LocalKubeAPI, kclient: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = CrdPolicyStore(kclient, None, sleep=FakeSleep())
    for name in ("a", "b", "c"):
        await store.put(spec(name))
    parsed: list[str] = []
    real = object_to_spec

    def counting(obj: Any) -> TargetSpec:
        parsed.append(obj["metadata"]["name"])
        return real(obj)

    monkeypatch.setattr("autoscaler.store.crd.object_to_spec", counting)
    gen = store.watch()
    try:
        assert len(await asyncio.wait_for(anext(gen), 5)) == 3
        decision = Decision(1.0, 1, 2, Reason.SCALE_UP, "up", True)
        for name in ("a", "b", "c"):
            await store.write_status(TargetRef("default", name), decision)
        await store.put(spec("b", max_replicas=9))  # a spec change after the status writes
        targets = await asyncio.wait_for(anext(gen), 5)
    finally:
        await gen.aclose()
    assert targets[1].spec.policy.max_replica_count == 9
    # a and c validated once although each had a status write and b changed since.
    assert (parsed.count("a"), parsed.count("c")) == (1, 1)


async def test_write_status_sets_decision_and_keeps_transition_time(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    now = [1_700_000_000.0]
    store = CrdPolicyStore(kclient, "default", wall_clock=lambda: now[0])
    await store.put(spec())
    ref = TargetRef("default", "llm")
    decision = Decision(
        t=0.0,
        current_replicas=2,
        desired_replicas=3,
        reason=Reason.SCALE_UP,
        message="waiting 14 > 4 x 3 replicas",
        active=True,
    )
    active = Condition("ScalingActive", "True", "ScaleUp", "ok")
    await store.write_status(ref, decision, conditions=[active], observed_generation=1)
    now[0] += 60
    await store.write_status(ref, decision, conditions=[active], observed_generation=1)
    obj = kapi.get("llmautoscalers", "default", "llm", GROUP)
    assert obj is not None
    status = obj["status"]
    assert status["desiredReplicas"] == 3 and status["lastReason"] == "scale-up"
    assert status["lastMessage"] == "waiting 14 > 4 x 3 replicas"
    assert status["conditions"][0]["lastTransitionTime"] == "2023-11-14T22:13:20Z"
    assert status["lastDecisionTime"] == "2023-11-14T22:14:20Z"
    # The status write did not change the spec's generation.
    assert obj["metadata"]["generation"] == 1


async def test_if_match_star_means_exists_never_a_resource_version(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    store = CrdPolicyStore(kclient, "default")
    ref = TargetRef("default", "llm")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        await store.put(spec(), if_match="*")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        await store.put(spec(), if_match="1")
    with pytest.raises(PreconditionFailed, match="does not exist"):
        await store.delete(ref, if_match="*")
    with pytest.raises(NotFound):
        await store.get(ref)
    first = await store.put(spec(max_replicas=8))
    second = await store.put(spec(max_replicas=9), if_match="*")  # was always 412
    assert second.version != first.version
    assert (await store.get(ref)).spec.policy.max_replica_count == 9
    await store.delete(ref, if_match="*")
    with pytest.raises(NotFound):
        await store.get(ref)


async def test_health_turns_bad_after_repeated_watch_failures_and_recovers(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    store = CrdPolicyStore(kclient, None, sleep=FakeSleep())
    await store.put(spec("a"))
    gen = store.watch()
    try:
        await asyncio.wait_for(anext(gen), 5)
        assert store.health() is None
        kapi.inject("/llmautoscalers", 503, times=10_000)  # the API server is unavailable
        kapi.drop_all_watches()
        pending = asyncio.ensure_future(anext(gen))
        for _ in range(500):
            if store.health() is not None:
                break
            await asyncio.sleep(0.01)
        assert "policy watch failing" in (store.health() or "")
        kapi.faults.clear()
        await store.put(spec("b"))
        targets = await asyncio.wait_for(pending, 10)
        assert [t.spec.ref.name for t in targets] == ["a", "b"]
        assert store.health() is None
    finally:
        await gen.aclose()


async def test_rest_writes_keep_labels_and_annotations(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    obj = spec_to_object(spec())
    obj["metadata"]["labels"] = {"team": "search"}
    obj["metadata"]["annotations"] = {"owner": "alice"}
    kapi.create("llmautoscalers", obj, GROUP)
    store = CrdPolicyStore(kclient, "default")
    current = await store.get(TargetRef("default", "llm"))
    await store.put(spec(max_replicas=9), if_match=current.version)
    await store.put(spec(max_replicas=10))
    await store.put(spec(max_replicas=11), if_match="*")
    stored = kapi.get("llmautoscalers", "default", "llm", GROUP)
    assert stored is not None
    assert stored["spec"]["maxReplicaCount"] == 11
    assert stored["metadata"]["labels"] == {"team": "search"}
    assert stored["metadata"]["annotations"] == {"owner": "alice"}


async def test_status_records_the_generation_it_describes(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    store = CrdPolicyStore(kclient, "default")
    await store.put(spec(max_replicas=8))
    await store.put(spec(max_replicas=9))  # generation 2
    await store.list()
    await store.write_status(TargetRef("default", "llm"), None)
    stored = kapi.get("llmautoscalers", "default", "llm", GROUP)
    assert stored is not None
    assert stored["status"]["observedGeneration"] == stored["metadata"]["generation"] == 2


async def test_invalid_object_gets_ready_false_and_a_warning_once_then_ready_when_fixed(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    bad = spec_to_object(spec("bad"))
    bad["spec"]["metricsPort"] = 0
    created = kapi.create("llmautoscalers", bad, GROUP)
    store = CrdPolicyStore(kclient, "default")
    warnings: list[tuple[dict[str, str], str, str]] = []

    async def emit(involved: dict[str, str], reason: str, message: str) -> bool:
        warnings.append((involved, reason, message))
        return True

    await store.list()
    assert await store.report_invalid(emit) == 1
    assert await store.report_invalid(emit) == 0  # nothing changed: no API call
    stored = kapi.get("llmautoscalers", "default", "bad", GROUP)
    assert stored is not None
    (ready,) = stored["status"]["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "False", "InvalidSpec")
    assert "spec.metricsPort: value 0" in ready["message"]
    ((involved, reason, message),) = warnings
    assert involved["uid"] == created["metadata"]["uid"] and involved["kind"] == "LLMAutoscaler"
    assert reason == "InvalidSpec" and "metricsPort" in message
    stored["spec"]["metricsPort"] = 8080
    kapi.update("llmautoscalers", stored, GROUP)
    await store.list()
    assert await store.report_invalid(emit) == 1
    fixed = kapi.get("llmautoscalers", "default", "bad", GROUP)
    assert fixed is not None
    assert fixed["status"]["conditions"][0]["status"] == "True"


async def test_a_decision_written_after_a_fix_is_not_replaced_by_the_valid_again_write(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    bad = spec_to_object(spec("bad"))
    bad["spec"]["metricsPort"] = 0
    kapi.create("llmautoscalers", bad, GROUP)
    store = CrdPolicyStore(kclient, "default")
    await store.list()
    assert await store.report_invalid() == 1
    stored = kapi.get("llmautoscalers", "default", "bad", GROUP)
    assert stored is not None
    stored["spec"]["metricsPort"] = 8080
    kapi.update("llmautoscalers", stored, GROUP)
    await store.list()  # valid again: the controller scales it and writes its status first
    decision = Decision(1.0, 1, 1, Reason.STEADY, "steady", True)
    conditions = [
        Condition("Ready", "True", "Reconciled", "ok"),
        Condition("OverridesProfile", "True", "OldCRDDefault", "maxReplicaCount=16"),
    ]
    await store.write_status(TargetRef("default", "bad"), decision, conditions=conditions)
    assert await store.report_invalid() == 0  # nothing to add: the decision's status stands
    fixed = kapi.get("llmautoscalers", "default", "bad", GROUP)
    assert fixed is not None
    assert [c["type"] for c in fixed["status"]["conditions"]] == ["Ready", "OverridesProfile"]


async def test_a_spec_is_re_validated_when_its_content_changes_not_its_key_order(
    kclient: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store keeps a digest of each spec it parsed, not the spec: equal content in
    another key order is the same spec; any changed value is parsed again."""
    store = CrdPolicyStore(kclient, None, sleep=FakeSleep())
    obj = spec_to_object(spec("a"))
    obj["metadata"]["resourceVersion"] = "1"
    parsed: list[int] = []
    real = object_to_spec

    def counting(o: Any) -> TargetSpec:
        parsed.append(1)
        return real(o)

    monkeypatch.setattr("autoscaler.store.crd.object_to_spec", counting)
    store._accept([obj])
    reordered = {**obj, "spec": dict(reversed(list(obj["spec"].items())))}
    assert list(reordered["spec"]) != list(obj["spec"])
    store._accept([reordered])
    assert len(parsed) == 1
    changed = spec_to_object(spec("a", max_replicas=9))
    changed["metadata"]["resourceVersion"] = "2"
    [target] = store._accept([changed])
    assert len(parsed) == 2 and target.spec.policy.max_replica_count == 9
    assert all(isinstance(d, bytes) and len(d) == 16 for d, _ in store._parsed.values())


async def test_a_condition_that_flips_gets_a_new_transition_time_the_others_keep_theirs(
    kapi: LocalKubeAPI, kclient: ApiClient
) -> None:
    now = [1_700_000_000.0]
    store = CrdPolicyStore(kclient, "default", wall_clock=lambda: now[0])
    await store.put(spec())
    ref = TargetRef("default", "llm")
    decision = Decision(0.0, 2, 3, Reason.SCALE_UP, "up", True)
    active = Condition("ScalingActive", "True", "ScaleUp", "ok")
    limited = Condition("ScalingLimited", "False", "InRange", "ok")
    await store.write_status(ref, decision, conditions=[active, limited])
    now[0] += 60
    limited_now = Condition("ScalingLimited", "True", "TooMany", "at max")
    await store.write_status(ref, decision, conditions=[active, limited_now])
    obj = kapi.get("llmautoscalers", "default", "llm", GROUP)
    assert obj is not None
    times = {c["type"]: c["lastTransitionTime"] for c in obj["status"]["conditions"]}
    assert times == {
        "ScalingActive": "2023-11-14T22:13:20Z",
        "ScalingLimited": "2023-11-14T22:14:20Z",
    }
    # what the store keeps of the status: the conditions' type, status and time only
    assert store._status[ref] == {
        "conditions": [
            {
                "type": "ScalingActive",
                "status": "True",
                "lastTransitionTime": times["ScalingActive"],
            },
            {
                "type": "ScalingLimited",
                "status": "True",
                "lastTransitionTime": times["ScalingLimited"],
            },
        ]
    }
