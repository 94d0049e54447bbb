"""The domain's target: `TargetSpec` (one LLMAutoscaler: policy + where and how to act)
and its two encodings, the REST/file document (`target_spec_to_dict`,
`target_spec_from_dict`) and the LLMAutoscaler custom resource (`spec_to_object`,
`object_to_spec`).

Below the metrics, kube and store layers, which all use it and no longer import each
other for it. Both encodings carry the policy document (camelCase: ``profile`` and the
fields set over it, `autoscaler.policy.document`) plus ``scaleTargetRef``, ``mode``,
``metricsPort``, ``metricsPath``, ``engine`` and an optional ``selector``; the document is
written back as the user wrote it, never the effective policy (a profile's values stay the
profile's). An invalid target is rejected whole with every problem named.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal, cast, get_args

from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.names import (
    CRD_GROUP,
    CRD_KIND,
    CRD_VERSION,
    ENGINE_NAMES,
    OBJECT_NAME_PATTERN,
    match_labels_problems,
    metrics_path_problem,
)
from autoscaler.policy.document import (
    DEFAULT_PROFILE,
    PolicySource,
    document_of,
    effective,
    load_source,
    policy_hash,
)
from autoscaler.policy.schema import Policy
from autoscaler.policy.status import Pause, PolicyStatus, parse_pause, policy_status

Mode = Literal["direct", "keda", "advisory"]


@dataclass(frozen=True, slots=True)
class ScaleTargetRef:
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    name: str = ""
    api_version: str = "apps/v1"


# ------------------------------------------------------------ GPU variants (issue 37)


Role = Literal["prefill", "decode"]
ROLES: Final[tuple[Role, ...]] = ("prefill", "decode")


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """One Deployment of the target's model (a GPU type, a MIG slice ...). The controller
    decides the model's replicas once from all variants' pods and splits them over the
    variants (`autoscaler.policy.variants.plan_replicas`, docs/policy.md "Variants")."""

    name: str
    scale_target_ref: ScaleTargetRef
    cost_per_replica_hour: float  # relative: a GPU-hour price or a slice's share
    capacity_per_replica: float | None = None  # None: 1 (the reference) until learned
    min_replicas: int = 0
    max_replicas: int | None = None
    max_model_len: int | None = None
    # prefill/decode disaggregation: the role this Deployment plays (None: serves both)
    role: Role | None = None


@dataclass(frozen=True, slots=True)
class RolesSpec:
    """Per-replica targets of a target whose variants carry roles (docs/policy.md
    "Prefill/decode roles"): prefill sized by the prompt-token rate, decode by running
    requests and KV usage, each pushed one replica up while its latency is over its SLO;
    ``ratio_band``: prefill replicas per decode replica (min, max), raising the lagging
    role only."""

    prompt_tokens_per_s_per_prefill: float
    running_per_decode: float
    kv_usage_target: float = 0.8
    ttft_slo_s: float | None = None
    itl_slo_s: float | None = None
    ratio_band: tuple[float, float] | None = None


@dataclass(frozen=True, slots=True)
class TargetSpec:
    """One autoscaled target: the LLMAutoscaler spec (policy + where and how to act)."""

    ref: TargetRef
    policy: Policy
    scale_target_ref: ScaleTargetRef = field(default_factory=ScaleTargetRef)
    mode: Mode = "direct"
    metrics_port: int = 8000
    metrics_path: str = "/metrics"
    engine: str = "auto"
    selector: dict[str, str] | None = None  # None: the scale target's own selector
    # The autoscaling.llmscaler.io/paused(-replicas) annotation (policy/status.py): no
    # writes, or one to the paused count.
    pause: Pause | None = None
    variants: tuple[VariantSpec, ...] = ()  # issue 37; empty: one Deployment
    roles: RolesSpec | None = None  # set iff the variants carry roles (prefill, decode)
    # The policy document as the user wrote it (profile + overrides), when the spec was
    # read from one; what the stores write back. Not part of equality: ``policy`` is what
    # the target runs.
    policy_source: PolicySource | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_source(cls, ref: TargetRef, source: PolicySource, **fields: Any) -> TargetSpec:
        return cls(ref=ref, policy=source.policy, policy_source=source, **fields)

    def _source(self) -> PolicySource | None:
        """The source, if it is still the source of ``policy`` (``dataclasses.replace``
        with a new policy keeps the old source: then it is not)."""
        src = self.policy_source
        return src if src is not None and src.policy is self.policy else None

    def policy_document(self) -> dict[str, Any]:
        """The document to store: as written, or (a policy built in code) every field."""
        src = self._source()
        return dict(src.document) if src is not None else document_of(self.policy)

    @property
    def profile(self) -> str:
        src = self._source()
        return src.profile if src is not None else DEFAULT_PROFILE

    def effective_policy(self) -> dict[str, Any]:
        """The profile's name and the effective policy (read-only view)."""
        return effective(self.policy, self.profile)

    def policy_status(self) -> PolicyStatus:
        """The profile in use, the effective policy's hash and the fields that hold an old
        CRD default over the profile's value (what the status reports; costs a hash of the
        policy: callers on the tick path keep it per spec)."""
        src = self._source()
        return policy_status(
            self.profile, policy_hash(self.policy), src.document if src is not None else None
        )


