"""`llm-autoscaler run`'s composition with ``shards > 1``: three controllers split 20
targets against the local Kubernetes API (real sockets, real short time: a 1.5 s Lease),
report their shards on /readyz and /metrics, and hand a stopped one's shards over; with
``shards = 1`` the one shard's Lease is the leader Lease, ``llm-autoscaler-leader``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import httpx
import pytest
from prometheus_client import generate_latest

from autoscaler.app import Controller
from autoscaler.errors import ConfigError
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.settings import Settings
from tests.support.waiting import until
from tests.support.workloads import add_llm_target, controller_settings, served_page

PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 20
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 10
"""
TARGETS = 20
SHARDS = 8


@pytest.fixture
async def fleet() -> AsyncIterator[LocalKubeAPI]:
    async with served_page(PAGE) as port, LocalKubeAPI() as kube:
        for t in range(TARGETS):
            add_llm_target(kube, f"m{t}", metrics_port=port)
        yield kube


def writable(ctls: Sequence[Controller]) -> list[int]:
    out: list[int] = []
    for c in ctls:
        assert c.leases is not None
        out.extend(c.leases.status().writable)
    return sorted(out)


def all_scaled(kube: LocalKubeAPI) -> bool:
    deps = kube.list_objects("deployments", "llm", group="apps")
    return len(deps) == TARGETS and all(d["spec"]["replicas"] == 4 for d in deps)


async def _steady_get(
    http: httpx.AsyncClient, path: str, read: Callable[[], Any]
) -> tuple[httpx.Response, Any]:
    """GET ``path`` while ``read()`` (the live state it reports) stays the same from before
    the request to after it, so the answer can be compared with that state; under load a
    lease may still move between two replicas, and then the request is repeated."""
    for _ in range(50):
        before = read()
        resp = await http.get(path)
        if read() == before:
            return resp, before
    raise AssertionError(f"{path}: the state it reports changed during every one of 50 requests")


async def test_three_sharded_controllers_split_the_targets_and_take_over_a_stopped_ones(
    fleet: LocalKubeAPI,
) -> None:
    apis = [api_client_for(fleet.url) for _ in range(3)]
    ctls = [
        Controller(controller_settings(shards=SHARDS), api, identity=who)
        for api, who in zip(apis, ("a", "b", "c"), strict=True)
    ]
    try:
        for c in ctls:
            await c.start()
        await until(lambda: writable(ctls) == list(range(SHARDS)), 20, "every shard, once")
        await until(lambda: all_scaled(fleet), 20, "every target scaled to 4")
        # Each target was written once (2 -> 4), by whichever replica holds its shard.
        patches = [c for c in fleet.calls if c.resource == "deployments/scale"]
        assert len([p for p in patches if p.verb == "patch"]) == TARGETS

        def busy_now() -> list[Controller]:
            return [c for c in ctls if c.leases is not None and c.leases.status().writable]

        # the first replica up may hold every shard until the others have joined (they
        # start one after another): the split must come, but it may come after the writes
        await until(lambda: len(busy_now()) >= 2, 20, "the shards split over two replicas")
        busy = busy_now()
        a = ctls[0]
        assert a.http is not None
        assert a.leases is not None
        shards = a.leases
        async with httpx.AsyncClient(base_url=a.http.url) as http:
            ready_resp, held = await _steady_get(http, "/readyz", lambda: shards.status().held)
            metrics_resp, held_m = await _steady_get(http, "/metrics", lambda: shards.held)
        ready, metrics = ready_resp.json(), metrics_resp.text
        assert ready["leadership"]["shards"] == SHARDS
        assert ready["leadership"]["held"] == list(held)
        assert sorted(ready["leadership"]["members"]) == ["a", "b", "c"]
        assert f"llm_autoscaler_shards_held {float(len(held_m))}" in metrics

        leaving = busy[0]
        await leaving.stop()  # releases its shards: the others take them at once
        rest = [c for c in ctls if c is not leaving]
        await until(lambda: writable(rest) == list(range(SHARDS)), 10, "the stopped one's shards")
        assert leaving.leases is not None and leaving.leases.status().held == ()
    finally:
        for c in ctls:
            await c.stop()
        for api in apis:
            await api.close()
    leases = {
        o["metadata"]["name"]
        for o in fleet.list_objects("leases", "llm", group="coordination.k8s.io")
    }
    assert leases == {f"llm-autoscaler-shard-{k}" for k in range(SHARDS)}  # members deleted
    for k in range(SHARDS):
        lease = fleet.get("leases", "llm", f"llm-autoscaler-shard-{k}", "coordination.k8s.io")
        assert lease is not None and lease["spec"]["holderIdentity"] == ""  # all released


