"""Policy documents: a named profile plus the fields a user sets.

See docs/policy.md#workload-classes-profiles.

Every policy enters the product as a document: an ``LLMAutoscaler`` spec, a REST body, a
policy file, ``decide --policy``. A document selects a profile with ``profile`` (one of
`autoscaler.policy.profiles.PROFILES`; omitted: ``recommended``, the policy the
simulator benchmarks measure as ``ours``) and may set any policy field. The effective
policy is the profile's document with the user's document merged over it:

- objects merge key by key, recursively (``behavior``, ``behavior.scaleDown``,
  ``prediction``, ``capacity``, ``warmPool``, ``panic``, ``fallback``, ...);
- every other value (number, string, boolean, and lists: ``metrics``,
  ``behavior.*.policies``) replaces the profile's value whole;
- an explicit ``null`` is a value, not "take the profile's": it unsets the field (the
  schema's unset state: ``prediction: null`` is no prediction at all, a null
  ``stabilizationWindowSeconds`` is HPA's default window), and is accepted only where
  the schema allows unset (a null ``maxReplicaCount`` is an error).

The whole merged document is then validated once (`schema.validate_policy`), so
cross-field rules see the profile's values too (``minReplicaCount: 80`` fails against
the profile's ``maxReplicaCount``). An unknown profile is rejected whole, naming the
field, the value and the allowed names; there is no fallback.
"""

from __future__ import annotations

import functools
import hashlib
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from autoscaler.errors import ConfigError
from autoscaler.policy import schema
from autoscaler.policy.profiles import PROFILES
from autoscaler.policy.schema import Policy

PROFILE_FIELD = "profile"
DEFAULT_PROFILE = "recommended"
POLICY_HASH_CHARS = 12


def profile_names() -> tuple[str, ...]:
    """The names a document may select, sorted (the CRD's enum, the error message)."""
    return tuple(sorted(PROFILES))


@functools.cache
def profile_document(name: str) -> Mapping[str, Any]:
    """The named profile as a camelCase document (its every field; unset ones left out).
    Never mutated: `merge` builds new objects."""
    return PROFILES[name]().dump()


def _aliases() -> dict[str, str]:
    """snake_case field name -> camelCase alias, over every model of the schema."""
    out: dict[str, str] = {}
    for model in vars(schema).values():
        if (
            isinstance(model, type)
            and issubclass(model, BaseModel)
            and model.__module__ == schema.__name__
        ):
            for name, field in model.model_fields.items():
                out[name] = field.alias or name
    return out


_ALIASES = _aliases()


def _camel(node: Any, path: str, problems: list[str]) -> Any:
    """Keys to camelCase (the schema accepts snake_case too), recursively; a field given
    under both spellings is a problem (which one would win is not obvious). A part
    already in camelCase is returned as is, not copied: a fleet of LLMAutoscalers keeps
    one copy of each document (the CRD store holds the object's spec already)."""
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        same = isinstance(node, dict)
        for key, value in node.items():
            name = _ALIASES.get(key, key) if isinstance(key, str) else key
            where = f"{path}.{name}" if path else str(name)
            if name in out:
                problems.append(f"{where}: given twice (as {name!r} and as its snake_case)")
            out[name] = sub = _camel(value, where, problems)
            same = same and name == key and sub is value
        return node if same else out
    if isinstance(node, list | tuple):
        items = [_camel(v, f"{path}[{i}]", problems) for i, v in enumerate(node)]
        unchanged = isinstance(node, list) and all(a is b for a, b in zip(items, node, strict=True))
        return node if unchanged else items
    return node


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """``override`` over ``base``: objects merge recursively; anything else (null
    included) replaces. Neither argument is modified."""
    out = dict(base)
    for key, value in override.items():
        below = out.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            out[key] = merge(below, value)
        else:
            out[key] = value
    return out


