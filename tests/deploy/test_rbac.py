"""The deployed RBAC grants exactly the API calls the code makes (kube/rbac.py), each where
its scope says: cluster-wide, only in opted-in namespaces, or only for the Lease."""

from __future__ import annotations

from autoscaler.kube.rbac import REQUIRED_RULES, Scope
from tests.deploy.manifests import DEPLOY, Obj, load_docs, render

Grant = tuple[str, str, str]  # (apiGroup, resource, verb)


def _grants(role: Obj) -> set[Grant]:
    out: set[Grant] = set()
    for rule in role["rules"]:
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    assert "*" not in (group, resource, verb), f"wildcard in {role['kind']}"
                    out.add((group, resource, verb))
    return out


def _required(scope: Scope) -> set[Grant]:
    return {
        (r.api_group, r.resource, v) for r in REQUIRED_RULES if r.scope == scope for v in r.verbs
    }


def _base() -> list[Obj]:
    return render(DEPLOY / "base")


def _role(kind: str, name: str) -> Obj:
    (role,) = [o for o in _base() if o["kind"] == kind and o["metadata"]["name"] == name]
    return role


def test_each_role_grants_exactly_the_rules_of_its_scope() -> None:
    assert _grants(_role("ClusterRole", "llm-autoscaler")) == _required("cluster")
    assert _grants(_role("ClusterRole", "llm-autoscaler-scaler")) == _required("opted-in")
    assert _grants(_role("Role", "llm-autoscaler-leader-election")) == _required("lease")


def test_workload_writes_are_never_bound_cluster_wide() -> None:
    bound = {o["roleRef"]["name"] for o in _base() if o["kind"] == "ClusterRoleBinding"}
    assert bound == {"llm-autoscaler"}
    cluster = _grants(_role("ClusterRole", "llm-autoscaler"))
    writes = {g for g in cluster if g[0] == "apps" and g[2] not in {"get", "list", "watch"}}
    assert writes == set(), "Deployment/StatefulSet writes must need an opt-in RoleBinding"


def test_the_opt_in_example_binds_the_scaler_role_to_the_controller() -> None:
    (binding,) = load_docs(DEPLOY / "examples" / "opt-in-rolebinding.yaml")
    assert binding["kind"] == "RoleBinding"
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": "llm-autoscaler-scaler",
    }
    (subject,) = binding["subjects"]
    assert (subject["namespace"], subject["name"]) == ("llm-autoscaler", "llm-autoscaler")


def test_leases_are_granted_only_in_the_controller_namespace() -> None:
    role = _role("Role", "llm-autoscaler-leader-election")
    assert {g[1] for g in _grants(role)} == {"leases"}
    assert role["metadata"]["namespace"] == "llm-autoscaler"
    for name in ("llm-autoscaler", "llm-autoscaler-scaler"):
        assert not {g for g in _grants(_role("ClusterRole", name)) if g[1] == "leases"}


def test_no_access_to_secrets() -> None:
    roles = [o for o in _base() if o["kind"] in {"ClusterRole", "Role"}]
    assert not {g for r in roles for g in _grants(r) if g[1] == "secrets"}
