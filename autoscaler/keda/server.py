"""KEDA external scaler (gRPC, grpcio ``aio``): ``external`` and ``external-push`` triggers.

KEDA asks four things: is the target active (``IsActive``, polled), tell me when that
changes (``StreamIsActive``, pushed), which HPA metric to create (``GetMetricSpec``) and its
value (``GetMetrics``). The answers come from `ControllerState` only (see `value.py` for
the value definition); the stream wakes on every publish of the control loop, so an
activation change reaches KEDA within the tick that made it, not a polling interval later.

scalerMetadata keys (the trigger's ``metadata``): ``llmAutoscaler`` (target name, default:
the ScaledObject's name), ``namespace`` (default: the ScaledObject's namespace),
``targetSize`` (default 1), ``metricName`` (default ``llm-autoscaler-desired-replicas``).
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import grpc
from grpc import aio

from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.keda.gen import externalscaler_pb2 as pb
from autoscaler.keda.gen import externalscaler_pb2_grpc as pb_grpc
from autoscaler.keda.value import (
    NoDataYet,
    ScalerQuery,
    ScalerReading,
    TargetUnknown,
    WrongMode,
    parse_query,
    read_target,
)
from autoscaler.logging import get_logger
from autoscaler.settings import GrpcSettings

log = get_logger(__name__)

_INT64_MAX = (1 << 63) - 1


def _int64(value: float) -> int:
    """KEDA's deprecated int fields are int64: a value beyond it would make protobuf raise
    ValueError, which grpc answers as UNKNOWN; `MAX_TARGET_SIZE` keeps us far below."""
    return min(_INT64_MAX, max(0, math.ceil(value - 1e-9)))


@dataclass(frozen=True, slots=True)
class GrpcTls:
    """Server certificate and key; with ``client_ca_file``, clients must present a
    certificate signed by it (mTLS: KEDA's ``tlsClientCert``/``tlsClientKey``)."""

    cert_file: str
    key_file: str
    client_ca_file: str | None = None

    @classmethod
    def from_settings(cls, s: GrpcSettings) -> GrpcTls | None:
        if not s.tls_cert_file and not s.tls_key_file:
            if s.tls_client_ca_file:
                raise ConfigError("grpc.tls_client_ca_file is set without tls_cert_file/key")
            return None
        if not (s.tls_cert_file and s.tls_key_file):
            raise ConfigError("grpc TLS needs both tls_cert_file and tls_key_file")
        return cls(s.tls_cert_file, s.tls_key_file, s.tls_client_ca_file)

    def credentials(self) -> grpc.ServerCredentials:
        def read(path: str, what: str) -> bytes:
            try:
                return Path(path).read_bytes()
            except OSError as err:
                raise ConfigError(f"grpc TLS {what} {path}: cannot read ({err.strerror})") from None

        ca = read(self.client_ca_file, "client CA") if self.client_ca_file else None
        return grpc.ssl_server_credentials(
            [(read(self.key_file, "key"), read(self.cert_file, "certificate"))],
            root_certificates=ca,
            require_client_auth=ca is not None,
        )


async def _abort(context: aio.ServicerContext[Any, Any], err: Exception) -> NoReturn:
    code = {
        TargetUnknown: grpc.StatusCode.NOT_FOUND,
        WrongMode: grpc.StatusCode.FAILED_PRECONDITION,
        NoDataYet: grpc.StatusCode.UNAVAILABLE,
        ConfigError: grpc.StatusCode.INVALID_ARGUMENT,
    }.get(type(err), grpc.StatusCode.INTERNAL)
    await context.abort(code, str(err))
    raise AssertionError("unreachable: abort raises")  # pragma: no cover


class ExternalScaler(pb_grpc.ExternalScalerServicer):
    """The servicer; ``recheck_interval_s`` only bounds how long a stream goes without
    re-reading when nothing is published (e.g. a target removed), never push latency."""

    def __init__(
        self,
        state: ControllerState,
        *,
        recheck_interval_s: float = 5.0,
        on_stream: Callable[[str], None] | None = None,
    ) -> None:
        self.state = state
        self.recheck_interval_s = recheck_interval_s
        # Told "opened"/"closed" per activation stream (a counter: KEDA reconnects
        # streams routinely, so one log line each at INFO flooded the log).
        self.on_stream = on_stream
        self.streams = {"opened": 0, "closed": 0}

    def _stream_event(self, event: str, ref: TargetRef) -> None:
        self.streams[event] += 1
        log.debug(f"keda_stream_{event}", target=str(ref))
        if self.on_stream is not None:
            self.on_stream(event)

    def _query(self, ref: pb.ScaledObjectRef) -> ScalerQuery:
        return parse_query(ref.name, ref.namespace, dict(ref.scalerMetadata))

    async def _read(
        self, ref: pb.ScaledObjectRef, context: aio.ServicerContext[Any, Any]
    ) -> tuple[ScalerQuery, ScalerReading]:
        try:
            query = self._query(ref)
            return query, read_target(self.state, query.ref, query.target_size)
        except (TargetUnknown, WrongMode, NoDataYet, ConfigError) as err:
            await _abort(context, err)

    async def IsActive(
        self, request: pb.ScaledObjectRef, context: aio.ServicerContext[Any, Any]
    ) -> pb.IsActiveResponse:
        _, reading = await self._read(request, context)
        return pb.IsActiveResponse(result=reading.active)

    async def StreamIsActive(
        self, request: pb.ScaledObjectRef, context: aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[pb.IsActiveResponse]:
        query, reading = await self._read(request, context)  # unknown target: fail at once
        self._stream_event("opened", query.ref)
        try:
            async for response in self._stream(query, reading, context):
                yield response
        finally:
            self._stream_event("closed", query.ref)

    async def _stream(
        self,
        query: ScalerQuery,
        reading: ScalerReading,
        context: aio.ServicerContext[Any, Any],
    ) -> AsyncIterator[pb.IsActiveResponse]:
        last = reading.active
        yield pb.IsActiveResponse(result=last)
        while True:
            # Read, then wait, with no await in between: a publish that landed while the
            # last message was being sent (the generator is suspended at its yield) is
            # seen here, and one after the read wakes the wait (one event loop).
            try:
                active = read_target(self.state, query.ref, query.target_size).active
            except NoDataYet:
                active = last  # hold: say nothing rather than "inactive"
            except (TargetUnknown, WrongMode) as err:
                await _abort(context, err)
            if active != last:
                last = active
                log.info("keda_activation_pushed", target=str(query.ref), active=active)
                yield pb.IsActiveResponse(result=active)
                continue
            await self.state.wait_for_change(self.recheck_interval_s)

    async def GetMetricSpec(
        self, request: pb.ScaledObjectRef, context: aio.ServicerContext[Any, Any]
    ) -> pb.GetMetricSpecResponse:
        try:
            query = self._query(request)
        except ConfigError as err:
            await _abort(context, err)
        spec = pb.MetricSpec(
            metricName=query.metric_name,
            targetSize=max(1, min(_INT64_MAX, round(query.target_size))),
            targetSizeFloat=query.target_size,
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetrics(
        self, request: pb.GetMetricsRequest, context: aio.ServicerContext[Any, Any]
    ) -> pb.GetMetricsResponse:
        query, reading = await self._read(request.scaledObjectRef, context)
        asked = request.metricName
        if asked and asked != query.metric_name and not asked.endswith(f"-{query.metric_name}"):
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"unknown metricName {asked!r}; this scaler serves {query.metric_name!r}",
            )
        value = reading.value
        mv = pb.MetricValue(
            metricName=query.metric_name,
            metricValue=_int64(value),  # deprecated int: never rounds down
            metricValueFloat=value,
        )
        return pb.GetMetricsResponse(metricValues=[mv])


@dataclass
class GrpcServerHandle:
    host: str
    port: int
    server: aio.Server
    scaler: ExternalScaler | None = None

    async def stop(self, grace_s: float = 1.0) -> None:
        await self.server.stop(grace_s)

    @property
    def target(self) -> str:
        return f"{self.host}:{self.port}"


async def serve_grpc(
    state: ControllerState,
    host: str = "127.0.0.1",
    port: int = 0,
    tls: GrpcTls | None = None,
    *,
    recheck_interval_s: float = 5.0,
    on_stream: Callable[[str], None] | None = None,
) -> GrpcServerHandle:
    """Start the external scaler; returns once bound (port 0 picks a free port).
    ``on_stream`` is told "opened"/"closed" per activation stream."""
    server = aio.server()
    scaler = ExternalScaler(state, recheck_interval_s=recheck_interval_s, on_stream=on_stream)
    pb_grpc.add_ExternalScalerServicer_to_server(scaler, server)  # type: ignore[no-untyped-call]
    address = f"{host}:{port}"
    try:
        bound = (
            server.add_secure_port(address, tls.credentials())
            if tls is not None
            else server.add_insecure_port(address)
        )
    except RuntimeError as err:
        raise ConfigError(f"gRPC server cannot bind {address}: {err}") from None
    if bound == 0:
        raise ConfigError(f"gRPC server cannot bind {address}")
    await server.start()
    log.info("keda_grpc_started", host=host, port=bound, tls=tls is not None)
    return GrpcServerHandle(host, bound, server, scaler)
