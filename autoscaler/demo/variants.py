"""The demo's third target: one model served by two variants (issue 37).

``mig``: a Deployment on a node with ``SLICES`` MIG 2g.20gb slices (resource
``nvidia.com/mig-2g.20gb``), 1.33 per replica-hour. ``h100``: a Deployment on a node of
full H100s (``nvidia.com/gpu``), 4 per replica-hour, at least one replica. One
`LLMAutoscaler`-equivalent target (``variants`` in its spec) decides the model's replicas
once, from both Deployments' pods, and splits them: the cheapest variant that can place
a pod grows first, the other when the slices run out; the most expensive shrinks first.
No node is ever added to this pool: the slices are what runs out.

Its load is the demo's ramp of long prompts (`demo.load.ramp_requests`, shorter and
lower than the comparison's), sent by the same `LoadGenerator` to the Ready pods of both
Deployments. Its per-replica target for prompt tokens/s is sized for a slice (half the
default), so the ramp's peak asks for about six replicas; the model's maximum is five
(three slices, two H100s). The replicas of each Deployment are recorded as they change
(``spec.replicas``, read from the local API); the summary line is derived from them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from autoscaler.demo.cluster import POOL_LABEL, deployment
from autoscaler.demo.load import ramp_requests
from autoscaler.domain import TargetRef
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.policy.schema import load_policy
from autoscaler.sim.traces import Trace
from autoscaler.target import ScaleTargetRef, TargetSpec, VariantSpec

POOL = "variants"
MIG = "nvidia.com/mig-2g.20gb"
GPU = "nvidia.com/gpu"
SLICES = 3  # MIG 2g.20gb slices on the pool's one MIG node
H100_GPUS = 4  # full GPUs on its H100 node
MIG_COST = 1.33
H100_COST = 4.0
# Emulated seconds from the moment its h100 replica is Ready: a ramp, a short hold, then
# nothing (the scale-down shows within the demo's 480 emulated seconds).
RAMP_S = 120.0
HOLD_S = 40.0
RAMP_START_PER_S = 0.5
RAMP_PEAK_PER_S = 4.5
VARIANTS_POLICY: dict[str, Any] = {
    "minReplicaCount": 1,
    "maxReplicaCount": 5,  # three slices and two H100s
    "pollingInterval": 1,
    "cooldownPeriod": 300,
    "metrics": [
        {"signal": "waiting", "type": "AverageValue", "target": 4},
        {"signal": "prompt_tokens_per_s", "type": "AverageValue", "target": 4000},
    ],
    "behavior": {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "policies": [{"type": "Pods", "value": 2, "periodSeconds": 15}],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 30,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 10}],
        },
    },
    "prediction": None,
}


def deployments(namespace: str, model: str) -> list[dict[str, Any]]:
    """``<model>-h100`` (1 replica, one full GPU) and ``<model>-mig`` (0, one slice)."""
    out = []
    for variant, resource, replicas in (("h100", GPU, 1), ("mig", MIG, 0)):
        dep = deployment(namespace, f"{model}-{variant}", POOL, replicas=replicas)
        (container,) = dep["spec"]["template"]["spec"]["containers"]
        container["resources"] = {"limits": {resource: "1"}}
        out.append(dep)
    return out


def nodes() -> list[dict[str, Any]]:
    """The pool: one node of ``H100_GPUS`` full GPUs, one of ``SLICES`` MIG slices."""
    out = []
    for name, product, resource, count in (
        ("gpu-variants-h100", "NVIDIA-H100-80GB-HBM3", GPU, H100_GPUS),
        ("gpu-variants-mig", "NVIDIA-H100-80GB-HBM3-MIG-2g.20gb", MIG, SLICES),
    ):
        alloc = {"cpu": "64", "memory": "512Gi", resource: str(count)}
        out.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {
                    "name": name,
                    "labels": {POOL_LABEL: POOL, "nvidia.com/gpu.product": product},
                },
                "status": {"allocatable": alloc, "capacity": alloc},
            }
        )
    return out


def target(namespace: str, model: str) -> TargetSpec:
    return TargetSpec(
        ref=TargetRef(namespace, model),
        policy=load_policy(VARIANTS_POLICY),
        scale_target_ref=ScaleTargetRef(kind="Deployment", name=f"{model}-h100"),
        mode="direct",
        variants=(
            VariantSpec(
                name="h100",
                scale_target_ref=ScaleTargetRef(kind="Deployment", name=f"{model}-h100"),
                cost_per_replica_hour=H100_COST,
                min_replicas=1,
            ),
            VariantSpec(
                name="mig",
                scale_target_ref=ScaleTargetRef(kind="Deployment", name=f"{model}-mig"),
                cost_per_replica_hour=MIG_COST,
            ),
        ),
    )


def trace() -> Trace:
    return ramp_requests(RAMP_S, RAMP_START_PER_S, RAMP_PEAK_PER_S, hold_s=HOLD_S, seed=23)


@dataclass
class VariantTimeline:
    """The two Deployments' ``spec.replicas`` as they changed, in emulated seconds."""

    namespace: str
    model: str
    kube: LocalKubeAPI
    seen: list[tuple[float, int, int]] = field(default_factory=list)  # (t_s, mig, h100)

    def replicas(self, variant: str) -> int:
        dep = self.kube.get("deployments", self.namespace, f"{self.model}-{variant}", group="apps")
        return int(((dep or {}).get("spec") or {}).get("replicas") or 0)

    def sample(self, t_s: float) -> tuple[int, int] | None:
        """Record the counts at ``t_s``; the new ``(mig, h100)`` when they changed."""
        now = (self.replicas("mig"), self.replicas("h100"))
        if self.seen and self.seen[-1][1:] == now:
            return None
        self.seen.append((round(t_s, 1), *now))
        return now

    def summary(self) -> dict[str, Any]:
        return variant_facts(self.model, self.seen)


