"""Every Kubernetes API call this package makes, as RBAC rules.

`deploy/` grants exactly these in the ClusterRole (a test there checks it), and a test in
`tests/kube` checks that every call the local API endpoint received is covered here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Rule:
    api_group: str  # "" is the core group
    resource: str  # "deployments/scale" for a subresource
    verbs: frozenset[str]
    why: str


def _r(group: str, resource: str, verbs: str, why: str) -> Rule:
    return Rule(group, resource, frozenset(verbs.split()), why)


REQUIRED_RULES: tuple[Rule, ...] = (
    _r("apps", "deployments/scale", "get patch", "read and write replicas (direct mode)"),
    _r("apps", "statefulsets/scale", "get patch", "read and write replicas (direct mode)"),
    _r(
        "apps",
        "deployments",
        "get list watch create patch",
        "informer: replicas, pod template (GPU request); warm pool",
    ),
    _r("apps", "statefulsets", "get list watch", "informer: replicas, pod template (GPU request)"),
    _r("", "pods", "list watch", "informer: pod discovery, cold starts, GPU requests on nodes"),
    _r("", "nodes", "list watch", "informer: allocatable GPUs"),
    _r("", "events", "create", "an Event on the target for every scale change"),
    _r("coordination.k8s.io", "leases", "get create update", "leader election"),
    _r("scheduling.k8s.io", "priorityclasses", "get create", "warm-pool PriorityClasses"),
    _r("autoscaling", "horizontalpodautoscalers", "list", "refuse to fight an HPA"),
    _r("keda.sh", "scaledobjects", "list", "refuse to fight a ScaledObject"),
    _r(
        "autoscaling.llmscaler.io",
        "llmautoscalers",
        "get list watch create update delete",
        "targets and policies (REST API writes through the CRD store)",
    ),
    _r("autoscaling.llmscaler.io", "llmautoscalers/status", "patch", "last decision"),
)


def allowed(api_group: str, resource: str, verb: str) -> bool:
    """True when `REQUIRED_RULES` grants ``verb`` on ``api_group``/``resource``."""
    return any(
        r.api_group == api_group and r.resource == resource and verb in r.verbs
        for r in REQUIRED_RULES
    )
