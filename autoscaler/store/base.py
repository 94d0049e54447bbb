"""The policy store contract shared by the file store, the CRD store and the REST API.

Every write is optimistic: callers pass the version they read (``if_match``) and get
`PreconditionFailed` when someone else wrote first. Nothing is acknowledged before it is
durably stored.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from autoscaler.domain import TargetRef
from autoscaler.errors import PermanentError
from autoscaler.target import TargetSpec


@dataclass(frozen=True, slots=True)
class StoredTarget:
    spec: TargetSpec
    version: str  # opaque: resourceVersion in-cluster, a counter in the file store


class PreconditionFailed(PermanentError):
    """``if_match`` did not match the stored version (HTTP 412)."""


class NotFound(PermanentError):
    """No such target (HTTP 404)."""


class AlreadyExists(PermanentError):
    """A create found the target already there."""


class PolicyStore(Protocol):
    async def list(self, namespace: str | None = None) -> builtins.list[StoredTarget]: ...

    async def get(self, ref: TargetRef) -> StoredTarget: ...

    async def put(self, spec: TargetSpec, if_match: str | None = None) -> StoredTarget:
        """Create or replace. ``if_match``: None writes unconditionally; ``"*"`` requires
        the target to exist; any other value must equal the stored version. A missing
        target with any ``if_match`` is `PreconditionFailed` (RFC 9110 If-Match)."""
        ...

    async def delete(self, ref: TargetRef, if_match: str | None = None) -> None:
        """``if_match`` as for `put`; a missing target is `NotFound` only without it."""
        ...

    def watch(self) -> AsyncIterator[builtins.list[StoredTarget]]:
        """Yields the full target list each time it changes (first yield: current)."""
        ...
