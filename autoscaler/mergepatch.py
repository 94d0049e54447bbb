"""RFC 7386 JSON merge patch, shared by the REST API (PATCH of targets and policies) and
the local Kubernetes API endpoint (merge and strategic-merge patches)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """Objects merge recursively, ``null`` deletes, anything else replaces (copied, so the
    result never aliases the patch)."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    out: dict[str, Any] = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