# ------------------------------------------------------------ REST API and policy file

_DOC_MODES: Final[tuple[str, ...]] = get_args(Mode)
_KINDS: Final[tuple[str, ...]] = ("Deployment", "StatefulSet")
_SPEC_KEYS: Final[frozenset[str]] = frozenset(
    {
        "namespace",
        "name",
        "version",
        "mode",
        "scaleTargetRef",
        "metricsPort",
        "metricsPath",
        "engine",
        "selector",
        "policy",
        "variants",
        "roles",
    }
)


def target_spec_to_dict(spec: TargetSpec) -> dict[str, Any]:
    """camelCase, JSON-ready document of a target (the shape of the REST API and the file)."""
    doc: dict[str, Any] = {
        "namespace": spec.ref.namespace,
        "name": spec.ref.name,
        "mode": spec.mode,
        "scaleTargetRef": {
            "kind": spec.scale_target_ref.kind,
            "name": spec.scale_target_ref.name or spec.ref.name,
            "apiVersion": spec.scale_target_ref.api_version,
        },
        "metricsPort": spec.metrics_port,
        "metricsPath": spec.metrics_path,
        "engine": spec.engine,
        "policy": spec.policy_document(),
    }
    if spec.selector is not None:
        doc["selector"] = dict(spec.selector)
    if spec.variants:
        doc["variants"] = variants_to_list(spec.variants)
    if spec.roles is not None:
        doc["roles"] = roles_to_dict(spec.roles)
    return doc


_OBJECT_NAME = re.compile(OBJECT_NAME_PATTERN[1:-1])


def _is_dns_label(s: str) -> bool:
    """Kubernetes object-name rule (RFC 1123 subdomain: ASCII lowercase labels and dots),
    as the CRD's pattern for scaleTargetRef.name."""
    return (
        1 <= len(s) <= 253
        and all(len(part) <= 63 for part in s.split("."))
        and _OBJECT_NAME.fullmatch(s) is not None
    )


