"""The three patch types the API server accepts (apply-patch is not supported here).

Strategic merge patch is applied as a JSON merge patch: lists are replaced, not merged by
key. That is enough for the fields this project patches (replicas, priorityClassName,
status) and is documented as a known difference.
"""

from __future__ import annotations

import copy
from typing import Any

from autoscaler.mergepatch import merge_patch

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
SUPPORTED = frozenset({MERGE, STRATEGIC, JSON_PATCH})

__all__ = ["SUPPORTED", "PatchError", "apply_patch", "json_patch", "merge_patch"]


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


def apply_patch(content_type: str, doc: Any, patch: Any) -> Any:
    ct = content_type.split(";")[0].strip().lower()
    if ct == JSON_PATCH:
        return json_patch(doc, patch)
    if ct in (MERGE, STRATEGIC):
        return merge_patch(doc, patch)
    raise PatchError(f"unsupported patch content type {ct!r}")
