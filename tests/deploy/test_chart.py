"""charts/llm-autoscaler: lints clean and renders schema-valid objects for every values
example (ci/*.yaml) with Helm's own Go SDK, and stays the same install as deploy/ (one CRD,
the same least-privilege RBAC, the same hardened pod, the same rules)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import helm_python  # type: ignore[import-untyped]
import pytest

from autoscaler.kube.rbac import REQUIRED_RULES
from autoscaler.settings import Settings
from tests.deploy.chart import (
    CHART,
    CI_VALUES,
    chart_crds,
    lint,
    render_chart,
    render_files,
    values_of,
)
from tests.deploy.manifests import DEPLOY, Obj, load_docs, render, validate_object

EXAMPLES = [None, *CI_VALUES]
IDS = ["defaults", *(p.stem for p in CI_VALUES)]


def _own_crds() -> dict[tuple[str, str], Obj]:
    (crd,) = chart_crds()
    return {
        (
            f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}",
            crd["spec"]["names"]["kind"],
        ): crd
    }


def _one(objs: list[Obj], kind: str, name: str) -> Obj:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, (
        f"{kind} {name}: found {len(found)} in {[(o['kind'], o['metadata']['name']) for o in objs]}"
    )
    return found[0]


def test_every_values_example_is_a_deployable_case() -> None:
    assert {p.stem for p in CI_VALUES} >= {"direct-values", "keda-values", "advisory-values"}


def test_chart_crd_is_byte_equal_to_deploy_crd() -> None:
    (crd_file,) = (CHART / "crds").glob("*.yaml")
    assert crd_file.read_bytes() == (DEPLOY / "base" / "crd.yaml").read_bytes(), (
        "run: python scripts/gen_crd.py --output charts/llm-autoscaler/crds/llmautoscalers.yaml"
    )


@pytest.mark.parametrize("name", ["alerts.yaml", "recording-rules.yaml"])
def test_chart_rule_files_are_byte_equal_to_deploy_prometheus(name: str) -> None:
    assert (CHART / "files" / name).read_bytes() == (DEPLOY / "prometheus" / name).read_bytes(), (
        f"run: cp deploy/prometheus/{name} charts/llm-autoscaler/files/"
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_chart_lints_clean_with_strict_helm_lint(path: Path | None) -> None:
    report = lint(values_of(path))
    assert report["errors"] == []
    problems = [m for m in report["messages"] if m["severity"] >= 2]  # warnings and errors
    assert problems == []


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_rendered_objects_are_schema_valid(path: Path | None) -> None:
    objs = render_chart(values_of(path))
    assert {"Deployment", "ClusterRole", "ServiceAccount", "Service", "ConfigMap"} <= {
        o["kind"] for o in objs
    }
    for obj in objs:
        errors = validate_object(obj, _own_crds())
        assert not errors, f"{obj['kind']}/{obj['metadata']['name']}: {errors}"


@pytest.mark.parametrize("path", EXAMPLES, ids=IDS)
def test_rendered_settings_pass_the_controllers_own_validation(
    path: Path | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    values = values_of(path)
    objs = render_chart(values)
    config = _one(objs, "ConfigMap", "llm-autoscaler-config")
    for k, v in config["data"].items():
        monkeypatch.setenv(k, v)
    settings = Settings.load()
    assert settings.mode == values.get("mode", "direct")
    assert settings.shards == values.get("shards", 1)
    controller = _one(objs, "Deployment", "llm-autoscaler")
    assert controller["spec"]["replicas"] == values.get("replicaCount", 2)


def _grants(role: Obj) -> set[tuple[str, str, str]]:
    return {
        (g, r, v)
        for rule in role["rules"]
        for g in rule["apiGroups"]
        for r in rule["resources"]
        for v in rule["verbs"]
    }


def test_rbac_is_the_same_least_privilege_as_deploy_base() -> None:
    chart = render_chart({})
    base = render(DEPLOY / "base")
    for kind, name in [
        ("ClusterRole", "llm-autoscaler"),
        ("ClusterRole", "llm-autoscaler-scaler"),
        ("Role", "llm-autoscaler-leader-election"),
    ]:
        assert _grants(_one(chart, kind, name)) == _grants(_one(base, kind, name)), name
    assert _grants(_one(chart, "ClusterRole", "llm-autoscaler")) == {
        (r.api_group, r.resource, v)
        for r in REQUIRED_RULES
        if r.scope == "cluster"
        for v in r.verbs
    }
    bound = {o["roleRef"]["name"] for o in chart if o["kind"] == "ClusterRoleBinding"}
    assert bound == {"llm-autoscaler"}  # workload writes never cluster-wide
    assert not [
        o for o in chart if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    ]


def test_each_listed_namespace_gets_one_scaler_rolebinding_to_the_release_account() -> None:
    objs = render_chart({"scaleNamespaces": ["llm-serving", "batch"]}, name="prod", namespace="ops")
    bindings = [
        o for o in objs if o["kind"] == "RoleBinding" and o["roleRef"]["kind"] == "ClusterRole"
    ]
    assert sorted(b["metadata"]["namespace"] for b in bindings) == ["batch", "llm-serving"]
    for b in bindings:
        assert b["roleRef"]["name"] == "prod-llm-autoscaler-scaler"
        assert b["subjects"] == [
            {"kind": "ServiceAccount", "name": "prod-llm-autoscaler", "namespace": "ops"}
        ]
    _one(objs, "ClusterRole", "prod-llm-autoscaler-scaler")
    _one(objs, "ServiceAccount", "prod-llm-autoscaler")


def test_controller_pod_is_the_hardened_pod_of_deploy_base() -> None:
    chart = _one(render_chart({}), "Deployment", "llm-autoscaler")["spec"]["template"]["spec"]
    base = _one(render(DEPLOY / "base"), "Deployment", "llm-autoscaler")["spec"]["template"]["spec"]
    assert chart["securityContext"] == base["securityContext"]
    (c,), (b,) = chart["containers"], base["containers"]
    for field in (
        "ports",
        "startupProbe",
        "livenessProbe",
        "readinessProbe",
        "securityContext",
        "volumeMounts",
        "resources",
        "args",
    ):
        assert c[field] == b[field], field
    assert chart["volumes"] == base["volumes"]
    env = {e["name"]: e for e in c["env"]}
    assert env == {e["name"]: e for e in b["env"]}


def test_monitoring_objects_render_only_when_asked_and_name_the_releases_job() -> None:
    kinds = {o["kind"] for o in render_chart({})}
    assert not kinds & {"ServiceMonitor", "PrometheusRule"}  # no Prometheus Operator here
    objs = render_chart({"monitoring": {"enabled": True}}, name="prod", namespace="ops")
    sm = _one(objs, "ServiceMonitor", "prod-llm-autoscaler")
    http = _one(objs, "Service", "prod-llm-autoscaler-http")
    assert all(
        http["metadata"]["labels"].get(k) == v
        for k, v in sm["spec"]["selector"]["matchLabels"].items()
    )
    grpc = _one(objs, "Service", "prod-llm-autoscaler-grpc")
    assert not all(
        grpc["metadata"]["labels"].get(k) == v
        for k, v in sm["spec"]["selector"]["matchLabels"].items()
    )
    alerts = _one(objs, "PrometheusRule", "prod-llm-autoscaler")
    (kustomize,) = load_docs(DEPLOY / "prometheus" / "alerts.yaml")
    expected = json.loads(
        json.dumps(kustomize["spec"]).replace(
            'job=\\"llm-autoscaler-http\\"', 'job=\\"prod-llm-autoscaler-http\\"'
        )
    )
    assert alerts["spec"] == expected
    assert 'job="prod-llm-autoscaler-http"' in json.dumps(expected).replace("\\", "")
    recording = _one(objs, "PrometheusRule", "prod-llm-autoscaler-recording")
    (kustomize_rec,) = load_docs(DEPLOY / "prometheus" / "recording-rules.yaml")
    assert recording["spec"] == kustomize_rec["spec"]


def test_monitoring_templates_also_follow_the_clusters_capabilities() -> None:
    # Offline rendering has no cluster to ask, so the capability branch is checked in the
    # template: it must test the API the ServiceMonitor and PrometheusRule need.
    helpers = (CHART / "templates" / "_helpers.tpl").read_text()
    assert '.Capabilities.APIVersions.Has "monitoring.coreos.com/v1"' in helpers


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"mode": "scale"}, 'mode: value "scale" must be one of direct, keda, advisory'),
        ({"shards": 0}, "shards: value 0 must be a whole number >= 1"),
        ({"shards": 4, "shardScope": "held", "mode": "keda"}, 'shardScope: value "held" needs'),
    ],
)
def test_invalid_values_fail_naming_the_field_value_and_rule(
    values: dict[str, Any], message: str
) -> None:
    with pytest.raises(helm_python.HelmRenderError, match=message):
        render_files(values)


def test_notes_say_how_to_check_it_works_and_what_is_not_opted_in() -> None:
    notes = render_files({})["llm-autoscaler/templates/NOTES.txt"]
    assert "rollout status deploy/llm-autoscaler" in notes
    assert "kubectl get llmas -A" in notes
    assert "may write\nreplicas nowhere" in notes
    opted = render_files({"scaleNamespaces": ["llm-serving"]})["llm-autoscaler/templates/NOTES.txt"]
    assert "may write replicas in: llm-serving" in opted
