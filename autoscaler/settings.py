"""Process settings: env vars prefixed ``AUTOSCALER_`` over an optional YAML/JSON file.

The file is named by ``AUTOSCALER_CONFIG_FILE``; env vars win over the file, and both
win over defaults. Nested keys use ``__`` in env vars (``AUTOSCALER_HTTP__PORT=8080``).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from autoscaler.errors import ConfigError


class HttpSettings(BaseModel):
    host: str = "0.0.0.0"
    port: int = Field(default=8080, ge=0, le=65535)
    # Connection bounds (docs/failure-modes.md "Hostile clients"): seconds a connection
    # has to send its request line and headers, and connections held open at once (the
    # oldest still waiting for headers is closed to make room; kept below the open-file
    # limit so the controller's own Kubernetes calls and scrapes always have descriptors).
    header_timeout_s: float = Field(default=5.0, gt=0, le=300)
    max_connections: int = Field(default=1000, ge=16, le=1_000_000)


class GrpcSettings(BaseModel):
    host: str = "0.0.0.0"
    port: int = Field(default=9090, ge=0, le=65535)
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    tls_client_ca_file: str | None = None


def read_config_file(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a YAML or JSON mapping; a bad file is a `ConfigError` naming it."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as err:
        raise ConfigError(f"config file {p}: cannot read ({err.strerror})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        kind = p.suffix.lstrip(".") or "YAML"
        raise ConfigError(f"config file {p}: not valid {kind}: {err}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"config file {p}: top level must be a mapping, got {type(data).__name__}"
        )
    return data


class _FileSource(PydanticBaseSettingsSource):
    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = os.environ.get("AUTOSCALER_CONFIG_FILE")
        return read_config_file(path) if path else {}


MAX_SHARDS = 1024
# The per-process default (bench_scale --ablation, docs/scale.md): lag p99 a P-th of a
# whole-fleet burst; Prometheus mode runs 1 (`Settings.effective_tick_phases`).
DEFAULT_TICK_PHASES = 10
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def _problems(err: ValidationError) -> list[str]:
    """``field: value: rule`` per error (the field path joined with ``.``)."""
    out = []
    for e in err.errors():
        rule = str(e["msg"]).removeprefix("Value error, ")
        if not e["loc"]:  # a rule across fields: its message names them and their values
            out.append(rule)
            continue
        where = ".".join(str(p) for p in e["loc"])
        out.append(f"{where}: {e.get('input')!r}: {rule}")
    return out


class Settings(BaseSettings):
    """Controller process settings (policies live in the policy store, not here)."""

    model_config = SettingsConfigDict(
        env_prefix="AUTOSCALER_", env_nested_delimiter="__", extra="ignore"
    )

    log_format: Literal["auto", "json", "console"] = "auto"
    log_level: str = "INFO"
    tick_interval_s: float = Field(default=1.0, gt=0, le=60)
    # Spread the targets over this many phases of each tick interval (the loop ticks
    # every tick_interval_s / tick_phases; each target on its own phase, docs/scale.md
    # "Ablation"): a fleet's scrapes and decisions spread over the second instead of
    # one burst per tick. 1: every due target at the start of each tick. Pod scraping
    # only: with Prometheus the loop runs one phase whatever the default.
    tick_phases: int = Field(default=DEFAULT_TICK_PHASES, ge=1, le=100)
    mode: Literal["direct", "keda", "advisory"] = "direct"
    namespace: str | None = None
    policy_file: str | None = None
    http: HttpSettings = Field(default_factory=HttpSettings)
    grpc: GrpcSettings = Field(default_factory=GrpcSettings)
    api_token: str | None = Field(default=None, repr=False)
    api_read_token: str | None = Field(default=None, repr=False)
    # Request limits (docs/api.md "Limits"): bodies above this are answered 413 unread.
    api_max_body_bytes: int = Field(default=1_048_576, ge=1024, le=64 * 1_048_576)
    # Dry-run replays the decision core: per-client token bucket, concurrency and CPU caps.
    api_dry_run_rate_per_s: float = Field(default=0.5, gt=0, le=1000)
    api_dry_run_burst: int = Field(default=3, ge=1, le=1000)
    api_dry_run_concurrency: int = Field(default=1, ge=1, le=64)
    api_dry_run_max_ticks: int = Field(default=600, ge=1, le=100_000)
    api_dry_run_cpu_budget_s: float = Field(default=0.5, gt=0, le=60)
    leader_election: bool = True
    lease_name: str = "llm-autoscaler-leader"
    # Namespace of the leader-election Lease; unset: POD_NAMESPACE (in cluster), else
    # ``namespace``, else "default". The shipped Role grants Leases only in llm-autoscaler.
    lease_namespace: str | None = None
    lease_duration_s: float = Field(default=15.0, gt=0)
    # Leadership is shard Leases (kube/sharding.py, docs/architecture.md "Beyond one
    # process"): 1 = one shard whose Lease is `lease_name` (leader election); N > 1 splits
    # the targets over N Leases ``<shard_lease_prefix>-shard-<k>`` held by whichever
    # replicas are alive. Sizing (docs/install.md): Lease writes are (N + replicas) per
    # retry period (lease_duration_s / 7.5) whatever the target count.
    shards: int = 1
    shard_lease_prefix: str = "llm-autoscaler"
    # Which targets a sharded replica reconciles: "all" (every replica decides and serves
    # every target, writes only its shards: KEDA and the REST API answer anywhere) or
    # "held" (only its shards': the scrape/CPU load splits too; direct mode only).
    shard_scope: Literal["all", "held"] = "all"
    scrape_timeout_s: float = Field(default=2.0, gt=0)
    scrape_concurrency: int = Field(default=64, ge=1)
    # Ask each vLLM pod for only the families the autoscaler reads (``/metrics?name[]=``,
    # autoscaler/metrics/filtering.py): a fifth of the page to render, send and parse.
    # A server that ignores the query still works; off only for a proxy that refuses one.
    scrape_filter_families: bool = True
    prometheus_url: str | None = None
    # Prometheus mode: read the quantiles from the bucket rates recorded by
    # deploy/prometheus/recording-rules.yaml (which must be loaded) instead of computing
    # `rate` over every pod's bucket samples in each tick's queries (docs/metrics.md,
    # "Prometheus mode for a fleet").
    prometheus_recorded_rules: bool = False

    @field_validator("shards")
    @classmethod
    def _check_shards(cls, v: int) -> int:
        if not 1 <= v <= MAX_SHARDS:
            raise ValueError(f"must be between 1 (one leader Lease) and {MAX_SHARDS} shard Leases")
        return v

    @field_validator("shard_lease_prefix")
    @classmethod
    def _check_prefix(cls, v: str) -> str:
        if not DNS_LABEL.match(v) or len(v) > 40:
            raise ValueError(
                "must be a DNS label (lowercase letters, digits, '-') of at most 40 characters"
            )
        return v

    @model_validator(mode="after")
    def _check_recorded_rules(self) -> Settings:
        if self.prometheus_recorded_rules and not self.prometheus_url:
            raise ValueError(
                "prometheus_recorded_rules=True reads recorded series from Prometheus, "
                "but prometheus_url is not set: set it, or leave prometheus_recorded_rules off"
            )
        return self

    @property
    def effective_tick_phases(self) -> int:
        """The phases the loop runs: `tick_phases` scraping pods, 1 with Prometheus (one
        grouped query per signal per tick)."""
        return 1 if self.prometheus_url else self.tick_phases

    @model_validator(mode="after")
    def _check_tick_phases(self) -> Settings:
        # the default is pod-scrape mode's; with Prometheus it is 1 (`effective_tick_phases`)
        if self.tick_phases > 1 and self.prometheus_url and "tick_phases" in self.model_fields_set:
            raise ValueError(
                f"tick_phases={self.tick_phases} spreads pod scrapes over the tick, but "
                f"prometheus_url={self.prometheus_url!r} reads every target in one grouped "
                "query per signal per tick: use tick_phases=1 with Prometheus"
            )
        return self

    @model_validator(mode="after")
    def _check_sharding(self) -> Settings:
        if self.shards > 1 and not self.leader_election:
            raise ValueError(
                f"shards={self.shards} needs leader_election true (the shard Leases are "
                "the leader election); use shards=1 without leader election"
            )
        if self.shard_scope == "held" and (self.shards == 1 or self.mode != "direct"):
            raise ValueError(
                f"shard_scope='held' needs shards > 1 (got {self.shards}) and mode 'direct' "
                f"(got {self.mode!r}): KEDA and the REST API must find every target's "
                "decision on any replica"
            )
        return self

    @classmethod
    def load(cls, **overrides: Any) -> Settings:
        """Settings from the environment and the config file, with ``overrides`` (CLI
        flags) on top; every invalid value is a `ConfigError` naming field, value and rule."""
        try:
            return cls(**overrides)
        except ValidationError as err:
            raise ConfigError("invalid settings", problems=_problems(err)) from None

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings, env_settings, _FileSource(settings_cls), file_secret_settings)
