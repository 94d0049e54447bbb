"""Kubernetes objects the tests create: a vLLM Deployment, and one with Ready pods served
on loopback (for the local API endpoint, which runs no kubelet)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from autoscaler.domain import TargetRef
from autoscaler.kube.localapi.server import LocalKubeAPI
from autoscaler.names import CRD_GROUP, CRD_PLURAL, METRICS_PORT_ANNOTATION
from autoscaler.policy.schema import load_policy
from autoscaler.settings import GrpcSettings, HttpSettings, Settings
from autoscaler.target import ScaleTargetRef, TargetSpec, spec_to_object


def deployment(
    name: str,
    replicas: int = 1,
    namespace: str = "default",
    labels: dict[str, str] | None = None,
    gpu: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A Deployment of one vLLM container selecting ``labels`` (default ``app: name``)."""
    labels = labels or {"app": name}
    resources = {"limits": gpu, "requests": gpu} if gpu else {}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "containers": [
                        {"name": "vllm", "image": "vllm/vllm-openai", "resources": resources}
                    ]
                },
            },
        },
    }


def add_served_deployment(
    kube: LocalKubeAPI,
    name: str,
    *,
    namespace: str = "llm",
    pods: int = 2,
    metrics_port: int | None = None,
    ip: str = "127.0.0.1",
) -> None:
    """A Deployment of ``pods`` replicas and as many Ready pods at ``ip``, each scraped on
    ``metrics_port`` (annotation) when given, else on the scrape source's default port."""
    labels = {"app": name}
    kube.create("deployments", deployment(name, pods, namespace, labels), group="apps")
    annotations = {} if metrics_port is None else {METRICS_PORT_ANNOTATION: str(metrics_port)}
    for i in range(pods):
        kube.create(
            "pods",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": f"{name}-{i}",
                    "namespace": namespace,
                    "labels": labels,
                    "annotations": annotations,
                },
                "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai"}]},
            },
        )
        kube.mark_pod_ready(namespace, f"{name}-{i}", ip=ip)


def add_llm_target(
    kube: LocalKubeAPI,
    name: str,
    *,
    namespace: str = "llm",
    metrics_port: int | None = None,
    policy: dict[str, Any] | None = None,
) -> TargetRef:
    """A served Deployment of 2 Ready pods and the LLMAutoscaler scaling it (default policy:
    waiting 10 per replica, at most 8)."""
    add_served_deployment(kube, name, namespace=namespace, metrics_port=metrics_port)
    ref = TargetRef(namespace, name)
    spec = TargetSpec(
        ref=ref,
        policy=load_policy(
            policy or {"maxReplicaCount": 8, "metrics": [{"signal": "waiting", "target": 10}]}
        ),
        scale_target_ref=ScaleTargetRef(name=name),
    )
    kube.create(CRD_PLURAL, spec_to_object(spec), group=CRD_GROUP)
    return ref


@contextlib.asynccontextmanager
async def served_page(text: str) -> AsyncIterator[int]:
    """One /metrics server on 127.0.0.1 answering ``text``; yields its port (every pod of
    the local API endpoint is at 127.0.0.1, so one server stands in for all of them)."""
    app = web.Application()
    app.router.add_get("/metrics", lambda _: web.Response(text=text))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def controller_settings(**kw: Any) -> Settings:
    """Settings of a controller under test: ephemeral ports, a 0.2 s tick, a 1.5 s Lease."""
    return Settings(
        http=HttpSettings(host="127.0.0.1", port=0),
        grpc=GrpcSettings(host="127.0.0.1", port=0),
        tick_interval_s=0.2,
        lease_duration_s=1.5,
        namespace="llm",
        **kw,
    )
