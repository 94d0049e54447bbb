"""Pod-scrape wiring: the controller reads its pods in its own process (real sockets),
and the removed ``--scrape-workers`` flag is accepted with a warning."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from autoscaler.app import Controller
from autoscaler.control.signals import SourceSignals
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.metrics.pod_scrape import PodScrapeSource
from autoscaler.names import METRICS_PORT_ANNOTATION
from autoscaler.settings import Settings
from tests.support.waiting import until
from tests.support.workloads import add_llm_target, controller_settings, served_page

PAGE = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="m",engine="0"} 20
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 10
"""


@pytest.fixture
async def cluster() -> AsyncIterator[LocalKubeAPI]:
    async with served_page(PAGE) as port, LocalKubeAPI() as kube:
        add_llm_target(kube, "llama")
        for i in range(2):
            pod = kube.get("pods", "llm", f"llama-{i}")
            assert pod is not None
            pod["metadata"].setdefault("annotations", {})[METRICS_PORT_ANNOTATION] = str(port)
            kube.update("pods", pod)
        yield kube


def replicas(kube: LocalKubeAPI) -> int:
    dep = kube.get("deployments", "llm", "llama", group="apps")
    assert dep is not None
    return int(dep["spec"]["replicas"])


def source_of(ctl: Controller) -> object:
    assert ctl.loop is not None and isinstance(ctl.loop.signals, SourceSignals)
    return ctl.loop.signals.source


async def test_the_controller_scrapes_its_pods_in_process_and_scales(
    cluster: LocalKubeAPI,
) -> None:
    api = api_client_for(cluster.url)
    ctl = Controller(controller_settings(leader_election=False), api, identity="a")
    await ctl.start()
    try:
        assert type(source_of(ctl)) is PodScrapeSource
        await until(lambda: replicas(cluster) == 4, 20, "2 pods x 20 waiting / 10 per replica")
    finally:
        await ctl.stop()
        await api.close()


def test_the_removed_scrape_workers_flag_and_env_var_are_accepted_with_a_warning(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autoscaler.cli import main

    monkeypatch.delenv("AUTOSCALER_PROMETHEUS_URL", raising=False)
    monkeypatch.setenv("AUTOSCALER_SCRAPE_WORKERS", "3")
    assert not hasattr(Settings.load(), "scrape_workers")  # ignored, not an error
    assert main(["run", "--scrape-workers", "2", "--kubeconfig", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert "--scrape-workers is deprecated and ignored" in err and "nonexistent" in err
