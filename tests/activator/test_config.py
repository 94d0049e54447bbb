from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.activator.config import load_config, parse_config
from autoscaler.errors import ConfigError


def test_yaml_file_loads_with_defaults_and_per_target_overrides(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text(
        "defaults: {holdCap: 50}\n"
        "controller: {url: 'http://ctl:8080'}\n"
        "targets:\n"
        "  - {model: m1, namespace: ml, service: llama, holdCap: 5, holdTimeoutS: 30}\n"
        "  - {model: Org/Model-2, endpoints: ['127.0.0.1:9001']}\n"
    )
    cfg = load_config(f)
    a, b = cfg.targets
    assert (cfg.hold_cap(a), cfg.hold_timeout_s(a), a.key) == (5, 30.0, "ml/llama")
    assert (cfg.hold_cap(b), cfg.hold_timeout_s(b), b.key) == (50, 600.0, "default/org-model-2")


@pytest.mark.parametrize(
    ("target", "needle"),
    [
        (
            {"model": "m", "service": "s", "holdCap": 0},
            "targets.0.holdCap: value 0: Input should be greater than or equal to 1",
        ),
        ({"model": "m", "service": "s", "endpoints": ["a:1"]}, "set exactly one of 'service'"),
        ({"model": "m"}, "set exactly one of 'service'"),
        ({"model": "m", "endpoints": ["nohost"]}, "endpoints: value 'nohost' must be 'host:port'"),
        ({"model": "m", "service": "Bad_Name"}, "targets.0.service: value 'Bad_Name'"),
        ({"model": "m", "service": "s", "holdTimeoutS": -1}, "holdTimeoutS: value -1"),
        (
            {"model": "m", "service": "s", "colour": "red"},
            "targets.0.colour: value 'red': Extra inputs",
        ),
    ],
)
def test_bad_target_is_refused_naming_field_value_and_rule(
    target: dict[str, object], needle: str
) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"targets": [target]})
    assert needle in str(err.value)


def test_duplicate_model_and_empty_targets_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"targets\[1\].model: value 'm' is already targets\[0\]"):
        parse_config({"targets": [{"model": "m", "service": "a"}, {"model": "m", "service": "b"}]})
    with pytest.raises(ConfigError, match="targets: value"):
        parse_config({"targets": []})
