"""The three patch types the API server accepts (apply-patch is not supported here).

Strategic merge patch merges lists of objects by their patch merge key, as the real server
does for the built-in types (`MERGE_KEYS`: containers by name, ports by containerPort,
conditions by type...), honours ``$patch: delete`` in such a list and ``$patch: replace``
in a map; lists without a merge key are replaced, as in a JSON merge patch.
"""

from __future__ import annotations

import copy
from typing import Any

from autoscaler.mergepatch import merge_patch

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SUPPORTED = frozenset({MERGE, STRATEGIC, JSON_PATCH})

__all__ = [
    "SUPPORTED",
    "PatchError",
    "apply_patch",
    "json_patch",
    "merge_patch",
    "strategic_merge_patch",
]


class PatchError(ValueError):
    """The patch cannot be applied (the API answers 422 or 400)."""


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"invalid JSON pointer {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts[:-1]:
        if isinstance(cur, list):
            cur = cur[int(p)]
        elif isinstance(cur, dict) and p in cur:
            cur = cur[p]
        else:
            raise PatchError(f"path segment {p!r} does not exist")
    return cur


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 ``add``/``remove``/``replace``/``test``/``copy``/``move``."""
    if not isinstance(ops, list):
        raise PatchError("JSON patch must be a list of operations")
    out = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise PatchError(f"invalid operation {op!r}")
        kind = op["op"]
        if kind in ("copy", "move"):
            src = _pointer(op["from"])
            value = copy.deepcopy(_get(out, src))
            if kind == "move":
                out = json_patch(out, [{"op": "remove", "path": op["from"]}])
            out = json_patch(out, [{"op": "add", "path": op["path"], "value": value}])
            continue
        parts = _pointer(op["path"])
        if not parts:
            if kind in ("add", "replace"):
                out = copy.deepcopy(op["value"])
                continue
            raise PatchError(f"cannot {kind} the whole document")
        parent = _parent(out, parts)
        key = parts[-1]
        if kind == "test":
            if _get(out, parts) != op.get("value"):
                raise PatchError(f"test failed at {op['path']}")
        elif kind == "remove":
            _remove(parent, key, op["path"])
        elif kind == "add":
            if isinstance(parent, list):
                parent.insert(len(parent) if key == "-" else int(key), op["value"])
            else:
                parent[key] = op["value"]
        elif kind == "replace":
            _remove(parent, key, op["path"])
            if isinstance(parent, list):
                parent.insert(int(key), op["value"])
            else:
                parent[key] = op["value"]
        else:
            raise PatchError(f"unsupported op {kind!r}")
    return out


def _get(doc: Any, parts: list[str]) -> Any:
    cur = doc
    for p in parts:
        try:
            cur = cur[int(p)] if isinstance(cur, list) else cur[p]
        except (KeyError, IndexError, ValueError, TypeError):
            raise PatchError(f"path /{'/'.join(parts)} does not exist") from None
    return cur


def _remove(parent: Any, key: str, path: str) -> None:
    try:
        if isinstance(parent, list):
            del parent[int(key)]
        else:
            del parent[key]
    except (KeyError, IndexError, ValueError):
        raise PatchError(f"path {path} does not exist") from None


# Field name -> merge key of the list under it (k8s.io/api ``patchMergeKey`` tags).
MERGE_KEYS: dict[str, str] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "ports": "containerPort",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "volumes": "name",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "conditions": "type",
    "ownerReferences": "uid",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "topologySpreadConstraints": "topologyKey",
    "podIPs": "ip",
}


def strategic_merge_patch(doc: Any, patch: Any) -> Any:
    """Strategic merge patch for the built-in types (see `MERGE_KEYS`)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    out: dict[str, Any] = dict(doc) if isinstance(doc, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif key in MERGE_KEYS and isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = _merge_list(out[key], value, MERGE_KEYS[key])
        else:
            out[key] = strategic_merge_patch(out.get(key), value)
    return out


def _merge_list(current: list[Any], patch: list[Any], merge_key: str) -> list[Any]:
    out = [copy.deepcopy(item) for item in current]
    index = {item.get(merge_key): i for i, item in enumerate(out) if isinstance(item, dict)}
    deleted: set[Any] = set()
    for item in patch:
        if not isinstance(item, dict) or merge_key not in item:
            raise PatchError(f"list item {item!r} has no merge key {merge_key!r}")
        key = item[merge_key]
        if item.get("$patch") == "delete":
            deleted.add(key)
        elif key in index:
            out[index[key]] = strategic_merge_patch(out[index[key]], item)
        else:
            index[key] = len(out)
            out.append(strategic_merge_patch({}, item))
    return [i for i in out if not (isinstance(i, dict) and i.get(merge_key) in deleted)]


def apply_patch(content_type: str, doc: Any, patch: Any) -> Any:
    ct = content_type.split(";")[0].strip().lower()
    if ct == JSON_PATCH:
        return json_patch(doc, patch)
    if ct == STRATEGIC:
        return strategic_merge_patch(doc, patch)
    if ct == MERGE:
        return merge_patch(doc, patch)
    raise PatchError(f"unsupported patch content type {ct!r}")
