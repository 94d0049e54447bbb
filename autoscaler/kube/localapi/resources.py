"""The resource types the local API serves, with the metadata the real discovery gives."""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.names import CRD_GROUP, CRD_KIND, CRD_PLURAL, CRD_VERSION


@dataclass(frozen=True, slots=True)
class ResourceType:
    group: str  # "" for the core group
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = False
    scale_subresource: bool = False
    has_generation: bool = False  # metadata.generation bumps on spec changes

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """``deployments.apps`` as in the real API's error messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: tuple[ResourceType, ...] = (
    ResourceType("", "v1", "pods", "Pod", status_subresource=True),
    ResourceType("", "v1", "nodes", "Node", namespaced=False, status_subresource=True),
    ResourceType("", "v1", "events", "Event"),
    ResourceType(
        "apps",
        "v1",
        "deployments",
        "Deployment",
        status_subresource=True,
        scale_subresource=True,
        has_generation=True,
    ),
    ResourceType(
        "apps",
        "v1",
        "statefulsets",
        "StatefulSet",
        status_subresource=True,
        scale_subresource=True,
        has_generation=True,
    ),
    ResourceType("events.k8s.io", "v1", "events", "Event"),
    ResourceType("coordination.k8s.io", "v1", "leases", "Lease"),
    ResourceType("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice"),
    ResourceType("scheduling.k8s.io", "v1", "priorityclasses", "PriorityClass", namespaced=False),
    ResourceType(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "HorizontalPodAutoscaler",
        status_subresource=True,
        has_generation=True,
    ),
    ResourceType(
        "keda.sh",
        "v1alpha1",
        "scaledobjects",
        "ScaledObject",
        status_subresource=True,
        has_generation=True,
    ),
    ResourceType(
        CRD_GROUP,
        CRD_VERSION,
        CRD_PLURAL,
        CRD_KIND,
        status_subresource=True,
        has_generation=True,
    ),
)

BY_PATH: dict[tuple[str, str, str], ResourceType] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
