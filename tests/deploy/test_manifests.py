"""Every manifest under deploy/ is schema-valid, every overlay renders, and the objects
refer to each other correctly (selectors, ports, accounts, roles, config, names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoscaler import __version__ as _unused_pkg  # noqa: F401  (package importable)
from autoscaler.settings import Settings
from tests.deploy.manifests import (
    DEPLOY,
    MONITORED_OVERLAYS,
    MONITORING_KINDS,
    OVERLAY_MODE,
    OVERLAYS,
    ROOT,
    KustomizeError,
    Obj,
    key,
    load_docs,
    manifest_files,
    pod_labels,
    pod_spec,
    render,
    selects,
    validate_object,
)

EXAMPLES = DEPLOY / "examples"


def _own_crds() -> dict[tuple[str, str], Obj]:
    (crd,) = load_docs(DEPLOY / "base" / "crd.yaml")
    api_version = f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}"
    return {(api_version, crd["spec"]["names"]["kind"]): crd}


def _examples() -> list[Obj]:
    return [obj for path in sorted(EXAMPLES.glob("*.yaml")) for obj in load_docs(path)]


def _one(objs: list[Obj], kind: str, name: str, namespace: str | None = None) -> Obj:
    found = [
        o
        for o in objs
        if o["kind"] == kind
        and o["metadata"]["name"] == name
        and (namespace is None or o["metadata"].get("namespace") == namespace)
    ]
    assert len(found) == 1, f"{kind} {namespace}/{name}: found {len(found)}"
    return found[0]


def _containers(spec: Obj) -> list[Obj]:
    return [*spec.get("initContainers", []), *spec["containers"]]


def _container_ports(workload: Obj) -> set[int | str]:
    ports: set[int | str] = set()
    for c in workload["spec"]["template"]["spec"]["containers"]:
        for p in c.get("ports", []):
            ports.add(p["containerPort"])
            if "name" in p:
                ports.add(p["name"])
    return ports


# --- schema validation ---------------------------------------------------------------


@pytest.mark.parametrize("path", manifest_files(), ids=lambda p: str(p.relative_to(DEPLOY)))
def test_manifest_is_schema_valid(path: Path) -> None:
    docs = load_docs(path)
    assert docs, f"{path}: empty"
    for obj in docs:
        errors = validate_object(obj, _own_crds())
        assert not errors, f"{path}: {obj['kind']}/{obj['metadata']['name']}: {errors}"


def test_validation_catches_a_misspelt_field_in_builtin_and_crd_kinds() -> None:
    deployment = _one(render(DEPLOY / "base"), "Deployment", "llm-autoscaler")
    deployment["spec"]["replica"] = 2
    assert validate_object(deployment, _own_crds())
    scaled = _one(
        load_docs(DEPLOY / "overlays/keda/scaledobject.yaml"), "ScaledObject", "vllm-llama3-8b"
    )
    policy = scaled["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleUp"]
    policy["policies"][0]["periodSecond"] = policy["policies"][0].pop("periodSeconds")
    assert validate_object(scaled, _own_crds())
    llmas = _one(_examples(), "LLMAutoscaler", "vllm-llama3-8b")
    llmas["spec"]["warmPool"]["minReplica"] = 1
    assert validate_object(llmas, _own_crds())
    (podmonitor,) = load_docs(EXAMPLES / "vllm-podmonitor.yaml")
    podmonitor["spec"]["podMetricsEndpoints"][0]["scrapeTimout"] = "10s"
    assert validate_object(podmonitor, _own_crds())  # upstream CRD schema, strict


def test_unknown_kind_is_an_error_not_a_silent_pass() -> None:
    obj = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    assert validate_object(obj, _own_crds())


# --- kustomize -----------------------------------------------------------------------


@pytest.mark.parametrize("overlay", OVERLAYS + MONITORED_OVERLAYS)
def test_overlay_renders_base_and_its_mode_and_monitoring_only_when_opted_in(
    overlay: str,
) -> None:
    objs = render(DEPLOY / "overlays" / overlay)
    kinds = {o["kind"] for o in objs}
    expected = {"Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole"}
    expected |= {"ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service"}
    expected |= {"PodDisruptionBudget", "ConfigMap", "NetworkPolicy"}
    assert expected <= kinds
    if overlay in MONITORED_OVERLAYS:
        assert {"ServiceMonitor", "PrometheusRule"} <= kinds
    else:  # installs on a cluster without the Prometheus Operator's CRDs
        assert not kinds & MONITORING_KINDS, kinds & MONITORING_KINDS
    config = _one(objs, "ConfigMap", "llm-autoscaler-config", "llm-autoscaler")
    assert config["data"]["AUTOSCALER_MODE"] == OVERLAY_MODE[overlay]
    assert Settings(mode=config["data"]["AUTOSCALER_MODE"]).mode == OVERLAY_MODE[overlay]
    controller = _one(objs, "Deployment", "llm-autoscaler", "llm-autoscaler")
    env_from = controller["spec"]["template"]["spec"]["containers"][0]["envFrom"]
    assert {"configMapRef": {"name": "llm-autoscaler-config", "optional": True}} in env_from


def test_prometheus_component_is_a_component_and_adds_only_monitoring_objects() -> None:
    objs = render(DEPLOY / "prometheus", kind="Component")
    assert {o["kind"] for o in objs} <= MONITORING_KINDS
    with pytest.raises(KustomizeError, match="kind must be Kustomization"):
        render(DEPLOY / "prometheus")  # a Component is not applied on its own


def test_sharded_overlay_runs_more_replicas_than_the_base_with_valid_shard_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    objs = render(DEPLOY / "overlays" / "sharded")
    controller = _one(objs, "Deployment", "llm-autoscaler", "llm-autoscaler")
    assert controller["spec"]["replicas"] > 2
    config = _one(objs, "ConfigMap", "llm-autoscaler-config", "llm-autoscaler")
    for k, v in config["data"].items():
        monkeypatch.setenv(k, v)
    settings = Settings.load()  # the values the pods read, through the same validation
    assert settings.shards >= 4 * controller["spec"]["replicas"]  # S much larger than R
    env = {e["name"]: e for e in controller["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"  # identity
    role = _one(objs, "Role", "llm-autoscaler-leader-election", "llm-autoscaler")
    assert {"list", "watch", "delete"} <= set(role["rules"][0]["verbs"])
    base = _one(render(DEPLOY / "base"), "Deployment", "llm-autoscaler", "llm-autoscaler")
    assert base["spec"]["replicas"] == 2  # the overlay's count did not leak into the base


def test_loader_applies_replica_counts_only_to_existing_workloads(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "kind: Kustomization\nresources: []\nreplicas: [{name: nope, count: 3}]\n"
    )
    with pytest.raises(KustomizeError, match="no such workload"):
        render(tmp_path)


def test_every_kustomization_directory_renders() -> None:
    for kfile in DEPLOY.rglob("kustomization.yaml"):
        assert render(kfile.parent, kind=load_docs(kfile)[0]["kind"]), kfile


def test_loader_rejects_patches_and_missing_resources(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text("kind: Kustomization\npatches: []\n")
    with pytest.raises(KustomizeError, match="patches"):
        render(tmp_path)
    (tmp_path / "kustomization.yaml").write_text("kind: Kustomization\nresources: [x.yaml]\n")
    with pytest.raises(KustomizeError, match=r"x\.yaml does not exist"):
        render(tmp_path)


# --- cross references ----------------------------------------------------------------


def _object_sets() -> list[tuple[str, list[Obj]]]:
    sets = [
        (f"overlay {o}", render(DEPLOY / "overlays" / o)) for o in OVERLAYS + MONITORED_OVERLAYS
    ]
    return [*sets, ("examples", _examples())]


@pytest.mark.parametrize("name_objs", _object_sets(), ids=lambda s: s[0])
def test_workload_selectors_match_their_pod_labels(name_objs: tuple[str, list[Obj]]) -> None:
    for obj in name_objs[1]:
        if pod_spec(obj) is not None:
            selector = obj["spec"]["selector"]["matchLabels"]
            assert selects(selector, pod_labels(obj)), key(obj)


@pytest.mark.parametrize("name_objs", _object_sets(), ids=lambda s: s[0])
def test_services_select_pods_and_target_real_ports(name_objs: tuple[str, list[Obj]]) -> None:
    objs = name_objs[1]
    workloads = [o for o in objs if pod_spec(o) is not None]
    for svc in (o for o in objs if o["kind"] == "Service"):
        ns = svc["metadata"]["namespace"]
        backends = [
            w
            for w in workloads
            if w["metadata"]["namespace"] == ns and selects(svc["spec"]["selector"], pod_labels(w))
        ]
        assert backends, f"Service {ns}/{svc['metadata']['name']} selects no pods"
        for port in svc["spec"]["ports"]:
            target = port.get("targetPort", port["port"])
            for w in backends:
                assert target in _container_ports(w), (key(svc), target, key(w))


@pytest.mark.parametrize("name_objs", _object_sets(), ids=lambda s: s[0])
def test_pod_references_exist(name_objs: tuple[str, list[Obj]]) -> None:
    """ServiceAccounts, ConfigMaps, PriorityClasses, PDB selectors."""
    objs = name_objs[1]
    examples = _examples()
    names = {key(o) for o in [*objs, *examples]}
    for obj in objs:
        spec = pod_spec(obj)
        if spec is None:
            continue
        ns = obj["metadata"]["namespace"]
        sa = spec.get("serviceAccountName", "default")
        assert sa == "default" or ("ServiceAccount", ns, sa) in names, (key(obj), sa)
        pc = spec.get("priorityClassName")
        assert pc is None or pc.startswith("system-") or ("PriorityClass", "", pc) in names
        for vol in spec.get("volumes", []):
            if "configMap" in vol:
                assert ("ConfigMap", ns, vol["configMap"]["name"]) in names, (key(obj), vol)
    for pdb in (o for o in objs if o["kind"] == "PodDisruptionBudget"):
        ns = pdb["metadata"]["namespace"]
        covered = [
            w
            for w in objs
            if pod_spec(w) is not None
            and w["metadata"]["namespace"] == ns
            and selects(pdb["spec"]["selector"]["matchLabels"], pod_labels(w))
        ]
        assert covered and all(pdb["spec"]["minAvailable"] < w["spec"]["replicas"] for w in covered)


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_bindings_refer_to_existing_roles_and_service_accounts(overlay: str) -> None:
    objs = render(DEPLOY / "overlays" / overlay)
    names = {key(o) for o in objs}
    for b in (o for o in objs if o["kind"] in {"ClusterRoleBinding", "RoleBinding"}):
        ref = b["roleRef"]
        ns = "" if ref["kind"] == "ClusterRole" else b["metadata"]["namespace"]
        assert (ref["kind"], ns, ref["name"]) in names, key(b)
        for s in b["subjects"]:
            assert ("ServiceAccount", s["namespace"], s["name"]) in names, key(b)
    namespaces = {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"}
    local = [o for o in objs if o["metadata"].get("namespace") == "llm-autoscaler"]
    assert local and namespaces >= {"llm-autoscaler"}


def test_servicemonitor_selects_the_http_service_and_not_the_grpc_one() -> None:
    objs = render(DEPLOY / "overlays" / "direct-prometheus")
    (sm,) = [o for o in objs if o["kind"] == "ServiceMonitor"]
    namespaces = sm["spec"]["namespaceSelector"]["matchNames"]
    services = [
        s
        for s in objs
        if s["kind"] == "Service"
        and s["metadata"]["namespace"] in namespaces
        and selects(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])
    ]
    assert [s["metadata"]["name"] for s in services] == ["llm-autoscaler-http"]
    for ep in sm["spec"]["endpoints"]:
        # Every selected Service must have the port: one without it is a dropped target.
        assert all(ep["port"] in {p["name"] for p in s["spec"]["ports"]} for s in services)


def test_controller_deployment_is_hardened_and_matches_settings() -> None:
    objs = render(DEPLOY / "base")
    dep = _one(objs, "Deployment", "llm-autoscaler", "llm-autoscaler")
    spec = dep["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert dep["spec"]["replicas"] == 2
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert spec["securityContext"]["runAsUser"] > 0
    sc = c["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"] and "add" not in sc["capabilities"]
    mounts = {m["mountPath"] for m in c["volumeMounts"]}
    assert mounts == {"/tmp"}, "read-only root: only /tmp is writable"
    env = {e["name"]: e for e in c["env"]}
    assert env["AUTOSCALER_LEADER_ELECTION"]["value"] == "true"
    assert (
        env["AUTOSCALER_API_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "llm-autoscaler-token"
    )
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    settings = Settings(
        http={"port": int(env["AUTOSCALER_HTTP__PORT"]["value"])},
        grpc={"port": int(env["AUTOSCALER_GRPC__PORT"]["value"])},
    )
    assert ports == {"http": settings.http.port, "grpc": settings.grpc.port}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert c["args"] == ["run"]


def test_controller_image_tag_is_the_package_version() -> None:
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    dep = _one(render(DEPLOY / "base"), "Deployment", "llm-autoscaler")
    image = dep["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{version}"), (image, version)


def test_token_secret_is_documented_where_users_install() -> None:
    install = (ROOT / "docs" / "install.md").read_text()
    assert "create secret generic llm-autoscaler-token" in install


# --- KEDA wiring -----------------------------------------------------------------------


def _service_address(objs: list[Obj], port_name: str) -> set[str]:
    out = set()
    for s in (o for o in objs if o["kind"] == "Service"):
        for p in s["spec"]["ports"]:
            if p["name"] == port_name:
                host = f"{s['metadata']['name']}.{s['metadata']['namespace']}.svc.cluster.local"
                out.add(f"{host}:{p['port']}")
    return out


def _llmas_for(scaled: Obj) -> Obj:
    examples = _examples()
    target = scaled["spec"]["scaleTargetRef"]["name"]
    return _one(examples, "LLMAutoscaler", target, scaled["metadata"]["namespace"])


def test_keda_external_push_points_at_the_controller_grpc_service() -> None:
    from autoscaler.keda.value import KEY_TARGET

    objs = render(DEPLOY / "overlays" / "keda")
    (scaled,) = [o for o in objs if o["kind"] == "ScaledObject"]
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "external-push"
    assert trigger["metadata"]["scalerAddress"] in _service_address(objs, "grpc")
    llmas = _llmas_for(scaled)
    assert trigger["metadata"][KEY_TARGET] == llmas["metadata"]["name"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == llmas["spec"]["scaleTargetRef"]["name"]
    assert scaled["spec"]["minReplicaCount"] == llmas["spec"]["minReplicaCount"]
    assert scaled["spec"]["maxReplicaCount"] == llmas["spec"]["maxReplicaCount"]


def test_keda_metrics_api_example_points_at_the_controller_http_endpoint() -> None:
    objs = render(DEPLOY / "overlays" / "keda")
    docs = load_docs(DEPLOY / "overlays" / "keda" / "scaledobject-metrics-api.yaml")
    scaled = _one(docs, "ScaledObject", "vllm-llama3-8b")
    (trigger,) = scaled["spec"]["triggers"]
    assert trigger["type"] == "metrics-api" and trigger["metricType"] == "AverageValue"
    m = re.fullmatch(r"http://([^/]+)/v1/keda/([^/]+)/([^/]+)", trigger["metadata"]["url"])
    assert m, trigger["metadata"]["url"]
    assert m.group(1) in _service_address(objs, "http")
    llmas = _llmas_for(scaled)
    assert (m.group(2), m.group(3)) == (llmas["metadata"]["namespace"], llmas["metadata"]["name"])
    auth = trigger["authenticationRef"]
    _one(docs, auth["kind"], auth["name"])


# --- examples: the seed system -----------------------------------------------------------


def _vllm_deployments() -> list[Obj]:
    return [
        o
        for o in _examples()
        if o["kind"] == "Deployment"
        and any("vllm" in c["image"] for c in o["spec"]["template"]["spec"]["containers"])
    ]


def _args(container: Obj) -> dict[str, str]:
    out = {}
    for a in container.get("args", []):
        name, _, value = a.partition("=")
        out[name] = value
    return out


def _gpu_resources(spec: Obj) -> set[str]:
    names: set[str] = set()
    for c in spec["containers"]:
        names |= {r for r in c["resources"].get("limits", {}) if r.startswith("nvidia.com/")}
    return names


def test_vllm_examples_cover_full_mig_and_shared_gpus_with_recommended_flags() -> None:
    deployments = _vllm_deployments()
    resources = set().union(*(_gpu_resources(pod_spec(d) or {}) for d in deployments))
    assert resources == {"nvidia.com/gpu", "nvidia.com/mig-2g.20gb", "nvidia.com/gpu.shared"}
    for d in deployments:
        spec = d["spec"]["template"]["spec"]
        (c,) = spec["containers"]
        args = _args(c)
        assert {"--enable-chunked-prefill", "--max-num-seqs", "--max-model-len"} <= set(args)
        assert 0 < float(args["--gpu-memory-utilization"]) <= 0.95
        assert c["readinessProbe"]["httpGet"]["path"] == "/health"
        assert c["lifecycle"]["preStop"]["exec"]["command"]
        drain_s = max(int(x) for x in re.findall(r"time\.time\(\) \+ (\d+)", str(c["lifecycle"])))
        assert spec["terminationGracePeriodSeconds"] > drain_s + 5


def test_shared_gpu_instances_fit_together_on_one_gpu() -> None:
    (cfg,) = [
        o
        for o in _examples()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "llm-gpu-sharing"
    ]
    import yaml

    (shared,) = [
        d
        for d in _vllm_deployments()
        if "nvidia.com/gpu.shared" in _gpu_resources(pod_spec(d) or {})
    ]
    util = float(
        _args(shared["spec"]["template"]["spec"]["containers"][0])["--gpu-memory-utilization"]
    )
    for text in cfg["data"].values():
        sharing = yaml.safe_load(text)["sharing"]
        (mode,) = sharing.values()
        assert mode["renameByDefault"] is True  # advertises nvidia.com/gpu.shared
        (res,) = mode["resources"]
        assert res["replicas"] * util <= 0.95, "co-located vLLMs would not fit in memory"


def test_mig_layouts_are_valid_and_the_mig_example_lands_on_one() -> None:
    import yaml

    # (compute slices, memory slices) of A100/H100-80GB MIG profiles.
    profiles = {
        "1g.10gb": (1, 1),
        "2g.20gb": (2, 2),
        "3g.40gb": (3, 4),
        "4g.40gb": (4, 4),
        "7g.80gb": (7, 8),
    }
    cfg = _one(_examples(), "ConfigMap", "llm-mig-config", "gpu-operator")
    layouts = yaml.safe_load(cfg["data"]["config.yaml"])["mig-configs"]
    for name, entries in layouts.items():
        for entry in entries:
            devices = entry.get("mig-devices", {})
            compute = sum(profiles[p][0] * n for p, n in devices.items())
            memory = sum(profiles[p][1] * n for p, n in devices.items())
            assert compute <= 7 and memory <= 8, f"{name}: {compute}/7 SMs, {memory}/8 memory"
    (mig,) = [
        d
        for d in _vllm_deployments()
        if "nvidia.com/mig-2g.20gb" in _gpu_resources(pod_spec(d) or {})
    ]
    layout = mig["spec"]["template"]["spec"]["nodeSelector"]["nvidia.com/mig.config"]
    assert any("2g.20gb" in e.get("mig-devices", {}) for e in layouts[layout])


def test_llmautoscalers_point_at_their_deployment_port_and_gpu_resource() -> None:
    examples = _examples()
    llmas = [o for o in examples if o["kind"] == "LLMAutoscaler"]
    assert llmas
    for a in llmas:
        ns = a["metadata"]["namespace"]
        ref = a["spec"]["scaleTargetRef"]
        target = _one(examples, ref["kind"], ref["name"], ns)
        assert a["spec"]["metricsPort"] in _container_ports(target)
        assert a["spec"]["capacity"]["gpuResource"] in _gpu_resources(
            target["spec"]["template"]["spec"]
        )
        wp = a["spec"]["warmPool"]
        for pc in (wp["priorityClassName"], wp["peakPriorityClassName"]):
            _one(examples, "PriorityClass", pc)


def test_warm_pool_holds_the_same_gpu_on_the_same_nodes_and_is_preempted_first() -> None:
    examples = _examples()
    pool = _one(examples, "Deployment", "llm-warm-pool-nvidia-com-gpu", "llm-serving")
    full = _one(examples, "Deployment", "vllm-llama3-8b", "llm-serving")
    pool_spec, full_spec = pool["spec"]["template"]["spec"], full["spec"]["template"]["spec"]
    assert _gpu_resources(pool_spec) == _gpu_resources(full_spec) == {"nvidia.com/gpu"}
    assert pool_spec["nodeSelector"] == full_spec["nodeSelector"]
    assert pool_spec["tolerations"] == full_spec["tolerations"]
    low = _one(examples, "PriorityClass", pool_spec["priorityClassName"])
    inference = _one(examples, "PriorityClass", full_spec["priorityClassName"])
    assert low["value"] < inference["value"] and low["preemptionPolicy"] == "Never"
    nodepool = _one(examples, "NodePool", "gpu-inference")
    labels = nodepool["spec"]["template"]["metadata"]["labels"]
    assert selects(full_spec["nodeSelector"], labels), "vLLM pods must fit the GPU NodePool"
    taints = {(t["key"], t["effect"]) for t in nodepool["spec"]["template"]["spec"]["taints"]}
    tolerated = {(t["key"], t["effect"]) for t in full_spec["tolerations"]}
    assert taints <= tolerated


def test_vllm_pods_mount_the_node_weight_cache_read_only() -> None:
    examples = _examples()
    cache = _one(examples, "DaemonSet", "model-weight-cache", "llm-serving")
    cache_spec = cache["spec"]["template"]["spec"]
    (cache_vol,) = [v for v in cache_spec["volumes"] if v["name"] == "cache"]
    cache_cfg = _one(examples, "ConfigMap", "model-weight-cache", "llm-serving")
    cached_dirs = {line.split()[1] for line in cache_cfg["data"]["models.txt"].splitlines() if line}
    for d in _vllm_deployments():
        spec = d["spec"]["template"]["spec"]
        (vol,) = [v for v in spec["volumes"] if v["name"] == "model-weights"]
        assert vol["hostPath"]["path"] == cache_vol["hostPath"]["path"]
        mounts = [
            m
            for c in _containers(spec)
            for m in c.get("volumeMounts", [])
            if m["name"] == "model-weights"
        ]
        assert mounts and all(m["readOnly"] is True for m in mounts)
        model = _args(spec["containers"][0])["--model"]
        mount = mounts[0]["mountPath"]
        assert model.startswith(mount + "/") and model[len(mount) + 1 :] in cached_dirs


def _selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels + matchExpressions) against a pod's labels."""
    ok = all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())
    for e in selector.get("matchExpressions", []):
        op, present = e["operator"], e["key"] in labels
        if op == "Exists":
            ok = ok and present
        elif op == "DoesNotExist":
            ok = ok and not present
        elif op == "In":
            ok = ok and labels.get(e["key"]) in e["values"]
        else:  # NotIn
            ok = ok and labels.get(e["key"]) not in e["values"]
    return ok