def target_spec_from_dict(doc: Mapping[str, Any], *, ref: TargetRef | None = None) -> TargetSpec:
    """Validate a target document whole; `ConfigError.problems` names field, value, rule.

    With ``ref`` (from a URL), ``namespace``/``name`` in the body may be omitted but must
    match when present.
    """
    problems: list[str] = []
    if not isinstance(doc, Mapping):
        raise ConfigError("invalid target", [f"body: must be an object (value {doc!r})"])
    for key in doc:
        if key == "effectivePolicy":
            problems.append(
                "effectivePolicy: read-only (what `policy` resolves to with its profile); "
                "write `policy` instead"
            )
        elif key not in _SPEC_KEYS:
            problems.append(f"{key}: unknown field (allowed: {', '.join(sorted(_SPEC_KEYS))})")

    def ident(field_name: str, from_ref: str | None) -> str:
        value = doc.get(field_name, from_ref)
        if from_ref is not None and value != from_ref:
            problems.append(f"{field_name}: value {value!r} does not match the URL ({from_ref!r})")
            return from_ref
        if not isinstance(value, str) or not _is_dns_label(value):
            problems.append(
                f"{field_name}: value {value!r} must be a Kubernetes name "
                "(lowercase alphanumerics, '-' and '.', 1-253 characters)"
            )
            return "invalid"
        return value

    namespace = ident("namespace", ref.namespace if ref else None)
    name = ident("name", ref.name if ref else None)

    mode = doc.get("mode", "direct")
    if mode not in _DOC_MODES:
        problems.append(f"mode: value {mode!r} must be one of {', '.join(_DOC_MODES)}")
        mode = "direct"

    str_ref = doc.get("scaleTargetRef") or {}
    if not isinstance(str_ref, Mapping):
        problems.append(f"scaleTargetRef: value {str_ref!r} must be an object")
        str_ref = {}
    for key in str_ref:
        if key not in ("kind", "name", "apiVersion"):
            problems.append(
                f"scaleTargetRef.{key}: unknown field (allowed: kind, name, apiVersion)"
            )
    kind = str_ref.get("kind", "Deployment")
    if kind not in _KINDS:
        problems.append(f"scaleTargetRef.kind: value {kind!r} must be one of {', '.join(_KINDS)}")
        kind = "Deployment"
    target_name = str_ref.get("name", name)
    if not isinstance(target_name, str) or not _is_dns_label(target_name):
        problems.append(f"scaleTargetRef.name: value {target_name!r} must be a Kubernetes name")
        target_name = name
    api_version = str_ref.get("apiVersion", "apps/v1")
    if not isinstance(api_version, str) or not api_version:
        problems.append(f"scaleTargetRef.apiVersion: value {api_version!r} must be a string")
        api_version = "apps/v1"

    port = doc.get("metricsPort", 8000)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(f"metricsPort: value {port!r} must be an integer in 1..65535")
        port = 8000
    path = doc.get("metricsPath", "/metrics")
    if (why := metrics_path_problem(path)) is not None:
        problems.append(f"metricsPath: value {path!r} {why}")
        path = "/metrics"
    engine = doc.get("engine", "auto")
    if engine not in ENGINE_NAMES:
        problems.append(f"engine: value {engine!r} must be one of {', '.join(ENGINE_NAMES)}")
        engine = "auto"
    selector = doc.get("selector")
    if selector is not None and not isinstance(selector, Mapping):
        problems.append(f"selector: value {selector!r} must map label names to strings")
        selector = None
    elif selector is not None and not selector:
        problems.append(
            "selector: value {} must name at least one label (omit it to scrape the scale "
            "target's own pods)"
        )
        selector = None
    elif selector is not None and (bad := match_labels_problems(selector, "selector")):
        problems.extend(bad)
        selector = None

    variants = parse_variants(doc.get("variants"), "variants", problems)
    roles = parse_roles(doc.get("roles"), "roles", doc.get("variants"), "variants", problems)

    policy_doc = doc.get("policy", {})
    source: PolicySource | None = None
    if not isinstance(policy_doc, Mapping):
        problems.append(f"policy: value {policy_doc!r} must be an object")
    else:
        try:
            source = load_source(policy_doc)
        except ConfigError as err:
            problems.extend(f"policy.{p}" for p in err.problems)

    if problems or source is None:
        raise ConfigError("invalid target", problems)
    return TargetSpec.from_source(
        TargetRef(namespace=namespace, name=name),
        source,
        scale_target_ref=ScaleTargetRef(kind=kind, name=target_name, api_version=api_version),
        mode=mode,
        metrics_port=port,
        metrics_path=path,
        engine=engine,
        selector=dict(selector) if selector is not None else None,
        variants=variants,
        roles=roles,
    )


# ------------------------------------------------------------ LLMAutoscaler custom resource

API_VERSION = f"{CRD_GROUP}/{CRD_VERSION}"
_TARGET_KEYS = frozenset(
    {
        "scaleTargetRef",
        "mode",
        "metricsPort",
        "metricsPath",
        "engine",
        "selector",
        "variants",
        "roles",
    }
)
_MODES = ("direct", "keda", "advisory")


