"""The deployed RBAC grants exactly the API calls the code makes (kube/rbac.py)."""

from __future__ import annotations

from autoscaler.kube.rbac import REQUIRED_RULES
from tests.deploy.manifests import DEPLOY, Obj, render

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


def _required() -> set[Grant]:
    return {(r.api_group, r.resource, v) for r in REQUIRED_RULES for v in r.verbs}


def _roles() -> tuple[Obj, Obj]:
    objs = render(DEPLOY / "base")
    (cluster_role,) = [o for o in objs if o["kind"] == "ClusterRole"]
    (role,) = [o for o in objs if o["kind"] == "Role"]
    return cluster_role, role


def test_rbac_grants_exactly_the_required_rules() -> None:
    cluster_role, role = _roles()
    granted = _grants(cluster_role) | _grants(role)
    assert granted - _required() == set(), "granted but never used"
    assert _required() - granted == set(), "used but not granted"


def test_leases_are_granted_only_in_the_controller_namespace() -> None:
    cluster_role, role = _roles()
    assert not {g for g in _grants(cluster_role) if g[1] == "leases"}
    assert {g for g in _grants(role) if g[1] == "leases"}
    assert role["metadata"]["namespace"] == "llm-autoscaler"


def test_no_access_to_secrets() -> None:
    cluster_role, role = _roles()
    assert not {g for g in _grants(cluster_role) | _grants(role) if g[1] == "secrets"}
