"""Error types. The type decides what the caller does: retry, hold, or give up.

`TemporaryError` subclasses are retried (with backoff) by the shell; `PermanentError`
subclasses are reported and not retried. Missing data is an error, never a zero.
"""

from __future__ import annotations


class AutoscalerError(Exception):
    """Base of every error this package raises on purpose."""


class TemporaryError(AutoscalerError):
    """Retrying later may succeed (timeouts, 409/429/5xx, a pod not answering)."""

    def __init__(self, message: str, *, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class PermanentError(AutoscalerError):
    """Retrying will not help until something is changed (bad config, 403, 404)."""


class ConfigError(PermanentError):
    """Invalid configuration or policy; `problems` names each field, value and rule."""

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        self.problems: list[str] = problems if problems is not None else [message]
        super().__init__(message if problems is None else f"{message}: " + "; ".join(problems))


class NoDataError(TemporaryError):
    """A signal could not be read; callers hold replicas instead of reading zero."""


class MetricSourceError(TemporaryError):
    """A metrics source (pod scrape, Prometheus) failed or returned an invalid page."""


class ParseError(MetricSourceError):
    """An exposition page is not valid text format; carries the 1-based line number."""

    def __init__(self, message: str, line: int) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line


class ActuationError(TemporaryError):
    """Writing replicas to the cluster failed; the write was not applied."""


class ConflictError(ActuationError):
    """The object changed since it was read (HTTP 409); re-read and re-decide."""


class OwnershipError(PermanentError):
    """Another autoscaler (HPA, KEDA ScaledObject) owns the target; we refuse to fight it."""
