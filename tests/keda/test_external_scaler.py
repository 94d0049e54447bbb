"""KEDA external scaler over a real grpcio client and server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import math

import grpc
import pytest

from autoscaler.control.state import ControllerState
from autoscaler.domain import Reason, TargetRef
from autoscaler.keda.gen import externalscaler_pb2 as pb
from autoscaler.keda.gen import externalscaler_pb2_grpc as pb_grpc
from tests.api.support import decision, observation, publish, register, spec

REF = TargetRef("llm", "chat")


def so_ref(name: str = "chat", namespace: str = "llm", **metadata: str) -> pb.ScaledObjectRef:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata)


def hpa_replicas(value: float, target_size: float) -> int:
    """HPA External metric, AverageValue: ceil(value / target) (outside tolerance)."""
    return math.ceil(value / target_size)


async def test_is_active_follows_the_latest_decision(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    register(state, spec())
    await publish(state, REF, t=1.0, current=1, desired=1, active=True)
    assert (await stub.IsActive(so_ref())).result is True
    await publish(state, REF, t=2.0, current=1, desired=0, active=False)
    assert (await stub.IsActive(so_ref())).result is False


@pytest.mark.parametrize(("desired", "size"), [(1, "1"), (6, "1"), (4, "2.5"), (13, "100")])
async def test_get_metrics_lands_hpa_on_desired_replicas(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState, desired: int, size: str
) -> None:
    register(state, spec())
    await publish(state, REF, t=1.0, current=3, desired=desired)
    ref = so_ref(targetSize=size)
    metric_spec = (await stub.GetMetricSpec(ref)).metricSpecs[0]
    assert metric_spec.targetSizeFloat == float(size)
    assert metric_spec.targetSize >= 1  # deprecated int is set too
    resp = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref, metricName=metric_spec.metricName)
    )
    mv = resp.metricValues[0]
    assert mv.metricName == metric_spec.metricName
    assert hpa_replicas(mv.metricValueFloat, metric_spec.targetSizeFloat) == desired
    assert mv.metricValue == math.ceil(mv.metricValueFloat)


async def test_scaler_metadata_selects_the_target(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    register(state, spec(namespace="inference", name="llama"))
    await publish(state, TargetRef("inference", "llama"), t=1.0, current=2, desired=5)
    ref = so_ref(name="my-scaledobject", namespace="apps", llmAutoscaler="llama")
    ref.scalerMetadata["namespace"] = "inference"
    resp = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref, metricName=""))
    assert resp.metricValues[0].metricValueFloat == 5.0


async def test_unknown_target_is_not_found_with_a_clear_message(
    stub: pb_grpc.ExternalScalerStub,
) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.IsActive(so_ref(name="missing"))
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert "llm/missing" in (err.value.details() or "")
    assert "llmAutoscaler" in (err.value.details() or "")


async def test_direct_mode_target_is_refused(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    register(state, spec(mode="direct"))
    await publish(state, REF, t=1.0, current=2, desired=3)
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so_ref()))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION


async def test_bad_metadata_is_invalid_argument(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    register(state, spec())
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stub.GetMetricSpec(so_ref(targetSize="-2"))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "targetSize" in (err.value.details() or "")


async def test_missing_data_holds_current_and_never_reports_zero(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    status = register(state, spec())
    with pytest.raises(grpc.aio.AioRpcError) as err:  # nothing observed yet
        await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so_ref()))
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE  # KEDA: error, not zero
    status.observations.append(observation(1.0, current=3))  # observed, no decision yet
    resp = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so_ref()))
    assert resp.metricValues[0].metricValueFloat == 3.0
    assert (await stub.IsActive(so_ref())).result is True
    hold = decision(2.0, current=4, desired=0, active=False, reason=Reason.HOLD_MISSING_DATA)
    await state.publish(REF, observation(2.0, current=4), hold)
    resp = await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=so_ref()))
    assert resp.metricValues[0].metricValueFloat == 4.0
    assert (await stub.IsActive(so_ref())).result is True


async def _next(stream: grpc.aio.UnaryStreamCall, timeout_s: float) -> pb.IsActiveResponse:
    msg = await asyncio.wait_for(stream.read(), timeout_s)
    assert msg is not grpc.aio.EOF
    return msg


async def test_stream_pushes_activation_change_right_after_the_publish(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    """The server re-reads only on a publish (recheck interval: 1 h), so a message that
    arrives after the activating publish, with no further tick, was pushed by that tick."""
    register(state, spec())
    await publish(state, REF, t=0.0, current=0, desired=0, active=False)
    stream = stub.StreamIsActive(so_ref())
    assert (await _next(stream, 5.0)).result is False  # current state on open
    for tick in range(1, 4):  # unchanged activation: nothing is sent
        await publish(state, REF, t=float(tick), current=0, desired=0, active=False)
    pending = asyncio.ensure_future(_next(stream, 30.0))
    for _ in range(20):  # let the server run: unchanged ticks must not have sent anything
        await asyncio.sleep(0)
    assert not pending.done()
    await publish(state, REF, t=4.0, current=0, desired=1, active=True)  # the activating tick
    assert (await pending).result is True
    await publish(state, REF, t=5.0, current=1, desired=1, active=True)
    await publish(state, REF, t=6.0, current=1, desired=0, active=False)
    assert (await _next(stream, 5.0)).result is False  # the True at t=5 sent nothing
    stream.cancel()


async def test_stream_sees_a_publish_made_while_its_last_message_was_being_sent(
    state: ControllerState,
) -> None:
    """The stream generator is suspended at its yield while grpc sends a message; an
    activation published then must still be pushed (it once waited for the next publish,
    which with a 1 h recheck meant KEDA never heard of the activation)."""
    from collections.abc import AsyncGenerator
    from typing import Any, cast

    from autoscaler.keda.server import ExternalScaler
    from autoscaler.keda.value import parse_query, read_target

    register(state, spec())
    await publish(state, REF, t=0.0, current=0, desired=0, active=False)
    scaler = ExternalScaler(state, recheck_interval_s=3600.0)
    query = parse_query("chat", "llm", {})
    stream = cast(
        AsyncGenerator[pb.IsActiveResponse, None],
        scaler._stream(query, read_target(state, REF, 1.0), cast(Any, None)),
    )
    assert (await anext(stream)).result is False  # suspended at the first yield
    await publish(state, REF, t=1.0, current=0, desired=1, active=True)  # lands meanwhile
    assert (await asyncio.wait_for(anext(stream), 5.0)).result is True
    await publish(state, REF, t=2.0, current=1, desired=0, active=False)  # and again
    assert (await asyncio.wait_for(anext(stream), 5.0)).result is False
    await stream.aclose()


async def test_stream_for_unknown_target_fails_at_once(
    stub: pb_grpc.ExternalScalerStub,
) -> None:
    stream = stub.StreamIsActive(so_ref(name="missing"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await stream.read()
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


async def test_many_streams_all_receive_one_push(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    register(state, spec())
    await publish(state, REF, t=0.0, current=0, desired=0, active=False)
    streams = [stub.StreamIsActive(so_ref()) for _ in range(5)]
    for s in streams:
        assert (await _next(s, 5.0)).result is False
    await publish(state, REF, t=1.0, current=0, desired=1, active=True)
    results = await asyncio.gather(*(_next(s, 5.0) for s in streams))
    assert all(r.result for r in results)
    for s in streams:
        s.cancel()


@pytest.mark.parametrize(
    "size",
    ["1e300", "1e10", "inf", "1" * 5000, "5e-324", "0", "\u0661", "1_000", " 5", "0x10", "-2"],
)
async def test_target_size_beyond_the_http_cap_is_invalid_argument_naming_the_field(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState, size: str
) -> None:
    # Before: 1e300 got past parsing and protobuf's int64 raised, answered as UNKNOWN
    # "Value out of range" by GetMetrics and GetMetricSpec.
    register(state, spec())
    await publish(state, REF, t=1.0, current=3, desired=4)
    ref = so_ref(targetSize=size)
    for call in (
        stub.GetMetricSpec(ref),
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref)),
        stub.IsActive(ref),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details() or ""
        assert "targetSize" in details and "ASCII decimal" in details
        assert "[1e-06, 1e+09]" in details
        assert len(details) < 300  # a 5,000-digit value is clipped, not echoed


async def test_target_size_at_the_cap_serves_an_int64_metric_value(
    stub: pb_grpc.ExternalScalerStub, state: ControllerState
) -> None:
    register(state, spec(maxReplicaCount=10_000))
    await publish(state, REF, t=1.0, current=3, desired=10_000)
    ref = so_ref(targetSize="1e9")
    metric_spec = (await stub.GetMetricSpec(ref)).metricSpecs[0]
    assert metric_spec.targetSize == 1_000_000_000
    mv = (await stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref))).metricValues[0]
    assert mv.metricValue == 10_000 * 1_000_000_000
    assert hpa_replicas(mv.metricValueFloat, metric_spec.targetSizeFloat) == 10_000


async def test_activation_streams_are_counted_and_logged_at_debug(
    state: ControllerState, caplog: pytest.LogCaptureFixture
) -> None:
    from autoscaler.keda.server import serve_grpc

    events: list[str] = []
    register(state, spec())
    await publish(state, REF, t=1.0, current=3, desired=4)
    handle = await serve_grpc(state, on_stream=events.append)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{handle.port}") as channel:
            stub = pb_grpc.ExternalScalerStub(channel)  # type: ignore[no-untyped-call]
            for _ in range(3):
                call = stub.StreamIsActive(so_ref())
                first = await call.read()
                assert first.result is True
                call.cancel()
        for _ in range(200):
            if len(events) == 6:
                break
            await asyncio.sleep(0.01)
        assert sorted(events) == ["closed"] * 3 + ["opened"] * 3
        assert handle.scaler is not None and handle.scaler.streams == {"opened": 3, "closed": 3}
        infos = [r for r in caplog.records if "keda_stream" in r.getMessage()]
        assert all(r.levelname == "DEBUG" for r in infos)
    finally:
        await handle.stop()
