"""`scrape_workers` wiring: setting, flag and env var, the controller's source, and the
same decisions with the scraping in worker processes (real processes, real sockets)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from autoscaler.app import Controller
from autoscaler.control.signals import SourceSignals
from autoscaler.errors import ConfigError
from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.metrics.pod_scrape import PodScrapeSource
from autoscaler.metrics.scrape_workers import ScrapeWorkers
from autoscaler.names import METRICS_PORT_ANNOTATION
from autoscaler.settings import Settings
from tests.support.processes import alive
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


@pytest.mark.parametrize("workers", [0, 2])
async def test_the_controller_scales_the_same_with_or_without_scrape_workers(
    cluster: LocalKubeAPI, workers: int
) -> None:
    api = api_client_for(cluster.url)
    ctl = Controller(
        controller_settings(leader_election=False, scrape_workers=workers), api, identity="a"
    )
    pids: list[int] = []
    await ctl.start()
    try:
        source = source_of(ctl)
        if workers:
            assert isinstance(source, ScrapeWorkers)
            assert source.worker_config.workers == 2
        else:
            assert type(source) is PodScrapeSource  # K=0: in-process, as before
        await until(lambda: replicas(cluster) == 4, 20, "2 pods x 20 waiting / 10 per replica")
        if isinstance(source, ScrapeWorkers):
            pids = [p for p in source.pids() if p is not None]
            assert len(pids) == 2  # the replicas above came from their scrapes
    finally:
        await ctl.stop()
        await api.close()
    assert [p for p in pids if alive(p)] == []  # stop ended them


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"scrape_workers": -1}, "scrape_workers: -1: Input should be greater than or equal to 0"),
        ({"scrape_workers": 65}, "scrape_workers: 65: Input should be less than or equal to 64"),
        (
            {"scrape_workers": 2, "prometheus_url": "http://prom:9090"},
            "scrape_workers=2 needs pod scraping, but prometheus_url='http://prom:9090'",
        ),
    ],
)
def test_bad_scrape_worker_settings_name_field_value_and_rule(
    overrides: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        Settings.load(**overrides)
    assert message in str(err.value)


def test_the_scrape_workers_flag_and_env_var_go_through_the_same_validation(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from autoscaler.cli import main

    monkeypatch.delenv("AUTOSCALER_PROMETHEUS_URL", raising=False)
    assert Settings.load().scrape_workers == 0  # default: in-process
    assert main(["run", "--scrape-workers", "-2", "--kubeconfig", "/nonexistent"]) == 1
    assert "scrape_workers: -2: Input should be greater than or equal to 0" in (
        capsys.readouterr().err
    )
    monkeypatch.setenv("AUTOSCALER_SCRAPE_WORKERS", "3")
    assert Settings.load().scrape_workers == 3
    monkeypatch.setenv("AUTOSCALER_PROMETHEUS_URL", "http://prom:9090")
    assert main(["run", "--kubeconfig", "/nonexistent"]) == 1
    assert "scrape_workers=3 needs pod scraping" in capsys.readouterr().err
    # the flag wins over the environment
    assert main(["run", "--scrape-workers", "0", "--kubeconfig", "/nonexistent"]) == 1
    err = capsys.readouterr().err
    assert "scrape_workers" not in err and "nonexistent" in err
