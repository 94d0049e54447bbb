"""TLS and mTLS for the external scaler (KEDA ``caCert`` / ``tlsClientCert``), with certs
made by the openssl CLI for this test only."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc import aio

from autoscaler.control.state import ControllerState
from autoscaler.domain import TargetRef
from autoscaler.errors import ConfigError
from autoscaler.keda.gen import externalscaler_pb2 as pb
from autoscaler.keda.gen import externalscaler_pb2_grpc as pb_grpc
from autoscaler.keda.server import GrpcTls, serve_grpc
from autoscaler.settings import GrpcSettings
from tests.api.support import publish, register, spec

REF = pb.ScaledObjectRef(name="chat", namespace="llm")
OPTIONS = (("grpc.ssl_target_name_override", "localhost"),)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _issue(d: Path, name: str, usage: str) -> None:
    _openssl(
        "req",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        f"{name}.key",
        "-out",
        f"{name}.csr",
        "-subj",
        "/CN=localhost",
        cwd=d,
    )
    ext = d / f"{name}.ext"
    ext.write_text(f"subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage={usage}\n")
    _openssl(
        "x509",
        "-req",
        "-in",
        f"{name}.csr",
        "-CA",
        "ca.crt",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-out",
        f"{name}.crt",
        "-days",
        "1",
        "-extfile",
        ext.name,
        cwd=d,
    )


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.crt",
        "-days",
        "1",
        "-subj",
        "/CN=test-ca",
        cwd=d,
    )
    _issue(d, "server", "serverAuth")
    _issue(d, "client", "clientAuth")
    return d


@pytest.fixture
async def state() -> ControllerState:
    s = ControllerState()
    register(s, spec())
    await publish(s, TargetRef("llm", "chat"), t=1.0, current=1, desired=3)
    return s


def _tls(certs: Path, mtls: bool) -> GrpcTls:
    ca = str(certs / "ca.crt") if mtls else None
    return GrpcTls(str(certs / "server.crt"), str(certs / "server.key"), ca)


@pytest.fixture
async def tls_port(state: ControllerState, certs: Path) -> AsyncIterator[int]:
    handle = await serve_grpc(state, "127.0.0.1", 0, tls=_tls(certs, mtls=False))
    yield handle.port
    await handle.stop(0)


@pytest.fixture
async def mtls_port(state: ControllerState, certs: Path) -> AsyncIterator[int]:
    handle = await serve_grpc(state, "127.0.0.1", 0, tls=_tls(certs, mtls=True))
    yield handle.port
    await handle.stop(0)


async def _is_active(channel: aio.Channel) -> bool:
    resp = await pb_grpc.ExternalScalerStub(channel).IsActive(REF, timeout=5)
    return bool(resp.result)


async def test_tls_client_trusting_the_ca_gets_answers(certs: Path, tls_port: int) -> None:
    creds = grpc.ssl_channel_credentials(root_certificates=(certs / "ca.crt").read_bytes())
    async with aio.secure_channel(f"127.0.0.1:{tls_port}", creds, options=OPTIONS) as ch:
        assert await _is_active(ch) is True


async def test_plaintext_client_is_refused_by_tls_server(tls_port: int) -> None:
    async with aio.insecure_channel(f"127.0.0.1:{tls_port}") as ch:
        with pytest.raises(aio.AioRpcError) as err:
            await _is_active(ch)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_mtls_requires_a_client_certificate(certs: Path, mtls_port: int) -> None:
    ca = (certs / "ca.crt").read_bytes()
    target = f"127.0.0.1:{mtls_port}"
    no_cert = grpc.ssl_channel_credentials(root_certificates=ca)
    async with aio.secure_channel(target, no_cert, options=OPTIONS) as ch:
        with pytest.raises(aio.AioRpcError) as err:
            await _is_active(ch)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    with_cert = grpc.ssl_channel_credentials(
        root_certificates=ca,
        private_key=(certs / "client.key").read_bytes(),
        certificate_chain=(certs / "client.crt").read_bytes(),
    )
    async with aio.secure_channel(target, with_cert, options=OPTIONS) as ch:
        assert await _is_active(ch) is True


def test_tls_settings_need_cert_and_key_together() -> None:
    assert GrpcTls.from_settings(GrpcSettings()) is None
    with pytest.raises(ConfigError, match="both"):
        GrpcTls.from_settings(GrpcSettings(tls_cert_file="/x.crt"))
    with pytest.raises(ConfigError, match="without"):
        GrpcTls.from_settings(GrpcSettings(tls_client_ca_file="/ca.crt"))
    with pytest.raises(ConfigError, match="cannot read"):
        GrpcTls("/nonexistent.crt", "/nonexistent.key").credentials()