def spec_to_object(spec: TargetSpec) -> dict[str, Any]:
    body: dict[str, Any] = spec.policy_document()
    body["scaleTargetRef"] = {
        "apiVersion": spec.scale_target_ref.api_version,
        "kind": spec.scale_target_ref.kind,
        "name": spec.scale_target_ref.name,
    }
    body["mode"] = spec.mode
    body["metricsPort"] = spec.metrics_port
    body["metricsPath"] = spec.metrics_path
    body["engine"] = spec.engine
    if spec.selector is not None:
        body["selector"] = {"matchLabels": dict(spec.selector)}
    if spec.variants:
        body["variants"] = variants_to_list(spec.variants)
    if spec.roles is not None:
        body["roles"] = roles_to_dict(spec.roles)
    return {
        "apiVersion": API_VERSION,
        "kind": CRD_KIND,
        "metadata": {"name": spec.ref.name, "namespace": spec.ref.namespace},
        "spec": body,
    }


def object_to_spec(obj: Mapping[str, Any]) -> TargetSpec:
    """Validate one LLMAutoscaler object; `ConfigError` names object, field, value, rule."""
    meta = obj.get("metadata") or {}
    ref = TargetRef(namespace=str(meta.get("namespace", "")), name=str(meta.get("name", "")))
    raw = dict(obj.get("spec") or {})
    problems: list[str] = []
    str_ref = raw.get("scaleTargetRef") or {}
    kind = str_ref.get("kind", "Deployment")
    if kind not in ("Deployment", "StatefulSet"):
        problems.append(
            f"spec.scaleTargetRef.kind: value {kind!r} must be Deployment or StatefulSet"
        )
    if not str_ref.get("name"):
        problems.append("spec.scaleTargetRef.name: required, the Deployment/StatefulSet name")
    mode = raw.get("mode", "direct")
    if mode not in _MODES:
        problems.append(f"spec.mode: value {mode!r} must be one of {', '.join(_MODES)}")
    port = raw.get("metricsPort", 8000)
    if not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(f"spec.metricsPort: value {port!r} must be an integer in 1..65535")
    path = raw.get("metricsPath", "/metrics")
    if (why := metrics_path_problem(path)) is not None:
        problems.append(f"spec.metricsPath: value {path!r} {why}")
    selector = raw.get("selector")
    labels: dict[str, str] | None = None
    if selector is not None:
        ml = selector.get("matchLabels") if isinstance(selector, dict) else None
        if not isinstance(ml, dict) or not ml:
            problems.append("spec.selector.matchLabels: must be a non-empty map when set")
        elif bad := match_labels_problems(ml, "spec.selector.matchLabels"):
            problems.extend(bad)
        else:
            labels = {str(k): str(v) for k, v in ml.items()}
    pause, pause_problems = parse_pause(meta.get("annotations") or {})
    problems.extend(pause_problems)
    variants = parse_variants(raw.get("variants"), "spec.variants", problems)
    roles = parse_roles(
        raw.get("roles"), "spec.roles", raw.get("variants"), "spec.variants", problems
    )
    policy_doc = {k: v for k, v in raw.items() if k not in _TARGET_KEYS}
    source: PolicySource | None = None
    try:
        source = load_source(policy_doc)
    except ConfigError as err:
        problems.extend(f"spec.{p}" for p in err.problems)
    if problems or source is None:
        raise ConfigError(f"{CRD_KIND} {ref}", problems)
    return TargetSpec.from_source(
        ref,
        source,
        scale_target_ref=ScaleTargetRef(
            kind=kind,
            name=str(str_ref["name"]),
            api_version=str(str_ref.get("apiVersion", "apps/v1")),
        ),
        mode=cast(Mode, mode),
        metrics_port=port,
        metrics_path=path,
        engine=str(raw.get("engine", "auto")),
        selector=labels,
        pause=pause,
        variants=variants,
        roles=roles,
    )


# ------------------------------------------------------------ GPU variants (issue 37)

