"""What a store's caller is told when the cluster, not the caller, decides a write's fate.

The REST API turns each into an honest status instead of a 500: the API server's own
validation refusing a document is the client's 422 (with the server's causes); the
controller lacking RBAC permission is the operator's problem (503 naming the verb and
the resource); an API server that stays busy or unreachable after the retries is 503
with ``Retry-After``.
"""

from __future__ import annotations

from autoscaler.errors import ConfigError, PermanentError, TemporaryError


class ClusterRejected(ConfigError):
    """The API server refused the document (HTTP 422 or 400); ``problems`` are its
    causes, each naming the field."""


class ClusterForbidden(PermanentError):
    """The controller's own credentials may not do this (HTTP 401/403 from the API
    server): an RBAC problem for the operator, not the client's."""

    def __init__(self, verb: str, resource: str, namespace: str | None, why: str) -> None:
        where = f" in namespace {namespace!r}" if namespace else " cluster-wide"
        super().__init__(
            f"the controller lacks permission to {verb} {resource}{where} ({why}); "
            "grant it in the controller's Role (deploy/base/rbac.yaml)"
        )
        self.verb, self.resource, self.namespace = verb, resource, namespace


class ClusterUnavailable(TemporaryError):
    """The API server stayed busy, conflicting or unreachable after the retries."""
