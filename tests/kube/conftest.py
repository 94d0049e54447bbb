"""Fixtures: a `LocalKubeAPI` on 127.0.0.1:0 and a kubernetes-asyncio client pointed at it.

Every test that uses the endpoint also checks, at teardown, that each call it received is
granted by `autoscaler.kube.rbac.REQUIRED_RULES` (so RBAC cannot drift from the code).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from autoscaler.kube.config import api_client_for
from autoscaler.kube.localapi import LocalKubeAPI
from autoscaler.kube.rbac import allowed

ALL_CALLS: list[Any] = []


def uncovered_calls(api: LocalKubeAPI) -> list[str]:
    return sorted(
        {
            f"{c.verb} {c.group or 'core'}/{c.resource}"
            for c in api.calls
            if not allowed(c.group, c.resource, c.verb)
        }
    )


@pytest.fixture
async def kapi() -> AsyncIterator[LocalKubeAPI]:
    async with LocalKubeAPI(port=0) as api:
        yield api
    ALL_CALLS.extend(api.calls)
    assert uncovered_calls(api) == [], "calls not granted by REQUIRED_RULES"


@pytest.fixture
async def kclient(kapi: LocalKubeAPI) -> AsyncIterator[ApiClient]:
    async with api_client_for(kapi.url) as api:
        yield api


class FakeSleep:
    """Records requested delays instead of sleeping."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay_s: float) -> None:
        self.delays.append(delay_s)


@pytest.fixture
def fake_sleep() -> FakeSleep:
    return FakeSleep()


Factory = Callable[..., dict[str, Any]]
