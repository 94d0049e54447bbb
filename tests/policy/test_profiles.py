"""Named profiles: whole, valid policy documents that differ from the defaults only where
docs/policy.md says they do."""

from __future__ import annotations

import pytest

from autoscaler.policy.profiles import PROFILES, cost_first, profile, recommended
from autoscaler.policy.schema import Policy


def test_every_profile_round_trips_through_the_schema() -> None:
    for name in PROFILES:
        p = profile(name)
        assert Policy.model_validate(p.model_dump()) == p


def test_recommended_is_the_schema_defaults_plus_prediction_and_a_450_s_window() -> None:
    p = recommended()
    assert p.metrics == Policy().metrics
    assert p.prediction is not None and p.prediction.enabled
    assert p.behavior.scale_down is not None
    assert p.behavior.scale_down.stabilization_window_seconds == 450


def test_cost_first_raises_the_per_replica_targets_and_shortens_the_window() -> None:
    base = {m.signal: m for m in recommended().metrics}
    cost = {m.signal: m for m in cost_first().metrics}
    assert set(cost) == set(base)
    assert cost["prompt_tokens_per_s"].target == 1.5 * base["prompt_tokens_per_s"].target
    assert cost["waiting"].target == 2 * base["waiting"].target
    assert cost["running"].target == 2 * base["running"].target
    assert cost["kv_cache_usage"] == base["kv_cache_usage"]
    assert cost_first().behavior.scale_down is not None
    assert cost_first().behavior.scale_down.stabilization_window_seconds == 300


def test_unknown_profile_names_the_choices() -> None:
    with pytest.raises(ValueError, match="profile: value 'fast' must be one of"):
        profile("fast")
