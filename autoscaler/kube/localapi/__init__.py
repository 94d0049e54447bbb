"""A local Kubernetes-API-compatible endpoint for tests and the embedded demo."""

from autoscaler.kube.localapi.server import (
    METRICS_PORT_ANNOTATION,
    ApiCall,
    DelayRuntime,
    LocalKubeAPI,
    PodEndpoint,
    PodRuntime,
)

__all__ = [
    "METRICS_PORT_ANNOTATION",
    "ApiCall",
    "DelayRuntime",
    "LocalKubeAPI",
    "PodEndpoint",
    "PodRuntime",
]
