"""Every Kubernetes API call this package makes, as RBAC rules, with where each is granted.

Least privilege (``deploy/base/rbac.yaml``; a test there checks the two agree, and a test in
`tests/kube` checks that every call the local API endpoint received is covered here):

- ``cluster``: the ClusterRole ``llm-autoscaler``, bound cluster-wide: reads, the
  controller's own LLMAutoscaler objects, Events, warm-pool PriorityClasses (which cannot
  run anything by themselves).
- ``opted-in``: the ClusterRole ``llm-autoscaler-scaler``, bound by a RoleBinding in each
  namespace whose workloads the controller may scale (the user opts a namespace in):
  replicas through the scale subresource and the warm pool's Deployments. Creating or
  patching Deployments anywhere would let the controller run any pod as any
  ServiceAccount, so it never gets that cluster-wide.
- ``lease``: the Role ``llm-autoscaler-leader-election`` in the controller's namespace.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Scope = Literal["cluster", "opted-in", "lease"]


@dataclass(frozen=True, slots=True)
class Rule:
    api_group: str  # "" is the core group
    resource: str  # "deployments/scale" for a subresource
    verbs: frozenset[str]
    why: str
    scope: Scope = "cluster"


def _r(group: str, resource: str, verbs: str, why: str, scope: Scope = "cluster") -> Rule:
    return Rule(group, resource, frozenset(verbs.split()), why, scope)


REQUIRED_RULES: tuple[Rule, ...] = (
    _r("apps", "deployments/scale", "get", "read replicas"),
    _r("apps", "statefulsets/scale", "get", "read replicas"),
    _r("apps", "deployments/scale", "patch", "write replicas (direct mode)", "opted-in"),
    _r("apps", "statefulsets/scale", "patch", "write replicas (direct mode)", "opted-in"),
    _r("apps", "deployments", "get list watch", "informer: replicas, pod template (GPU request)"),
    _r("apps", "deployments", "create patch", "warm-pool Deployments", "opted-in"),
    _r("apps", "statefulsets", "get list watch", "informer: replicas, pod template (GPU request)"),
    _r("", "pods", "list watch", "informer: pod discovery, cold starts, GPU requests on nodes"),
    _r("", "pods", "patch", "sleepers: sleeping label, pod-deletion-cost", "opted-in"),
    _r("", "nodes", "list watch", "informer: allocatable GPUs"),
    _r("", "events", "create", "an Event on the target for every scale change"),
    _r("coordination.k8s.io", "leases", "get create update", "leader election", "lease"),
    _r(
        "coordination.k8s.io",
        "leases",
        "list watch delete",
        "leadership: one Lease informer (members, shard holders); a replica's "
        "member Lease deleted on shutdown",
        "lease",
    ),
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
    """True when `REQUIRED_RULES` grants ``verb`` on ``api_group``/``resource`` (any scope)."""
    return any(
        r.api_group == api_group and r.resource == resource and verb in r.verbs
        for r in REQUIRED_RULES
    )
