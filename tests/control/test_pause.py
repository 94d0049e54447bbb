"""A paused target (KEDA's paused / paused-replicas, on our annotation group): no replica
write while paused, one write to the paused count, the policy's wish in the message, and
scaling resumes when the annotation goes. Fake clock, in-memory ports."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from autoscaler.control.loop import ControlLoop
from autoscaler.domain import Decision, Reason
from autoscaler.errors import ConfigError
from autoscaler.policy.status import (
    PAUSED_ANNOTATION,
    PAUSED_REPLICAS_ANNOTATION,
    Pause,
    parse_pause,
    paused_decision,
)
from autoscaler.store.base import StoredTarget
from autoscaler.target import object_to_spec
from tests.control.test_loop import make


def _paused(loop: ControlLoop, pause: Pause | None) -> None:
    (st,) = loop.state.targets.values()
    loop.set_targets([StoredTarget(replace(st.spec, pause=pause), "2")])


async def test_paused_at_the_current_count_writes_nothing_under_load() -> None:
    loop, cluster, signals, _, clock = make()
    _paused(loop, Pause())
    signals.values = {"waiting": 40.0}  # the policy wants 10
    for _ in range(5):
        (decision,) = await loop.tick()
        await clock.advance(1.0)
    assert cluster.writes == []
    assert decision.reason == Reason.PAUSED and decision.desired_replicas == 2
    wish = re.search(r"the policy asks for (\d+) \(scale-up\)", decision.message)
    assert wish is not None and int(wish.group(1)) > 2, decision.message


async def test_paused_replicas_writes_that_count_once_then_freezes() -> None:
    loop, cluster, signals, _, clock = make()
    _paused(loop, Pause(replicas=5))
    signals.values = {"waiting": 0.0}  # the policy would go down
    for _ in range(4):
        await loop.tick()
        await clock.advance(1.0)
    assert cluster.writes == [5]


async def test_removing_the_pause_resumes_scaling() -> None:
    loop, cluster, signals, _, clock = make()
    _paused(loop, Pause())
    signals.values = {"waiting": 40.0}
    await loop.tick()
    await clock.advance(1.0)
    _paused(loop, None)
    await loop.tick()
    assert cluster.writes and cluster.writes[-1] > 2


def _obj(annotations: dict[str, str]) -> dict[str, object]:
    return {
        "metadata": {"name": "llama", "namespace": "serving", "annotations": annotations},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "llama"},
            "metrics": [{"signal": "waiting", "target": 4}],
        },
    }


@pytest.mark.parametrize(
    ("annotations", "pause"),
    [
        ({}, None),
        ({PAUSED_ANNOTATION: "false"}, None),
        ({PAUSED_ANNOTATION: "true"}, Pause()),
        ({PAUSED_ANNOTATION: "True"}, Pause()),
        ({PAUSED_REPLICAS_ANNOTATION: "0"}, Pause(0)),
        ({PAUSED_ANNOTATION: "false", PAUSED_REPLICAS_ANNOTATION: "3"}, Pause(3)),  # KEDA
    ],
)
def test_annotations_become_the_specs_pause(annotations: dict[str, str], pause: Pause) -> None:
    assert object_to_spec(_obj(annotations)).pause == pause


@pytest.mark.parametrize(
    ("annotations", "says"),
    [
        ({PAUSED_REPLICAS_ANNOTATION: "-1"}, "paused-replicas]: value '-1' must be a whole number"),
        ({PAUSED_REPLICAS_ANNOTATION: "two"}, "value 'two' must be a whole number >= 0"),
        ({PAUSED_ANNOTATION: "yes"}, """paused]: value 'yes' must be "true" or "false\""""),
    ],
)
def test_a_bad_pause_value_is_an_invalid_object_naming_field_value_and_rule(
    annotations: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError, match=None) as err:
        object_to_spec(_obj(annotations))
    assert says in str(err.value)
    assert parse_pause(annotations)[1]


def test_paused_decision_keeps_the_current_count_and_says_how_to_resume() -> None:
    d = Decision(t=0, current_replicas=3, desired_replicas=7, reason=Reason.SCALE_UP,
                 message="up", active=True, limits=(Reason.RATE_LIMITED,), panic=True)  # fmt: skip
    p = paused_decision(d, Pause())
    assert (p.desired_replicas, p.reason, p.limits, p.panic) == (3, Reason.PAUSED, (), False)
    assert "remove the annotation to resume" in p.message and PAUSED_ANNOTATION in p.message