_VARIANT_KEYS: Final[tuple[str, ...]] = (
    "name",
    "scaleTargetRef",
    "costPerReplicaHour",
    "capacityPerReplica",
    "minReplicas",
    "maxReplicas",
    "maxModelLen",
    "role",
)
MAX_VARIANTS: Final[int] = 16


def variants_to_list(variants: tuple[VariantSpec, ...]) -> list[dict[str, Any]]:
    """camelCase list of the variants (the REST document's and the CRD's shape)."""
    out: list[dict[str, Any]] = []
    for v in variants:
        item: dict[str, Any] = {
            "name": v.name,
            "scaleTargetRef": {
                "apiVersion": v.scale_target_ref.api_version,
                "kind": v.scale_target_ref.kind,
                "name": v.scale_target_ref.name,
            },
            "costPerReplicaHour": v.cost_per_replica_hour,
        }
        if v.capacity_per_replica is not None:
            item["capacityPerReplica"] = v.capacity_per_replica
        item["minReplicas"] = v.min_replicas
        if v.max_replicas is not None:
            item["maxReplicas"] = v.max_replicas
        if v.max_model_len is not None:
            item["maxModelLen"] = v.max_model_len
        if v.role is not None:
            item["role"] = v.role
        out.append(item)
    return out


def _positive_number(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and value == value  # not NaN
        and 0 < value < float("inf")
    )


