"""The benchmark fleet on the local Kubernetes API endpoint: N vLLM Deployments, each with
its Ready pods on loopback addresses of their own, and the LLMAutoscaler scaling it.

Shared by bench_scale (CPU, ticks, API traffic) and bench_rss (memory), so both measure
the same cluster.
"""

from __future__ import annotations

from typing import Any

NAMESPACE = "fleet"
CONTAINER = {"name": "vllm", "image": "vllm/vllm-openai:v0.10.0"}


def pod_ip(g: int) -> str:
    """Pod ``g``'s own loopback address (127.1.0.1, 127.1.0.2, ...)."""
    return f"127.{1 + g // 62500}.{(g // 250) % 250}.{g % 250 + 1}"


def populate(kube: Any, targets: int, pods: int, policy: Any, metrics_port: int) -> None:
    """Deployments ``m0000``.. with ``pods`` Ready pods each (pod g of the fleet at
    ``pod_ip(g)``, scraped on ``metrics_port``) and one LLMAutoscaler per Deployment with
    ``policy``, created on ``kube`` (a running ``LocalKubeAPI``)."""
    from autoscaler.domain import TargetRef
    from autoscaler.names import CRD_GROUP, CRD_PLURAL
    from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object

    for t in range(targets):
        name = f"m{t:04d}"
        labels = {"app": name}
        kube.create(
            "deployments",
            {
                "metadata": {"name": name, "namespace": NAMESPACE, "labels": labels},
                "spec": {
                    "replicas": pods,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [CONTAINER]},
                    },
                },
            },
            group="apps",
        )
        for p in range(pods):
            pod = f"{name}-{p}"
            kube.create(
                "pods",
                {
                    "metadata": {"name": pod, "namespace": NAMESPACE, "labels": labels},
                    "spec": {"containers": [CONTAINER]},
                },
            )
            kube.mark_pod_ready(NAMESPACE, pod, ip=pod_ip(t * pods + p))
        spec = TargetSpec(
            ref=TargetRef(NAMESPACE, name),
            policy=policy,
            scale_target_ref=ScaleTargetRef(name=name),
            metrics_port=metrics_port,
        )
        kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
