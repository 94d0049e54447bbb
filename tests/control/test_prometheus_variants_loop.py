"""A target with variants in Prometheus mode, in the control loop: the controller's own
signal port (`Controller._signals` with ``prometheus_url``) reads the model's signals
from a real Prometheus scraping one pod of each variant's Deployment, and the loop
(over in-memory cluster ports and a fake clock) scales the model from the summed
waiting requests: the cheapest variant first on the way up, the most expensive first on
the way down. Read from the ``scaleTargetRef`` Deployment's pods only (the old
limitation) the model would need 3 replicas, not 5."""

from __future__ import annotations

import asyncio

import pytest

from autoscaler.app import Controller
from autoscaler.control.clock import FakeClock
from autoscaler.control.loop import ControlLoop
from autoscaler.control.ports import TargetView
from autoscaler.control.signals import SourceSignals
from autoscaler.metrics.source import PodEndpoint
from autoscaler.policy.schema import validate_policy
from autoscaler.settings import Settings
from autoscaler.store.base import StoredTarget
from autoscaler.target import RolesSpec, ScaleTargetRef, TargetSpec
from tests.control.test_roles_loop import DECODE, PREFILL, RoleCluster
from tests.control.test_roles_loop import REF as ROLES_REF
from tests.control.test_variants_loop import H100, MIG, REF, VariantCluster
from tests.metrics.vllm_pods import FakeVllm, serve_each
from tests.support.prometheus import PrometheusServer

ONE_PER_SECOND = {
    "stabilizationWindowSeconds": 0,
    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 1}],
}


class PodsCluster(VariantCluster):
    """`VariantCluster` whose view lists a ready pod per replica (the source's pod count)."""

    async def observe(self, spec: TargetSpec) -> TargetView:
        view = await super().observe(spec)
        pods = tuple(
            PodEndpoint(f"{dep}-{i}", "unused")
            for dep, n in self.replicas.items()
            for i in range(n)
        )
        return TargetView(
            spec_replicas=view.spec_replicas,
            ready_replicas=view.ready_replicas,
            pods=pods,
            variants=view.variants,
        )


async def _until_waiting(prom: PrometheusServer, total: float) -> None:
    """Until Prometheus' latest samples of both variants' pods sum to ``total``."""
    for _ in range(200):
        got = await asyncio.to_thread(
            prom.query, 'sum(vllm:num_requests_waiting{pod=~"llama-(h100|mig)-.*"})'
        )
        if got and float(got[0]["value"][1]) == total:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"Prometheus never answered {total} waiting")


@pytest.mark.timeout(120)
async def test_a_variants_target_scales_cheapest_first_from_prometheus_signals() -> None:
    h100_pod, mig_pod = FakeVllm(), FakeVllm()
    h100_pod.set(waiting=12, running=0, kv=0.5)
    mig_pod.set(waiting=8, running=0, kv=0.5)
    labels = [{"namespace": "llm", "pod": "llama-h100-5c7d-a1"}]
    labels.append({"namespace": "llm", "pod": "llama-mig-77f-b1"})
    runners, netlocs = await serve_each([h100_pod, mig_pod])
    try:
        async with PrometheusServer(netlocs, scrape_interval_s=0.2, target_labels=labels) as prom:
            await prom.wait_for("vllm:num_requests_waiting", deadline_s=40, min_series=2)
            await _until_waiting(prom, 20)
            ctl = Controller(Settings(prometheus_url=prom.url), api=None, identity="a")
            signals = ctl._signals()
            assert isinstance(signals, SourceSignals)
            spec = TargetSpec(
                ref=REF,
                policy=validate_policy(
                    {
                        "maxReplicaCount": 6,
                        "metrics": [{"signal": "waiting", "target": 4}],
                        "behavior": {"scaleUp": ONE_PER_SECOND, "scaleDown": ONE_PER_SECOND},
                    }
                ),
                scale_target_ref=ScaleTargetRef(name="llama-h100"),
                variants=(H100, MIG),
            )
            cluster, clock = PodsCluster(), FakeClock()
            loop = ControlLoop(ctl.state, cluster, signals, clock=clock)
            loop.set_targets([StoredTarget(spec, "1")])
            try:
                sizes = []
                for _ in range(5):  # one replica a second, cheapest that can place first
                    [d] = await loop.tick()
                    sizes.append((d.current_replicas, d.desired_replicas))
                    await clock.advance(1.0)
                up = list(cluster.writes)
                st = ctl.state.status(REF)
                assert st is not None and st.last_decision is not None
                message = st.last_decision.message

                h100_pod.set(waiting=2, running=0, kv=0.5)  # 4 waiting: 1 replica
                mig_pod.set(waiting=2, running=0, kv=0.5)
                await _until_waiting(prom, 4)
                down_from = len(cluster.writes)
                for _ in range(5):
                    await loop.tick()
                    await clock.advance(1.0)
                down = cluster.writes[down_from:]
            finally:
                await signals.close()
    finally:
        for runner in runners:
            await runner.cleanup()

    # 20 waiting over both variants' pods at 4 per replica: the model needs 5
    assert sizes == [(1, 2), (2, 3), (3, 4), (4, 5), (5, 5)]
    assert "waiting=20 (target 4 per replica) asks for 5" in message
    # up: the three MIG slices (1.33/h) first, then the second H100 (4/h)
    assert up == [("llama-mig", 1), ("llama-mig", 2), ("llama-mig", 3), ("llama-h100", 2)]
    # down: the H100 goes first (most expensive), then the slices; the H100 keeps its min 1
    assert down[0] == ("llama-h100", 1)
    assert down[1:] == [("llama-mig", 2), ("llama-mig", 1), ("llama-mig", 0)]
    assert cluster.replicas == {"llama-h100": 1, "llama-mig": 0}