def _count(value: Any, low: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


def parse_variants(raw: Any, where: str, problems: list[str]) -> tuple[VariantSpec, ...]:
    """The ``variants`` list of a target (absent: none); each problem names the field
    (``where[i].field``), the value and the rule, appended to ``problems``."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.append(f"{where}: value {raw!r} must be a list of variants")
        return ()
    if len(raw) > MAX_VARIANTS:
        problems.append(f"{where}: {len(raw)} variants, at most {MAX_VARIANTS} allowed")
        return ()
    out: list[VariantSpec] = []
    names: set[str] = set()
    targets: set[tuple[str, str]] = set()
    for i, item in enumerate(raw):
        at = f"{where}[{i}]"
        if not isinstance(item, Mapping):
            problems.append(f"{at}: value {item!r} must be an object")
            continue
        before = len(problems)
        for key in item:
            if key not in _VARIANT_KEYS:
                problems.append(f"{at}.{key}: unknown field (allowed: {', '.join(_VARIANT_KEYS)})")
        name = item.get("name")
        if not isinstance(name, str) or not _is_dns_label(name) or len(name) > 63 or "." in name:
            problems.append(
                f"{at}.name: value {name!r} must be a DNS label (lowercase alphanumerics and"
                " '-', 1-63 characters)"
            )
        elif name in names:
            problems.append(f"{at}.name: value {name!r} must be unique among the variants")
        else:
            names.add(name)
        ref = item.get("scaleTargetRef")
        str_ref = ScaleTargetRef()
        if not isinstance(ref, Mapping):
            problems.append(f"{at}.scaleTargetRef: value {ref!r} must be an object with a name")
        else:
            for key in ref:
                if key not in ("kind", "name", "apiVersion"):
                    problems.append(
                        f"{at}.scaleTargetRef.{key}: unknown field (allowed: kind, name, "
                        "apiVersion)"
                    )
            kind = ref.get("kind", "Deployment")
            target = ref.get("name")
            api_version = ref.get("apiVersion", "apps/v1")
            if kind not in _KINDS:
                problems.append(
                    f"{at}.scaleTargetRef.kind: value {kind!r} must be one of {', '.join(_KINDS)}"
                )
            if not isinstance(target, str) or not _is_dns_label(target):
                problems.append(
                    f"{at}.scaleTargetRef.name: value {target!r} must be a Kubernetes name"
                )
            elif (kind, target) in targets:
                problems.append(
                    f"{at}.scaleTargetRef.name: value {target!r} is another variant's target"
                    " (one Deployment per variant)"
                )
            else:
                targets.add((kind, target))
            if not isinstance(api_version, str) or not api_version:
                problems.append(
                    f"{at}.scaleTargetRef.apiVersion: value {api_version!r} must be a "
                    "non-empty string"
                )
            if len(problems) == before:
                str_ref = ScaleTargetRef(kind=kind, name=str(target), api_version=api_version)
        cost = item.get("costPerReplicaHour")
        if not _positive_number(cost):
            problems.append(
                f"{at}.costPerReplicaHour: value {cost!r} must be a number > 0 (a GPU-hour "
                "price, or a slice's share of one)"
            )
        capacity = item.get("capacityPerReplica")
        if capacity is not None and not _positive_number(capacity):
            problems.append(
                f"{at}.capacityPerReplica: value {capacity!r} must be a number > 0 (omit it"
                " to learn it)"
            )
        low = item.get("minReplicas", 0)
        if not _count(low, 0):
            problems.append(f"{at}.minReplicas: value {low!r} must be an integer >= 0")
        high = item.get("maxReplicas")
        if high is not None and not _count(high, 0):
            problems.append(f"{at}.maxReplicas: value {high!r} must be an integer >= 0")
        elif high is not None and _count(low, 0) and high < low:
            problems.append(f"{at}.maxReplicas: value {high!r} must be >= minReplicas ({low})")
        mml = item.get("maxModelLen")
        if mml is not None and not _count(mml, 1):
            problems.append(f"{at}.maxModelLen: value {mml!r} must be an integer >= 1")
        role = item.get("role")
        if role is not None and role not in ROLES:
            problems.append(
                f"{at}.role: value {role!r} must be one of {', '.join(ROLES)} (omit it: the "
                "variant serves both)"
            )
        if len(problems) == before:
            out.append(
                VariantSpec(
                    name=str(name),
                    scale_target_ref=str_ref,
                    cost_per_replica_hour=float(cast(float, cost)),
                    capacity_per_replica=None if capacity is None else float(capacity),
                    min_replicas=low,
                    max_replicas=high,
                    max_model_len=mml,
                    role=cast(Role | None, role),
                )
            )
    return tuple(out)


_ROLES_KEYS: Final[tuple[str, ...]] = (
    "promptTokensPerSecondPerPrefill",
    "runningPerDecode",
    "kvUsageTarget",
    "ttftSloSeconds",
    "itlSloSeconds",
    "ratioBand",
)


def roles_to_dict(roles: RolesSpec) -> dict[str, Any]:
    """camelCase ``roles`` block (the REST document's and the CRD's shape)."""
    doc: dict[str, Any] = {
        "promptTokensPerSecondPerPrefill": roles.prompt_tokens_per_s_per_prefill,
        "runningPerDecode": roles.running_per_decode,
        "kvUsageTarget": roles.kv_usage_target,
    }
    if roles.ttft_slo_s is not None:
        doc["ttftSloSeconds"] = roles.ttft_slo_s
    if roles.itl_slo_s is not None:
        doc["itlSloSeconds"] = roles.itl_slo_s
    if roles.ratio_band is not None:
        doc["ratioBand"] = {"min": roles.ratio_band[0], "max": roles.ratio_band[1]}
    return doc


def _raw_roles(raw_variants: Any) -> list[Any]:
    """The ``role`` of each variant as written (None: absent), for the pair rule."""
    if not isinstance(raw_variants, list):
        return []
    return [item.get("role") if isinstance(item, Mapping) else None for item in raw_variants]


def parse_roles(
    raw: Any, where: str, raw_variants: Any, variants_where: str, problems: list[str]
) -> RolesSpec | None:
    """The ``roles`` block and the roles of the variants, checked together: roles come
    as a pair (at least one prefill and one decode variant), never mixed with role-less
    variants, and the block is there exactly when the variants carry roles. Each
    problem names the field, the value and the rule."""
    written = _raw_roles(raw_variants)
    carried = [r for r in written if r is not None]
    if carried:
        for i, r in enumerate(written):
            if r is None:
                problems.append(
                    f"{variants_where}[{i}].role: absent while other variants carry a role; "
                    "roles must not mix with role-less variants (set prefill or decode)"
                )
        for role in ROLES:
            if role not in carried:
                problems.append(
                    f"{variants_where}: roles {sorted(set(map(str, carried)))} must come as a "
                    f"pair: at least one prefill and one decode variant (no {role} variant)"
                )
        if raw is None:
            problems.append(
                f"{where}: required when variants carry a role (the per-replica targets "
                "promptTokensPerSecondPerPrefill and runningPerDecode)"
            )
            return None
    elif raw is not None:
        problems.append(
            f"{where}: value {raw!r} needs variants with a role (at least one prefill and "
            "one decode variant)"
        )
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        problems.append(f"{where}: value {raw!r} must be an object")
        return None
    before = len(problems)
    for key in raw:
        if key not in _ROLES_KEYS:
            problems.append(f"{where}.{key}: unknown field (allowed: {', '.join(_ROLES_KEYS)})")
    prompt = raw.get("promptTokensPerSecondPerPrefill")
    if not _positive_number(prompt):
        problems.append(
            f"{where}.promptTokensPerSecondPerPrefill: value {prompt!r} must be a number > 0 "
            "(prompt tokens per second one prefill replica serves)"
        )
    running = raw.get("runningPerDecode")
    if not _positive_number(running):
        problems.append(
            f"{where}.runningPerDecode: value {running!r} must be a number > 0 (running "
            "requests one decode replica serves)"
        )
    kv = raw.get("kvUsageTarget", 0.8)
    if not _positive_number(kv) or kv > 1:
        problems.append(f"{where}.kvUsageTarget: value {kv!r} must be a number in (0, 1]")
    slos: dict[str, float | None] = {}
    for key in ("ttftSloSeconds", "itlSloSeconds"):
        value = raw.get(key)
        if value is not None and not _positive_number(value):
            problems.append(f"{where}.{key}: value {value!r} must be a number > 0 (seconds)")
            value = None
        slos[key] = None if value is None else float(value)
    band_raw = raw.get("ratioBand")
    band: tuple[float, float] | None = None
    if band_raw is not None:
        if not isinstance(band_raw, Mapping):
            problems.append(f"{where}.ratioBand: value {band_raw!r} must be an object {{min, max}}")
        else:
            for key in band_raw:
                if key not in ("min", "max"):
                    problems.append(f"{where}.ratioBand.{key}: unknown field (allowed: min, max)")
            lo, hi = band_raw.get("min"), band_raw.get("max")
            ok = True
            for key, value in (("min", lo), ("max", hi)):
                if not _positive_number(value):
                    problems.append(
                        f"{where}.ratioBand.{key}: value {value!r} must be a number > 0 "
                        "(prefill replicas per decode replica)"
                    )
                    ok = False
            if ok and float(cast(float, lo)) > float(cast(float, hi)):
                problems.append(f"{where}.ratioBand.min: value {lo!r} must be <= max ({hi!r})")
            elif ok:
                band = (float(cast(float, lo)), float(cast(float, hi)))
    if len(problems) != before:
        return None
    return RolesSpec(
        prompt_tokens_per_s_per_prefill=float(cast(float, prompt)),
        running_per_decode=float(cast(float, running)),
        kv_usage_target=float(kv),
        ttft_slo_s=slos["ttftSloSeconds"],
        itl_slo_s=slos["itlSloSeconds"],
        ratio_band=band,
    )


def variant_target(spec: TargetSpec, variant: VariantSpec) -> TargetSpec:
    """The target as one of its variants: that Deployment, its own pod selector, the GPU
    resource its own pod template requests (``capacity.gpuResource`` names one resource,
    the variants request several), no variants, and a ref of its own
    (``<name>/<variant>``) so what adapters keep per ref (the pod view, the last write,
    the scale read) is kept per Deployment."""
    policy = spec.policy
    if policy.capacity.gpu_resource is not None:
        capacity = policy.capacity.model_copy(update={"gpu_resource": None})
        policy = policy.model_copy(update={"capacity": capacity})
    return replace(
        spec,
        ref=TargetRef(spec.ref.namespace, f"{spec.ref.name}/{variant.name}"),
        scale_target_ref=variant.scale_target_ref,
        selector=None,
        variants=(),
        roles=None,
        policy=policy,
    )