def variant_facts(model: str, seen: list[tuple[float, int, int]]) -> dict[str, Any]:
    """What the timeline shows: which variant grew first, how far each went, how many
    slices were taken when the h100 first grew, and which variant shrank first."""
    first_up = first_down = None
    first_up_at = first_down_at = h100_up_at = None
    mig_at_h100_up = None
    for (_, m0, h0), (t, m1, h1) in itertools.pairwise(seen):
        if first_up is None and (m1 > m0 or h1 > h0):
            first_up, first_up_at = ("mig" if m1 > m0 else "h100"), t
        if h100_up_at is None and h1 > h0:
            h100_up_at, mig_at_h100_up = t, m1
        if first_down is None and (m1 < m0 or h1 < h0):
            first_down, first_down_at = ("h100" if h1 < h0 else "mig"), t
    return {
        "model": model,
        "slices": SLICES,
        "cost_per_replica_hour": {"mig": MIG_COST, "h100": H100_COST},
        "timeline": [{"t_s": t, "mig": m, "h100": h} for t, m, h in seen],
        "first_up": first_up,
        "first_up_at_s": first_up_at,
        "mig_start": seen[0][1] if seen else None,
        "mig_max": max((m for _, m, _ in seen), default=None),
        "h100_start": seen[0][2] if seen else None,
        "h100_max": max((h for _, _, h in seen), default=None),
        "h100_up_at_s": h100_up_at,
        "mig_at_h100_up": mig_at_h100_up,
        "first_down": first_down,
        "first_down_at_s": first_down_at,
        "end": {"mig": seen[-1][1], "h100": seen[-1][2]} if seen else None,
    }


def variants_line(v: dict[str, Any]) -> str:
    """One line of measured facts (emulated seconds), e.g. ``variants: mig grew 0->3
    first (cheapest), h100 1->2 once the 3 slices were taken; scale-down took h100
    first``."""
    if v.get("first_up") is None:
        return f"variants: {v['model']} never grew (mig {v['mig_max']}, h100 {v['h100_max']})"
    parts = []
    mig = f"mig {v['mig_start']}->{v['mig_max']}"
    h100 = f"h100 {v['h100_start']}->{v['h100_max']}"
    if v["first_up"] == "mig":
        parts.append(f"{mig} first (cheapest, from t={v['first_up_at_s']:.0f} s)")
        if v["h100_up_at_s"] is None:
            parts.append("h100 stayed at its minimum")
        elif v["mig_at_h100_up"] >= v["slices"]:
            parts.append(f"{h100} once the {v['slices']} slices were taken")
        else:
            parts.append(f"{h100} with {v['mig_at_h100_up']}/{v['slices']} slices taken")
    else:
        parts.append(f"{h100} first (t={v['first_up_at_s']:.0f} s), {mig}")
    down = v.get("first_down")
    tail = (
        f"scale-down took {down} first (t={v['first_down_at_s']:.0f} s)"
        if down is not None
        else "no scale-down in the run"
    )
    return f"variants: {', '.join(parts)}; {tail}"