@pytest.mark.timeout(120)
async def test_roles_in_prometheus_mode_read_their_own_pods_and_a_role_without_series_holds() -> (
    None
):
    """The prefill pods' prompt-token rate (from Prometheus) grows prefill; the decode
    Deployment's pods have no series in Prometheus: decode holds (never read as 0, which
    would shrink it), and the role notes (the `Roles` condition) say so."""
    prefill_pod = FakeVllm()
    prefill_pod.set(waiting=0, running=0, kv=0.1)
    labels = [{"namespace": "llm", "pod": "llama-prefill-6d-p1"}]
    runners, netlocs = await serve_each([prefill_pod])

    async def serve() -> None:
        while True:  # up to 20,000 prompt tokens/s on the prefill pod
            prefill_pod.serve(1000, [0.05])
            await asyncio.sleep(0.05)

    load = asyncio.ensure_future(serve())
    try:
        async with PrometheusServer(netlocs, scrape_interval_s=0.2, target_labels=labels) as prom:
            await prom.wait_for("vllm:prompt_tokens_total", deadline_s=40)
            for _ in range(300):
                got = await asyncio.to_thread(prom.query, "rate(vllm:prompt_tokens_total[1m])")
                if got and float(got[0]["value"][1]) > 2000:
                    break
                await asyncio.sleep(0.1)
            ctl = Controller(Settings(prometheus_url=prom.url), api=None, identity="a")
            signals = ctl._signals()
            assert isinstance(signals, SourceSignals)
            spec = TargetSpec(
                ref=ROLES_REF,
                policy=validate_policy(
                    {
                        "maxReplicaCount": 6,
                        "metrics": [{"signal": "waiting", "target": 4}],
                        "behavior": {"scaleUp": ONE_PER_SECOND, "scaleDown": ONE_PER_SECOND},
                    }
                ),
                scale_target_ref=ScaleTargetRef(name="llama-prefill"),
                variants=(PREFILL, DECODE),
                roles=RolesSpec(prompt_tokens_per_s_per_prefill=500.0, running_per_decode=10.0),
            )
            cluster, clock = RoleCluster(), FakeClock()
            loop = ControlLoop(ctl.state, cluster, signals, clock=clock)
            loop.set_targets([StoredTarget(spec, "1")])
            try:
                [d] = await loop.tick()
                await clock.advance(1.0)
                await loop.tick()
            finally:
                await signals.close()
    finally:
        load.cancel()
        for runner in runners:
            await runner.cleanup()

    rate = d.numbers["roles.prefill.prompt_tokens_per_s"]
    assert rate > 2000  # from Prometheus, the prefill pod's counter: prefill wants >= 5
    assert "roles.decode.running" not in d.numbers  # absent: missing, not 0
    assert cluster.writes == [("llama-prefill", 3), ("llama-prefill", 4)]  # decode untouched
    assert cluster.replicas["llama-decode"] == 2
    held = "decode: running and KV usage missing, holding"
    assert held in cluster.notes[-1]
    st = ctl.state.status(ROLES_REF)
    assert st is not None and held in st.role_notes
