"""The planner's outputs are bit-for-bit those recorded before its per-tick CPU work
(issue 16): speed changes may not change a forecast, a capacity or a number."""

from __future__ import annotations

import json

import pytest

from tests.forecast.golden import PLANNER_CONFIGS, PLANNER_FIXTURE, digests, planner_outputs


@pytest.mark.parametrize("name", sorted(PLANNER_CONFIGS))
def test_planner_outputs_match_the_recorded_golden_sequence(name: str) -> None:
    golden = json.loads(PLANNER_FIXTURE.read_text())[name]
    got = digests(planner_outputs(PLANNER_CONFIGS[name]))
    assert got["last"] == golden["last"]
    for k, (ours, theirs) in enumerate(zip(got["chunks"], golden["chunks"], strict=True)):
        assert ours == theirs, f"{name}: outputs differ from tick {k * 200} on"
