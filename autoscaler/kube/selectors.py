"""Label and field selectors with the Kubernetes string syntax (the controller and the
local API endpoint share these semantics).

Label: ``a=b``, ``a==b``, ``a!=b``, ``a in (x,y)``, ``a notin (x)``, ``a``, ``!a``;
requirements are ANDed. Field: ``path=value``, ``path==value``, ``path!=value``
on a small set of supported paths (as the real API only supports a few per resource).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Mapping[str, Any]], bool]

_SET_RE = re.compile(r"^\s*([\w./-]+)\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ_RE = re.compile(r"^\s*([\w./-]+)\s*(==|=|!=)\s*([\w./-]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([\w./-]+)\s*$")

_META = frozenset({"metadata.name", "metadata.namespace"})
# Per resource plural, as kube-apiserver 1.24 registers them (pkg/registry/*/strategy.go);
# any other resource: metadata.name and metadata.namespace only.
FIELD_PATHS: dict[str, frozenset[str]] = {
    "pods": _META
    | {
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    },
    "events": _META
    | {
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
    },
    "nodes": _META | {"spec.unschedulable"},
}


class SelectorError(ValueError):
    """An unparsable selector (the API answers 400 BadRequest)."""


def _split_requirements(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p for p in (x.strip() for x in parts) if p]


def _label_requirement(req: str) -> Callable[[Mapping[str, str]], bool]:
    if m := _SET_RE.match(req):
        key, op = m.group(1), m.group(2)
        values = frozenset(v.strip() for v in m.group(3).split(",") if v.strip())
        if op == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    if m := _EQ_RE.match(req):
        key, op, value = m.group(1), m.group(2), m.group(3)
        if op == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    if m := _EXISTS_RE.match(req):
        key = m.group(2)
        if m.group(1) == "!":
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {req!r}")


def parse_label_selector(text: str | None) -> Callable[[Mapping[str, str]], bool]:
    """Compile a label selector string to a predicate over a labels mapping."""
    checks: list[Callable[[Mapping[str, str]], bool]] = []
    for req in _split_requirements(text or ""):
        checks.append(_label_requirement(req))
    return lambda labels: all(c(labels) for c in checks)


def equality_requirements(text: str | None) -> list[tuple[str, str]]:
    """The ``key=value`` (``key==value``) requirements of a label selector, in order: any
    one of them narrows the candidates to the objects carrying that label."""
    out: list[tuple[str, str]] = []
    for req in _split_requirements(text or ""):
        m = _EQ_RE.match(req)
        if m is not None and m.group(2) in ("=", "=="):
            out.append((m.group(1), m.group(3)))
    return out


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    if path == "source":  # events: source.component, as the real server indexes it
        path = "source.component"
    cur: Any = obj
    for part in path.split("."):
        cur = cur.get(part) if isinstance(cur, Mapping) else None
    return "" if cur is None else str(cur)


def _field_requirement(path: str, negate: bool, value: str) -> Predicate:
    if negate:
        return lambda obj: _field_value(obj, path) != value
    return lambda obj: _field_value(obj, path) == value


def parse_field_selector(text: str | None, plural: str = "pods") -> Predicate:
    """Compile a field selector for resource ``plural`` (only the paths the real API
    supports for it, `FIELD_PATHS`; any other path is a `SelectorError`, HTTP 400)."""
    supported = FIELD_PATHS.get(plural, _META)
    checks: list[Predicate] = []
    for req in _split_requirements(text or ""):
        m = _EQ_RE.match(req)
        if m is None:
            raise SelectorError(f"invalid field selector requirement: {req!r}")
        path, op, value = m.group(1), m.group(2), m.group(3)
        if path not in supported:
            raise SelectorError(f'field label not supported: "{path}"')
        checks.append(_field_requirement(path, op == "!=", value))
    return lambda obj: all(c(obj) for c in checks)


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector object (matchLabels/matchExpressions) as its string form."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)


# Label keys and values as Kubernetes validates them (apimachinery validation.IsQualifiedName
# and IsValidLabelValue): a selector the API server would refuse is refused when written.
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME_MAX = 63
DNS_SUBDOMAIN_MAX = 253


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a label key (None: it is): ``[prefix/]name``, the name 1-63
    alphanumerics, '-', '_', '.' starting and ending alphanumeric, the optional prefix a
    DNS subdomain of at most 253 characters."""
    if not isinstance(key, str):
        return "must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash and (
        not prefix or len(prefix) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.fullmatch(prefix)
    ):
        return (
            f"prefix {prefix!r} must be a DNS subdomain (lowercase alphanumerics, '-', '.', "
            f"at most {DNS_SUBDOMAIN_MAX} characters)"
        )
    if not name or len(name) > LABEL_NAME_MAX or not _LABEL_NAME.fullmatch(name):
        return (
            f"name {name!r} must be 1-{LABEL_NAME_MAX} characters of alphanumerics, '-', '_' "
            "or '.', starting and ending with an alphanumeric"
        )
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is not a label value (None: it is): empty, or at most 63
    alphanumerics, '-', '_', '.' starting and ending alphanumeric."""
    if not isinstance(value, str):
        return "must be a string"
    if value and (len(value) > LABEL_NAME_MAX or not _LABEL_NAME.fullmatch(value)):
        return (
            f"must be empty or at most {LABEL_NAME_MAX} characters of alphanumerics, '-', "
            "'_' or '.', starting and ending with an alphanumeric"
        )
    return None


def match_labels_problems(labels: Mapping[Any, Any], field: str) -> list[str]:
    """One ``field.<key>: value ...: rule`` message per invalid key or value."""
    out = []
    for key, value in labels.items():
        if (why := label_key_problem(key)) is not None:
            out.append(f"{field}: key {key!r} is not a label key: {why}")
        elif (why := label_value_problem(value)) is not None:
            out.append(f"{field}.{key}: value {value!r} is not a label value: {why}")
    return out