@dataclass(frozen=True, slots=True, weakref_slot=True)
class PolicySource:
    """A policy document as written (camelCase keys, ``profile`` only if written) and
    the effective policy it resolves to. Shared by every target whose document is the
    same (`load_source`): never mutated."""

    document: Mapping[str, Any]
    policy: Policy

    @property
    def profile(self) -> str:
        return str(self.document.get(PROFILE_FIELD, DEFAULT_PROFILE))


def _profile_of(doc: Mapping[str, Any]) -> str:
    name = doc.get(PROFILE_FIELD, DEFAULT_PROFILE)
    if not isinstance(name, str) or name not in PROFILES:
        raise ConfigError(
            "invalid policy",
            [f"profile: value {name!r} must be one of {', '.join(profile_names())}"],
        )
    return name


# Per distinct document (its canonical JSON), the one PolicySource every target written
# with it shares: a fleet's LLMAutoscalers are mostly templated, and each validated
# policy is ~6 KB of pydantic objects (issue 16: 1,000 targets). Weak values: gone with
# the last target holding it.
_SOURCES: weakref.WeakValueDictionary[str, PolicySource] = weakref.WeakValueDictionary()


def load_source(data: Mapping[str, Any]) -> PolicySource:
    """Validate a policy document (camelCase or snake_case keys) against its profile;
    raise `ConfigError` naming every problem's field, value and rule. Equal documents
    give the same (shared) `PolicySource`."""
    try:
        key: str | None = json.dumps(data, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError):
        key = None  # not plain JSON: validated (and refused or kept) on its own
    if key is not None and (shared := _SOURCES.get(key)) is not None:
        return shared
    source = _load_source(data)
    if key is not None:
        _SOURCES[key] = source
    return source


def _load_source(data: Mapping[str, Any]) -> PolicySource:
    problems: list[str] = []
    doc = _camel(data, "", problems)
    if problems:
        raise ConfigError("invalid policy", problems)
    name = _profile_of(doc)
    overrides = {k: v for k, v in doc.items() if k != PROFILE_FIELD}
    policy = schema.validate_policy(merge(profile_document(name), overrides))
    return PolicySource(document=doc, policy=policy)


def load_policy(data: Mapping[str, Any]) -> Policy:
    """The effective policy of a document (`load_source`)."""
    return load_source(data).policy


def _nulls_for(base: Mapping[str, Any], doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` plus a null wherever ``base`` sets a field ``doc`` leaves unset."""
    out = dict(doc)
    for key, below in base.items():
        if key not in out:
            out[key] = None
        elif isinstance(below, Mapping) and isinstance(out[key], Mapping):
            out[key] = _nulls_for(below, out[key])
    return out


def document_of(policy: Policy) -> dict[str, Any]:
    """A document that resolves to exactly ``policy`` (for a policy built in code rather
    than read from a document): the default profile named, every set field written, and
    a null only where that profile sets a field the policy leaves unset (a null in an
    enum field, e.g. ``selectPolicy``, is refused by a 1.24 API server)."""
    doc = _nulls_for(profile_document(DEFAULT_PROFILE), policy.dump())
    return {PROFILE_FIELD: DEFAULT_PROFILE, **doc}


def effective(policy: Policy, profile: str) -> dict[str, Any]:
    """What a target runs: the profile's name and every field of the effective policy
    (the read-only view the REST API shows next to the document)."""
    return {PROFILE_FIELD: profile, **policy.dump()}


def document_hash(effective_fields: Mapping[str, Any]) -> str:
    """The first `POLICY_HASH_CHARS` hex digits of the SHA-256 of ``effective_fields``
    as canonical JSON (sorted keys, no spaces); ``profile`` is left out when present.

    What ``status.policyHash`` reports: it changes exactly when a field the target runs
    changes, however the document spells it (writing a profile's own value, or a
    profile's value changing in a new release, count alike), and anyone can recompute
    it from the REST API's ``effectivePolicy``."""
    fields = {k: v for k, v in effective_fields.items() if k != PROFILE_FIELD}
    text = json.dumps(fields, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()[:POLICY_HASH_CHARS]


def policy_hash(policy: Policy) -> str:
    """`document_hash` of the effective policy."""
    return document_hash(policy.dump())
