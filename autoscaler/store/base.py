"""The policy store contract shared by the file store, the CRD store and the REST API.

Every write is optimistic: callers pass the version they read (``if_match``) and get
`PreconditionFailed` when someone else wrote first. Nothing is acknowledged before it is
durably stored.
"""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from autoscaler.domain import TargetRef
from autoscaler.errors import PermanentError
from autoscaler.policy.document import (
    DEFAULT_PROFILE,
    PolicySource,
    document_of,
    effective,
    policy_hash,
)
from autoscaler.policy.schema import Policy
from autoscaler.policy.status import Pause, PolicyStatus, policy_status

Mode = Literal["direct", "keda", "advisory"]


@dataclass(frozen=True, slots=True)
class ScaleTargetRef:
    kind: Literal["Deployment", "StatefulSet"] = "Deployment"
    name: str = ""
    api_version: str = "apps/v1"


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
