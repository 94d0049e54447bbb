"""KEDA metrics-api endpoint: the value makes KEDA's HPA land on the desired replicas."""

from __future__ import annotations

import math

import httpx
import pytest

from autoscaler.control.state import ControllerState
from autoscaler.domain import Reason, TargetRef
from tests.api.support import decision, observation, publish, register, spec

REF = TargetRef("llm", "chat")


def hpa_average_value_replicas(value: float, target_size: float) -> int:
    """What an HPA External AverageValue metric asks for (outside its tolerance band)."""
    return math.ceil(value / target_size)


@pytest.mark.parametrize(("desired", "target_size"), [(1, 1.0), (7, 1.0), (3, 2.5), (12, 100.0)])
async def test_value_lands_hpa_on_desired_replicas(
    client: httpx.AsyncClient, state: ControllerState, desired: int, target_size: float
) -> None:
    register(state, spec())
    await publish(state, REF, t=1.0, current=2, desired=desired)
    r = await client.get("/v1/keda/llm/chat", params={"targetSize": target_size})
    body = r.json()
    assert body["targetSize"] == target_size
    assert hpa_average_value_replicas(body["value"], target_size) == desired


async def test_unknown_target_is_404_direct_mode_is_409(
    client: httpx.AsyncClient, state: ControllerState
) -> None:
    r = await client.get("/v1/keda/llm/chat")
    assert r.status_code == 404
    assert "llm/chat" in r.json()["detail"]
    register(state, spec(mode="direct"))
    r = await client.get("/v1/keda/llm/chat")
    assert r.status_code == 409
    assert "direct" in r.json()["detail"]


async def test_missing_data_holds_current_never_zero(
    client: httpx.AsyncClient, state: ControllerState
) -> None:
    status = register(state, spec())
    r = await client.get("/v1/keda/llm/chat")
    assert r.status_code == 503  # nothing observed: fail the read, KEDA holds
    assert r.headers["retry-after"] == "1"
    status.observations.append(observation(1.0, current=3))
    body = (await client.get("/v1/keda/llm/chat")).json()
    assert (body["value"], body["held"], body["active"]) == (3.0, True, True)
    d = decision(2.0, current=4, desired=0, active=False, reason=Reason.HOLD_MISSING_DATA)
    await state.publish(REF, observation(2.0, current=4), d)
    body = (await client.get("/v1/keda/llm/chat")).json()
    assert (body["value"], body["active"]) == (4.0, True)


async def test_bad_target_size_is_422(client: httpx.AsyncClient, state: ControllerState) -> None:
    register(state, spec())
    for bad in ("0", "-1", "abc", "nan"):
        r = await client.get("/v1/keda/llm/chat", params={"targetSize": bad})
        assert r.status_code == 422, bad
        assert "targetSize" in r.json()["problems"][0]
