"""The activator's configuration: the targets it fronts, read from a YAML or JSON file.

One file, validated whole with pydantic: an invalid file is refused with one line per
problem naming the field, the value and the rule, so nothing starts half-configured.

```yaml
defaults: {holdCap: 1000, holdTimeoutS: 600, maxConcurrencyPerReplica: 256}
controller: {url: "http://llm-autoscaler.llm-autoscaler:8080"}
targets:
  - model: meta-llama/Llama-3.1-8B-Instruct
    namespace: models
    service: llama-8b          # EndpointSlices labelled kubernetes.io/service-name
    port: 8000
    autoscaler: llama-8b       # the LLMAutoscaler (default: the service name)
    holdCap: 200
  - model: tiny
    endpoints: ["127.0.0.1:9001"]   # fixed pods, readiness probed on /health
    hosts: ["tiny.example.com"]
    pathPrefix: /tiny
```
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autoscaler.errors import ConfigError

DEFAULT_HOLD_CAP: Final = 1000
DEFAULT_HOLD_TIMEOUT_S: Final = 600.0  # above a slow cold start (minutes with node provisioning)
DEFAULT_MAX_CONCURRENCY_PER_REPLICA: Final = 256  # vLLM's default --max-num-seqs
DEFAULT_HEARTBEAT_S: Final = 10.0  # below common proxy idle timeouts (30-60 s)
DEFAULT_RETRY_AFTER_S: Final = 5
_NAME = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Defaults(_Strict):
    hold_cap: int = Field(DEFAULT_HOLD_CAP, ge=1, le=1_000_000, alias="holdCap")
    hold_timeout_s: float = Field(DEFAULT_HOLD_TIMEOUT_S, gt=0, le=86_400, alias="holdTimeoutS")
    max_concurrency_per_replica: int = Field(
        DEFAULT_MAX_CONCURRENCY_PER_REPLICA, ge=1, le=100_000, alias="maxConcurrencyPerReplica"
    )
    heartbeat_s: float = Field(DEFAULT_HEARTBEAT_S, gt=0, le=300, alias="heartbeatS")
    retry_after_s: int = Field(DEFAULT_RETRY_AFTER_S, ge=1, le=3600, alias="retryAfterS")


class TargetConfig(_Strict):
    """One model the activator fronts, and where its pods are."""

    model: str = Field(min_length=1, max_length=256)
    namespace: str = Field("default", pattern=_NAME, max_length=63)
    service: str | None = Field(None, pattern=_NAME, max_length=63)
    endpoints: tuple[str, ...] | None = Field(None, min_length=1)
    port: int = Field(8000, ge=1, le=65535)
    autoscaler: str | None = Field(None, pattern=_NAME, max_length=253)
    hosts: tuple[str, ...] = ()
    path_prefix: str | None = Field(None, pattern=r"^/[^\s]*$", alias="pathPrefix")
    hold_cap: int | None = Field(None, ge=1, le=1_000_000, alias="holdCap")
    hold_timeout_s: float | None = Field(None, gt=0, le=86_400, alias="holdTimeoutS")
    max_concurrency_per_replica: int | None = Field(
        None, ge=1, le=100_000, alias="maxConcurrencyPerReplica"
    )

    @model_validator(mode="after")
    def _one_source(self) -> TargetConfig:
        if (self.service is None) == (self.endpoints is None):
            raise ValueError("set exactly one of 'service' (EndpointSlices) or 'endpoints'")
        for ep in self.endpoints or ():
            host, sep, port = ep.rpartition(":")
            if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
                raise ValueError(f"endpoints: value {ep!r} must be 'host:port'")
        return self

    @property
    def autoscaler_name(self) -> str:
        """The LLMAutoscaler whose held count this target reports."""
        return self.autoscaler or self.service or _dns_label(self.model)

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.autoscaler_name}"


class ControllerLink(_Strict):
    """Where the activator pushes held counts: the controller's REST server. ``service``:
    every Ready pod of the controller's Service (from its EndpointSlices), since each
    replica decides and only the leader writes; ``url``: one address."""

    url: str | None = Field(None, pattern=r"^https?://")
    service: str | None = Field(None, pattern=_NAME, max_length=63)
    namespace: str = Field("llm-autoscaler", pattern=_NAME, max_length=63)
    port: int = Field(8080, ge=1, le=65535)
    token_file: str | None = Field(None, alias="tokenFile")
    resend_s: float = Field(1.0, gt=0, le=60, alias="resendS")

    @model_validator(mode="after")
    def _one(self) -> ControllerLink:
        if self.url is not None and self.service is not None:
            raise ValueError("set at most one of 'url' or 'service'")
        return self


class ActivatorConfig(_Strict):
    defaults: Defaults = Defaults()
    controller: ControllerLink = ControllerLink()
    targets: list[TargetConfig] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> ActivatorConfig:
        seen: dict[str, int] = {}
        for i, t in enumerate(self.targets):
            if t.model in seen:
                raise ValueError(
                    f"targets[{i}].model: value {t.model!r} is already targets[{seen[t.model]}]"
                    "; each model is served by one target"
                )
            seen[t.model] = i
        return self

    def hold_cap(self, t: TargetConfig) -> int:
        return t.hold_cap if t.hold_cap is not None else self.defaults.hold_cap

    def hold_timeout_s(self, t: TargetConfig) -> float:
        return t.hold_timeout_s if t.hold_timeout_s is not None else self.defaults.hold_timeout_s

    def max_concurrency(self, t: TargetConfig) -> int:
        if t.max_concurrency_per_replica is not None:
            return t.max_concurrency_per_replica
        return self.defaults.max_concurrency_per_replica


def _dns_label(model: str) -> str:
    out = "".join(c if c.isalnum() else "-" for c in model.lower()).strip("-")
    return out[:63].strip("-") or "model"


def _problems(err: ValidationError) -> list[str]:
    out = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(root)"
        value = e.get("input")
        shown = repr(value) if not isinstance(value, dict | list) else type(value).__name__
        if len(shown) > 80:
            shown = shown[:77] + "..."
        msg = str(e["msg"]).removeprefix("Value error, ")
        out.append(f"{where}: value {shown}: {msg}")
    return out


def parse_config(data: Any, source: str = "config") -> ActivatorConfig:
    """Validate a parsed document; `ConfigError` lists every problem."""
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: must be a mapping with 'targets', got {type(data).__name__}")
    try:
        return ActivatorConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid activator configuration", _problems(err)) from None


def load_config(path: str | Path) -> ActivatorConfig:
    """Read a YAML (or JSON, a subset) file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{p}: cannot read activator configuration ({err.strerror})") from None
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as err:
        kind = "JSON" if p.suffix == ".json" else "YAML"
        raise ConfigError(f"{p}: not valid {kind}: {err}") from None
    return parse_config(data, str(p))
