"""deploy/overlays/activator: the activator's Deployment, Service, PDB, least-privilege
RBAC and the NetworkPolicy that lets it reach the controller, consistent with each other,
with the base and with the code (its config parses, its routes are the probed ones)."""

from __future__ import annotations

import yaml

from autoscaler.activator.config import parse_config
from tests.deploy.manifests import DEPLOY, Obj, pod_labels, render, selects

ACTIVATOR = DEPLOY / "overlays" / "activator"


def _one(objs: list[Obj], kind: str) -> Obj:
    (obj,) = [o for o in objs if o["kind"] == kind]
    return obj


def test_rbac_reads_endpointslices_and_pods_and_nothing_else() -> None:
    """EndpointSlices, and pods (list + watch, the sleepers) to leave sleepers out."""
    objs = render(ACTIVATOR)
    role = _one(objs, "ClusterRole")
    assert role["rules"] == [
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]},
    ]
    binding = _one(objs, "ClusterRoleBinding")
    sa = _one(objs, "ServiceAccount")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa["metadata"]["name"], "namespace": "llm-autoscaler"}
    ]
    dep = _one(objs, "Deployment")
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == sa["metadata"]["name"]


def test_config_parses_and_names_the_controller_service_and_the_example_model() -> None:
    objs = render(ACTIVATOR)
    cm = _one(objs, "ConfigMap")
    cfg = parse_config(yaml.safe_load(cm["data"]["activator.yaml"]))
    base = render(DEPLOY / "base")
    http = next(
        o for o in base if o["kind"] == "Service" and o["metadata"]["name"].endswith("http")
    )
    link = cfg.controller
    assert (link.namespace, link.service) == (
        http["metadata"]["namespace"],
        http["metadata"]["name"],
    )
    assert link.port in [p["port"] for p in http["spec"]["ports"]]
    example = [
        o
        for o in yaml.safe_load_all(
            (DEPLOY / "examples" / "vllm-llama3-8b-full-gpu.yaml").read_text()
        )
        if o
    ]
    svc = next(o for o in example if o["kind"] == "Service")
    (target,) = cfg.targets
    assert (target.namespace, target.service) == (
        svc["metadata"]["namespace"],
        svc["metadata"]["name"],
    )
    assert target.port == svc["spec"]["ports"][0]["port"]
    llma = next(o for o in example if o["kind"] == "LLMAutoscaler")
    assert target.autoscaler_name == llma["metadata"]["name"]


def test_deployment_mounts_its_config_and_probes_the_activator_routes() -> None:
    objs = render(ACTIVATOR)
    dep = _one(objs, "Deployment")
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["args"][0] == "activator"
    config_arg = next(a for a in c["args"] if a.startswith("--config="))
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert config_arg == f"--config={mount['mountPath']}/activator.yaml"
    volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert volume["configMap"]["name"] == _one(objs, "ConfigMap")["metadata"]["name"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/-/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/-/healthz"
    grace = int(next(a for a in c["args"] if a.startswith("--grace-s=")).split("=")[1])
    assert grace < pod["terminationGracePeriodSeconds"]  # streams finish before SIGKILL
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    token_file = yaml.safe_load(_one(objs, "ConfigMap")["data"]["activator.yaml"])["controller"][
        "tokenFile"
    ]
    token_mount = next(m for m in c["volumeMounts"] if m["name"] == "read-token")
    assert token_file.startswith(token_mount["mountPath"] + "/")


def test_service_pdb_and_networkpolicy_select_the_activator_pods_only() -> None:
    objs = render(ACTIVATOR)
    labels = pod_labels(_one(objs, "Deployment"))
    svc = _one(objs, "Service")
    assert selects(svc["spec"]["selector"], labels)
    assert svc["spec"]["ports"][0]["targetPort"] == "http"
    assert selects(_one(objs, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"], labels)
    base = render(DEPLOY / "base")
    controller = pod_labels(next(o for o in base if o["kind"] == "Deployment"))
    assert not selects(svc["spec"]["selector"], controller)  # never routes to the controller
    np = _one(objs, "NetworkPolicy")
    assert selects(np["spec"]["podSelector"]["matchLabels"], controller)
    (rule,) = np["spec"]["ingress"]
    (peer,) = rule["from"]
    assert selects(peer["podSelector"]["matchLabels"], labels)
    assert [p["port"] for p in rule["ports"]] == ["http"]
    base_pdb = next(o for o in base if o["kind"] == "PodDisruptionBudget")
    assert not selects(base_pdb["spec"]["selector"]["matchLabels"], labels)
