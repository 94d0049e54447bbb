"""API settings and bearer-token checks.

Why this shape: writes change what the controller does to a GPU fleet, so they always need
a token (no token configured means writes are disabled, not open). Tokens come from env or
a Secret-mounted file, are compared in constant time, never appear in a repr, a log line or
a response. 401 means "no usable credentials", 403 "credentials given but not accepted".
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from fastapi import HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from autoscaler.api.limits import DEFAULT_MAX_BODY_BYTES, DryRunLimits
from autoscaler.errors import ConfigError
from autoscaler.settings import Settings

ENV_TOKEN_FILE = "AUTOSCALER_API_TOKEN_FILE"
ENV_READ_TOKEN_FILE = "AUTOSCALER_API_READ_TOKEN_FILE"
ENV_CORS_ORIGINS = "AUTOSCALER_API_CORS_ORIGINS"


@dataclass(frozen=True, slots=True)
class ApiSettings:
    """What the HTTP app needs beyond the state and the store."""

    write_token: str | None = field(default=None, repr=False)
    read_token: str | None = field(default=None, repr=False)
    cors_origins: tuple[str, ...] = ()  # empty: no CORS headers at all (closed)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES  # larger bodies: 413, unread
    dry_run: DryRunLimits = field(default_factory=DryRunLimits)

    @classmethod
    def from_env(
        cls, settings: Settings | None = None, env: Mapping[str, str] | None = None
    ) -> ApiSettings:
        """Tokens from ``*_FILE`` (Kubernetes Secret volume) first, else the env value."""
        env = os.environ if env is None else env
        s = settings if settings is not None else Settings()
        origins = tuple(o.strip() for o in env.get(ENV_CORS_ORIGINS, "").split(",") if o.strip())
        return cls(
            write_token=_token(env.get(ENV_TOKEN_FILE), s.api_token, ENV_TOKEN_FILE),
            read_token=_token(env.get(ENV_READ_TOKEN_FILE), s.api_read_token, ENV_READ_TOKEN_FILE),
            cors_origins=origins,
            max_body_bytes=s.api_max_body_bytes,
            dry_run=DryRunLimits(
                rate_per_s=s.api_dry_run_rate_per_s,
                burst=s.api_dry_run_burst,
                concurrency=s.api_dry_run_concurrency,
                max_ticks=s.api_dry_run_max_ticks,
                cpu_budget_s=s.api_dry_run_cpu_budget_s,
            ),
        )


def _token(path: str | None, value: str | None, var: str) -> str | None:
    if path:
        try:
            text = Path(path).read_text(encoding="utf-8").strip()
        except OSError as err:
            raise ConfigError(f"{var}: cannot read token file {path} ({err.strerror})") from None
        if not text:
            raise ConfigError(f"{var}: token file {path} is empty")
        return text
    return value or None


bearer = HTTPBearer(auto_error=False, description="`Authorization: Bearer <token>`")

Access = Literal["read", "write"]


def _matches(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(
        given.encode("utf-8"), expected.encode("utf-8")
    )


def check_access(
    settings: ApiSettings, credentials: HTTPAuthorizationCredentials | None, access: Access
) -> None:
    """Raise 401/403 unless the credentials allow ``access``."""
    if access == "read" and settings.read_token is None:
        return
    if access == "write" and settings.write_token is None:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"writes are disabled: no API token configured (set AUTOSCALER_API_TOKEN or "
            f"{ENV_TOKEN_FILE})",
        )
    if credentials is None or not credentials.credentials:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing or malformed Authorization header; expected 'Bearer <token>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    given = credentials.credentials
    ok = _matches(given, settings.write_token)
    if access == "read":
        ok = _matches(given, settings.read_token) or ok
    if not ok:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"token not accepted for {access} access")


def api_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.api_settings
    return settings