def test_podmonitor_scrapes_every_autoscaled_vllm_pod_and_no_warm_pool_pod() -> None:
    objs = _examples()
    (pm,) = [o for o in objs if o["kind"] == "PodMonitor"]
    ns = pm["metadata"]["namespace"]
    workloads = {
        o["metadata"]["name"]: o
        for o in objs
        if pod_spec(o) is not None and o["metadata"].get("namespace") == ns
    }
    targets = [o for o in objs if o["kind"] == "LLMAutoscaler"]
    assert len(targets) == 3  # full GPU, MIG, shared
    for llmas in targets:
        assert llmas["metadata"]["namespace"] == ns
        workload = workloads[llmas["spec"]["scaleTargetRef"]["name"]]
        assert _selector_matches(pm["spec"]["selector"], pod_labels(workload)), key(workload)
        for ep in pm["spec"]["podMetricsEndpoints"]:
            assert ep["port"] in _container_ports(workload)
            assert ep["path"] == llmas["spec"].get("metricsPath", "/metrics")
    scaled = {t["spec"]["scaleTargetRef"]["name"] for t in targets}
    for name, workload in workloads.items():
        if name not in scaled:  # warm-pool placeholders serve no metrics
            assert not _selector_matches(pm["spec"]["selector"], pod_labels(workload)), name
