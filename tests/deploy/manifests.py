"""Loading and rendering of `deploy/` for the tests: YAML files, a minimal kustomize, schemas.

The kustomize subset is deliberately tiny: our kustomizations list ``resources`` (files in
the same directory, or other kustomization directories), may list ``components`` (directories
holding a ``kind: Component`` that only adds resources, as ``deploy/prometheus``) and may set
``replicas`` (kustomize's replica-count field: ``[{name, count}]`` on the workloads of that
name; not a patch). Any other key makes `render` fail loudly, so the tests can never silently
diverge from ``kubectl apply -k``.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import kubernetes_validate  # type: ignore[import-untyped]
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
UPSTREAM_CRDS = ROOT / "tests" / "fixtures" / "crds"  # other projects' CRDs, verbatim
# Overlays that install on a bare cluster (no Prometheus Operator CRDs) ...
OVERLAYS = ("direct", "keda", "advisory", "sharded")
# ... and the one that adds the deploy/prometheus component (needs monitoring.coreos.com).
MONITORED_OVERLAYS = ("direct-prometheus",)
OVERLAY_MODE = {
    "direct": "direct",
    "keda": "keda",
    "advisory": "advisory",
    "sharded": "direct",
    "direct-prometheus": "direct",
}
MONITORING_KINDS = frozenset({"ServiceMonitor", "PrometheusRule", "PodMonitor"})
K8S_VERSION = "1.30.0"  # newest schema kubernetes-validate checks against (docs/install.md)

Obj = dict[str, Any]


class KustomizeError(ValueError):
    """A kustomization uses something this loader (and our rule: no patches) does not."""


def load_docs(path: Path) -> list[Obj]:
    """Every non-empty YAML document of a file."""
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d]


def manifest_files() -> list[Path]:
    """All Kubernetes manifests under deploy/ (kustomization files excluded)."""
    return sorted(
        p
        for p in DEPLOY.rglob("*.yaml")
        if p.name != "kustomization.yaml" and p.parent.name != "grafana"
    )


def all_objects() -> Iterator[tuple[Path, Obj]]:
    for path in manifest_files():
        for doc in load_docs(path):
            yield path, doc


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj.get("metadata", {})
    return obj["kind"], meta.get("namespace", ""), meta["name"]


def render(directory: Path, *, kind: str = "Kustomization") -> list[Obj]:
    """Objects ``kubectl kustomize <directory>`` would produce for our kustomizations."""
    kfile = directory / "kustomization.yaml"
    if not kfile.is_file():
        raise KustomizeError(f"{directory}: no kustomization.yaml")
    spec = yaml.safe_load(kfile.read_text())
    unsupported = set(spec) - {"apiVersion", "kind", "resources", "components", "replicas"}
    if unsupported:
        raise KustomizeError(f"{kfile}: unsupported keys {sorted(unsupported)} (no patches)")
    if spec.get("kind") != kind:
        raise KustomizeError(f"{kfile}: kind must be {kind}")
    api_version = "v1alpha1" if kind == "Component" else "v1beta1"
    if spec.get("apiVersion", f"kustomize.config.k8s.io/{api_version}") != (
        f"kustomize.config.k8s.io/{api_version}"
    ):
        raise KustomizeError(f"{kfile}: apiVersion must be kustomize.config.k8s.io/{api_version}")
    if kind == "Component" and ("components" in spec or "replicas" in spec):
        raise KustomizeError(f"{kfile}: our components only add resources")
    out: list[Obj] = []
    for entry in spec.get("resources", []):
        target = (directory / entry).resolve()
        if target.is_dir():
            out.extend(render(target))
        elif target.is_file():
            # kustomize's load restrictor: files must be inside the kustomization's root.
            if directory.resolve() not in target.parents:
                raise KustomizeError(f"{kfile}: file {entry} is outside {directory}")
            out.extend(load_docs(target))
        else:
            raise KustomizeError(f"{kfile}: resource {entry} does not exist")
    for entry in spec.get("components") or []:
        target = (directory / entry).resolve()
        if not target.is_dir():
            raise KustomizeError(f"{kfile}: component {entry} is not a directory")
        out.extend(render(target, kind="Component"))
    for entry in spec.get("replicas") or []:
        hits = [
            o
            for o in out
            if o["kind"] in {"Deployment", "StatefulSet", "ReplicaSet"}
            and o["metadata"]["name"] == entry["name"]
        ]
        if not hits or not isinstance(entry.get("count"), int):
            raise KustomizeError(f"{kfile}: replicas {entry}: no such workload, or no count")
        for o in hits:
            o["spec"]["replicas"] = entry["count"]
    seen: set[tuple[str, str, str]] = set()
    for obj in out:
        if key(obj) in seen:
            raise KustomizeError(f"{kfile}: duplicate {key(obj)}")
        seen.add(key(obj))
    return out


def pod_spec(obj: Obj) -> Obj | None:
    if obj["kind"] in {"Deployment", "DaemonSet", "StatefulSet", "Job"}:
        spec: Obj = obj["spec"]["template"]["spec"]
        return spec
    return None


def pod_labels(obj: Obj) -> dict[str, str]:
    labels: dict[str, str] = obj["spec"]["template"]["metadata"].get("labels", {})
    return labels


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def load_script(name: str) -> ModuleType:
    """Import ``scripts/<name>.py`` (scripts/ is not a package)."""
    path = ROOT / "scripts" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# --- schemas -------------------------------------------------------------------------


def openapi_to_jsonschema(node: Any) -> Any:
    """A CRD's OpenAPI v3 (structural) schema as JSON Schema draft 4, with kubectl's
    strict field validation: unknown fields in an object with ``properties`` are errors."""
    if isinstance(node, list):
        return [openapi_to_jsonschema(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: openapi_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kub")}
    if out.pop("nullable", False):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    if "properties" in node and "additionalProperties" not in node:
        out["additionalProperties"] = False
    return out


def crd_validator(crd: Obj) -> jsonschema.protocols.Validator:
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return jsonschema.Draft4Validator(openapi_to_jsonschema(schema))


def _obj(props: Obj, required: tuple[str, ...] = ()) -> Obj:
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


_STR = {"type": "string"}
_INT = {"type": "integer"}
_STR_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
_ANY_OBJ = {"type": "object"}
_META = {"type": "object", "required": ["name"]}

# Subsets of the third-party CRDs' schemas, for the fields these manifests use (closed:
# a misspelt field fails). Sources: KEDA v2.16 keda.sh_scaledobjects.yaml, Prometheus
# Operator v0.76 monitoring.coreos.com CRDs, Karpenter v1.0 karpenter.sh_nodepools.yaml.
THIRD_PARTY_SCHEMAS: dict[tuple[str, str], Obj] = {
    ("keda.sh/v1alpha1", "ScaledObject"): _obj(
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": _obj(
                {
                    "scaleTargetRef": _obj(
                        {"apiVersion": _STR, "kind": _STR, "name": _STR}, ("name",)
                    ),
                    "minReplicaCount": {"type": "integer", "minimum": 0},
                    "maxReplicaCount": {"type": "integer", "minimum": 1},
                    "idleReplicaCount": _INT,
                    "pollingInterval": _INT,
                    "cooldownPeriod": _INT,
                    "initialCooldownPeriod": _INT,
                    "fallback": _obj({"failureThreshold": _INT, "replicas": _INT}),
                    "advanced": _obj(
                        {
                            "restoreToOriginalReplicaCount": {"type": "boolean"},
                            "horizontalPodAutoscalerConfig": _obj(
                                {"name": _STR, "behavior": _ANY_OBJ}
                            ),
                        }
                    ),
                    "triggers": {
                        "type": "array",
                        "minItems": 1,
                        "items": _obj(
                            {
                                "type": _STR,
                                "name": _STR,
                                "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
                                "useCachedMetrics": {"type": "boolean"},
                                "metadata": _STR_MAP,
                                "authenticationRef": _obj(
                                    {
                                        "name": _STR,
                                        "kind": {
                                            "enum": [
                                                "TriggerAuthentication",
                                                "ClusterTriggerAuthentication",
                                            ]
                                        },
                                    },
                                    ("name",),
                                ),
                            },
                            ("type", "metadata"),
                        ),
                    },
                },
                ("scaleTargetRef", "triggers"),
            ),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
    ("keda.sh/v1alpha1", "ClusterTriggerAuthentication"): _obj(
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": _obj(
                {
                    "secretTargetRef": {
                        "type": "array",
                        "items": _obj(
                            {"parameter": _STR, "name": _STR, "key": _STR},
                            ("parameter", "name", "key"),
                        ),
                    }
                }
            ),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
    ("monitoring.coreos.com/v1", "ServiceMonitor"): _obj(
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": _obj(
                {
                    "jobLabel": _STR,
                    "namespaceSelector": _obj(
                        {"any": {"type": "boolean"}, "matchNames": {"type": "array"}}
                    ),
                    "selector": _obj({"matchLabels": _STR_MAP}),
                    "endpoints": {
                        "type": "array",
                        "items": _obj(
                            {
                                "port": _STR,
                                "path": _STR,
                                "scheme": {"enum": ["http", "https"]},
                                "interval": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                                "scrapeTimeout": {"type": "string", "pattern": "^[0-9]+[smh]$"},
                            }
                        ),
                    },
                },
                ("selector",),
            ),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
    ("monitoring.coreos.com/v1", "PrometheusRule"): _obj(
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": _obj(
                {
                    "groups": {
                        "type": "array",
                        "items": _obj(
                            {
                                "name": _STR,
                                "interval": _STR,
                                "rules": {
                                    "type": "array",
                                    "items": _obj(
                                        {
                                            "alert": _STR,
                                            "record": _STR,
                                            "expr": _STR,
                                            "for": {
                                                "type": "string",
                                                "pattern": "^[0-9]+[smhd]$",
                                            },
                                            "labels": _STR_MAP,
                                            "annotations": _STR_MAP,
                                        },
                                        ("expr",),
                                    ),
                                },
                            },
                            ("name", "rules"),
                        ),
                    }
                }
            ),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
    ("karpenter.sh/v1", "NodePool"): _obj(
        {
            "apiVersion": _STR,
            "kind": _STR,
            "metadata": _META,
            "spec": _obj(
                {
                    "weight": _INT,
                    "limits": _STR_MAP,
                    "disruption": _obj(
                        {
                            "consolidationPolicy": {
                                "enum": ["WhenEmpty", "WhenEmptyOrUnderutilized"]
                            },
                            "consolidateAfter": _STR,
                            "budgets": {"type": "array", "items": _ANY_OBJ},
                        }
                    ),
                    "template": _obj(
                        {
                            "metadata": _obj({"labels": _STR_MAP, "annotations": _STR_MAP}),
                            "spec": _obj(
                                {
                                    "nodeClassRef": _obj(
                                        {"group": _STR, "kind": _STR, "name": _STR},
                                        ("group", "kind", "name"),
                                    ),
                                    "requirements": {
                                        "type": "array",
                                        "items": _obj(
                                            {
                                                "key": _STR,
                                                "operator": {
                                                    "enum": [
                                                        "In",
                                                        "NotIn",
                                                        "Exists",
                                                        "DoesNotExist",
                                                        "Gt",
                                                        "Lt",
                                                    ]
                                                },
                                                "values": {"type": "array", "items": _STR},
                                                "minValues": _INT,
                                            },
                                            ("key", "operator"),
                                        ),
                                    },
                                    "taints": {"type": "array", "items": _ANY_OBJ},
                                    "startupTaints": {"type": "array", "items": _ANY_OBJ},
                                    "expireAfter": _STR,
                                    "terminationGracePeriod": _STR,
                                },
                                ("nodeClassRef", "requirements"),
                            ),
                        },
                        ("spec",),
                    ),
                },
                ("template",),
            ),
        },
        ("apiVersion", "kind", "metadata", "spec"),
    ),
}


@functools.cache
def upstream_crds() -> dict[tuple[str, str], Obj]:
    """(apiVersion, kind) -> CRD for every served version of the CRDs under tests/fixtures."""
    out: dict[tuple[str, str], Obj] = {}
    for path in sorted(UPSTREAM_CRDS.glob("*.yaml")):
        for crd in load_docs(path):
            for version in crd["spec"]["versions"]:
                one = copy.deepcopy(crd)
                one["spec"]["versions"] = [version]
                out[(f"{crd['spec']['group']}/{version['name']}", crd["spec"]["names"]["kind"])] = (
                    one
                )
    return out


def _upstream_errors(obj: Obj) -> list[str]:
    crd = upstream_crds().get((obj["apiVersion"], obj["kind"]))
    if crd is None:
        return []
    v = crd_validator(crd)
    return [f"{'.'.join(map(str, e.path))}: {e.message} (upstream CRD)" for e in v.iter_errors(obj)]


def validate_object(obj: Obj, own_crds: dict[tuple[str, str], Obj]) -> list[str]:
    """Schema errors of one object: built-in kinds with kubernetes-validate (strict),
    our CRD's kind with its generated schema, third-party kinds with the subsets above
    and with their upstream CRD (tests/fixtures/crds) when it is there.
    kubernetes-validate raises SchemaNotFoundError for kinds it does not know, so an
    unknown kind with no schema here is an error too, never a silent pass."""
    kind_key = (obj["apiVersion"], obj["kind"])
    if kind_key in own_crds:
        v = crd_validator(own_crds[kind_key])
        return [f"{'.'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(obj)]
    if kind_key in THIRD_PARTY_SCHEMAS:
        v = jsonschema.Draft7Validator(THIRD_PARTY_SCHEMAS[kind_key])
        errors = [f"{'.'.join(map(str, e.path))}: {e.message}" for e in v.iter_errors(obj)]
        if obj["kind"] == "ScaledObject":
            errors += _validate_keda_hpa_behavior(obj)
        return errors + _upstream_errors(obj)
    if (obj["apiVersion"], obj["kind"]) in upstream_crds():
        return _upstream_errors(obj)
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [e.message]
    return []


def _validate_keda_hpa_behavior(obj: Obj) -> list[str]:
    """KEDA passes ``advanced.horizontalPodAutoscalerConfig.behavior`` to the HPA verbatim:
    validate it as an autoscaling/v2 HPA's behavior."""
    cfg = obj["spec"].get("advanced", {}).get("horizontalPodAutoscalerConfig", {})
    if "behavior" not in cfg:
        return []
    hpa = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": obj["metadata"]["name"]},
        "spec": {
            "scaleTargetRef": copy.deepcopy(obj["spec"]["scaleTargetRef"]),
            "maxReplicas": obj["spec"].get("maxReplicaCount", 100),
            "behavior": cfg["behavior"],
        },
    }
    try:
        kubernetes_validate.validate(hpa, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"advanced.horizontalPodAutoscalerConfig.{'.'.join(map(str, e.path))}: {e.message}"]
    return []
