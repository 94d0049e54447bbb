from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from grpc import aio

from autoscaler.control.state import ControllerState
from autoscaler.keda.gen import externalscaler_pb2_grpc as pb_grpc
from autoscaler.keda.server import GrpcServerHandle, serve_grpc


@pytest.fixture
def state() -> ControllerState:
    return ControllerState()


@pytest.fixture
async def server(state: ControllerState) -> AsyncIterator[GrpcServerHandle]:
    # A huge recheck interval: anything a stream sends must come from a publish.
    handle = await serve_grpc(state, "127.0.0.1", 0, recheck_interval_s=3600.0)
    yield handle
    await handle.stop(0)


@pytest.fixture
async def stub(server: GrpcServerHandle) -> AsyncIterator[pb_grpc.ExternalScalerStub]:
    async with aio.insecure_channel(server.target) as channel:
        yield pb_grpc.ExternalScalerStub(channel)