async def test_one_shard_is_the_leader_lease_and_says_so(fleet: LocalKubeAPI) -> None:
    api = api_client_for(fleet.url)
    ctl = Controller(controller_settings(shards=1), api, identity="a")
    try:
        await ctl.start()
        await until(lambda: ctl.state.is_leader, 10, "leadership")
        assert ctl.leases is not None and ctl.leases.config.shard_lease(0) == (
            "llm-autoscaler-leader"
        )
        assert ctl.state.leadership is not None
        assert ctl.state.leadership["held"] == [0] and ctl.state.leadership["shards"] == 1
        page = generate_latest(ctl.metrics.registry).decode()
        assert "llm_autoscaler_shards_held 1.0" in page
        assert 'llm_autoscaler_shard_held{shard="0"} 1.0' in page

        def became_leader() -> list[dict[str, Any]]:
            return [
                e
                for e in fleet.list_objects("events", "llm")
                if e["involvedObject"]["kind"] == "Lease" and e["reason"] == "LeaderElection"
            ]

        await until(lambda: bool(became_leader()), 10, "the LeaderElection Event")
        (event,) = became_leader()
        assert event["involvedObject"]["name"] == "llm-autoscaler-leader"
        assert event["message"] == "a became leader"
    finally:
        await ctl.stop()
        await api.close()
    leases = [
        o["metadata"]["name"]
        for o in fleet.list_objects("leases", "llm", group="coordination.k8s.io")
    ]
    assert leases == ["llm-autoscaler-leader"]  # released; the member Lease deleted
    lease = fleet.get("leases", "llm", "llm-autoscaler-leader", "coordination.k8s.io")
    assert lease is not None and lease["spec"]["holderIdentity"] == ""


async def test_without_leader_election_the_controller_always_writes_and_takes_no_lease(
    fleet: LocalKubeAPI,
) -> None:
    api = api_client_for(fleet.url)
    ctl = Controller(controller_settings(leader_election=False), api, identity="a")
    try:
        await ctl.start()
        assert ctl.leases is None and ctl.state.is_leader
    finally:
        await ctl.stop()
        await api.close()
    assert not [c for c in fleet.calls if c.resource == "leases"]


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"shards": 0}, "shards: 0: must be between 1"),
        ({"shards": 5000}, "shards: 5000: must be between 1"),
        ({"shards": 4, "leader_election": False}, "shards=4 needs leader_election true"),
        ({"shard_lease_prefix": "Not_A_Label"}, "shard_lease_prefix: 'Not_A_Label': must be"),
        ({"shard_scope": "held"}, "shard_scope='held' needs shards > 1 (got 1)"),
        ({"shard_scope": "held", "shards": 8, "mode": "keda"}, "and mode 'direct' (got 'keda')"),
        ({"shard_scope": "some"}, "shard_scope: 'some': Input should be 'all' or 'held'"),
    ],
)
def test_bad_shard_settings_name_field_value_and_rule(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.load(**overrides)
    assert message in str(err.value)


def test_the_shards_flag_and_env_var_go_through_the_same_validation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autoscaler.cli import main

    assert main(["run", "--shards", "0", "--kubeconfig", "/nonexistent"]) == 1
    assert "shards: 0: must be between 1" in capsys.readouterr().err
    monkeypatch.setenv("AUTOSCALER_SHARDS", "-3")
    assert main(["run", "--kubeconfig", "/nonexistent"]) == 1
    assert "shards: '-3': must be between 1" in capsys.readouterr().err
    monkeypatch.setenv("AUTOSCALER_SHARDS", "64")
    assert Settings.load().shards == 64


def test_the_shard_scope_flag_goes_through_the_settings_validation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autoscaler.cli import main

    monkeypatch.delenv("AUTOSCALER_SHARDS", raising=False)
    # held without shards > 1 is refused with the rule, before any cluster access
    assert main(["run", "--shard-scope", "held", "--kubeconfig", "/nonexistent"]) == 1
    assert "shard_scope='held' needs shards > 1 (got 1)" in capsys.readouterr().err
    # the flag wins over the environment, as --shards does
    monkeypatch.setenv("AUTOSCALER_SHARD_SCOPE", "held")
    argv = ["run", "--shard-scope", "all", "--kubeconfig", "/nonexistent"]
    assert main(argv) == 1  # no cluster here: fails later, at the kubeconfig
    err = capsys.readouterr().err
    assert "shard_scope" not in err and "nonexistent" in err
