"""A local Kubernetes-API-compatible endpoint for tests and the embedded demo."""

from autoscaler.kube.localapi.server import (
    ApiCall,
    DelayRuntime,
    LocalKubeAPI,
    PodEndpoint,
    PodRuntime,
)
from autoscaler.names import METRICS_PORT_ANNOTATION

__all__ = [
    "METRICS_PORT_ANNOTATION",
    "ApiCall",
    "DelayRuntime",
    "LocalKubeAPI",
    "PodEndpoint",
    "PodRuntime",
]
