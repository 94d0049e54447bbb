"""The demo's two fleets, same model, same load, same cluster shape, different autoscaler.

``ours``: this controller's demo policy (the default engine signals read every second:
waiting, running, KV usage and prompt tokens/s; forecast, panic mode, a warm pool of
pause pods). ``keda``: the seeds' KEDA ScaledObject and HPA
behaviour, field for field as the simulator models it (`sim.policies.keda_seed_policy`:
waiting and max KV usage, 15 s polling, HPA's 300 s scale-down window), decided by the
same core; KEDA+HPA know nothing of GPU capacity, so the capacity cap is off for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoscaler.policy.schema import Capacity, Policy, load_policy
from autoscaler.sim.policies import keda_seed_policy

# The control loop runs in emulated time (see EmulatedClock), so these are the values a
# user would run in production: windows, cooldowns and cold starts in real-world seconds.
DEMO_POLICY: dict[str, Any] = {
    "minReplicaCount": 1,
    "maxReplicaCount": 16,  # the KEDA fleet's (keda_seed_policy): equal limits
    "cooldownPeriod": 300,
    "pollingInterval": 1,
    # No "metrics": the schema's defaults (waiting 4, running 32 per replica, KV usage 0.8,
    # prompt tokens/s 8000 per replica), the engine's own signals as every target gets them.
    "behavior": {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "policies": [
                {"type": "Percent", "value": 100, "periodSeconds": 15},
                {"type": "Pods", "value": 4, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 60,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 20}],
        },
    },
    "panic": {"windowSeconds": 6, "threshold": 2.0, "stableWindowSeconds": 60},
    "prediction": {"enabled": True, "forecaster": "auto", "coldStartPriorSeconds": 60},
    # Two warm GPUs (pause pods, billed: see the GPU column); a scale-up preempts them and
    # skips node provisioning, the pool's Deployment re-creates them on a new node. Four
    # during forecast peaks cost more GPUs than they saved TTFT in trial runs of this demo.
    "warmPool": {"enabled": True, "minReplicas": 2, "maxReplicas": 2, "leadTimeSeconds": 180},
    "capacity": {"provisionableReplicas": 16},
}


@dataclass(frozen=True)
class FleetSpec:
    key: str  # "ours" or "keda": node pool, table column, dashboard series
    name: str  # Deployment and target name
    title: str
    policy: Policy
    initial_nodes: int  # ready at t=0: what the fleet's pods hold before the demo starts


def keda_policy() -> Policy:
    return keda_seed_policy().model_copy(update={"capacity": Capacity(enforce=False)})


def fleets(name: str) -> tuple[FleetSpec, FleetSpec]:
    """Ours (1 replica + 2 pause pods: two 2-GPU nodes) and the KEDA chain (1 replica: one
    2-GPU node). Both start with one warm replica's worth of spare GPU."""
    return (
        FleetSpec(
            "ours", name, "llm-autoscaler (warm pool)", load_policy(DEMO_POLICY), initial_nodes=2
        ),
        FleetSpec(
            "keda", f"{name}-keda", "KEDA+HPA (the seeds' policy)", keda_policy(), initial_nodes=1
        ),
    )
