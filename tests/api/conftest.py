from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.control.state import ControllerState
from autoscaler.store.file import FilePolicyStore
from tests.api.support import READ_TOKEN, WRITE_TOKEN

WRITE = {"Authorization": f"Bearer {WRITE_TOKEN}"}
READ = {"Authorization": f"Bearer {READ_TOKEN}"}


@pytest.fixture
def state() -> ControllerState:
    return ControllerState()


@pytest.fixture
def store(tmp_path: Path) -> FilePolicyStore:
    return FilePolicyStore(tmp_path / "policies.yaml")


@pytest.fixture
def app(state: ControllerState, store: FilePolicyStore) -> FastAPI:
    return create_app(state, store, ApiSettings(write_token=WRITE_TOKEN))


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://api") as c:
        yield c
