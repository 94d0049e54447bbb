"""Same start for everyone (docs/simulator.md "Start"): a fixed fleet enters the trace at
its size, a dynamic policy at the count it settles on over the pre-roll, never at a count
derived from another policy's size (static-peak's)."""

from __future__ import annotations

from dataclasses import replace

from autoscaler.sim.cluster import ClusterConfig
from autoscaler.sim.compare import CompareConfig, run_comparison, settled_replicas
from autoscaler.sim.policies import StaticPeak, keda_seed
from autoscaler.sim.replica import get_profile
from autoscaler.sim.traces import poisson_trace

CLUSTER = ClusterConfig(profile=get_profile("8b-h100"))
TRACE = poisson_trace(12.0, 300.0, 2000, 200, seed=3)


def test_a_fixed_fleet_enters_at_its_own_size() -> None:
    assert settled_replicas(TRACE, lambda n: StaticPeak(7), CLUSTER, 0.5) == 7


def test_a_dynamic_policy_enters_at_what_it_settles_on_whatever_static_peak_is() -> None:
    cfg = CompareConfig(cluster=CLUSTER, slo_ttft_s=0.5, static_replicas=2)
    small, _ = run_comparison(TRACE, ["keda-seed"], cfg)
    large, _ = run_comparison(TRACE, ["keda-seed"], replace(cfg, static_replicas=40))
    assert small[0].timeline_spec[0] == large[0].timeline_spec[0]
    settled = settled_replicas(TRACE, keda_seed, CLUSTER, 0.5)
    assert small[0].timeline_spec[0] == settled
    # the load needs more than the one replica the pre-roll starts from
    assert settled > 1
