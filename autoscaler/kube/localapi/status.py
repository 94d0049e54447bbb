"""What every part of the local API answers with: `Obj`, `ApiError` (a `Status` body),
timestamps as the API server writes them, and the records of calls (`ApiCall`) and
injected faults (`Fault`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]


def rfc3339(t: float) -> str:
    """Second precision, as the API server writes metav1.Time."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


class ApiError(Exception):
    """Answered as a `Status` object with this code and reason."""

    def __init__(self, code: int, reason: str, message: str, details: Obj | None = None):
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> Obj:
        body: Obj = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def _parse_bool(value: str | None) -> bool:
    """Go's strconv.ParseBool truthy spellings (the client sends ``True``)."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


_FAULT_REASONS = {
    409: "Conflict",
    410: "Gone",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


@dataclass(frozen=True, slots=True)
class ApiCall:
    """One request as RBAC sees it: verb, group, resource[/subresource]."""

    verb: str
    group: str
    resource: str  # includes the subresource: "deployments/scale"
    namespace: str | None
    name: str | None
    status: int
    user_agent: str = ""
    field_manager: str | None = None  # the ``fieldManager`` query parameter, if any


@dataclass
class Fault:
    """Applies to the next ``times`` requests whose method/path match."""

    path_contains: str
    times: int = 1
    status: int | None = None
    method: str | None = None
    delay_s: float = 0.0
    after_apply: bool = False  # the write happens, then the error is returned
    retry_after_s: int | None = None

    def matches(self, method: str, path: str) -> bool:
        return (
            self.times > 0
            and self.path_contains in path
            and (self.method is None or self.method == method)
        )
