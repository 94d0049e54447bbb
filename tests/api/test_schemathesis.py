"""Property-based run of the OpenAPI spec (schemathesis): no input makes the server fail.

Bounded on purpose (a few examples per operation) so it stays a few seconds; writes are
authorised so that valid bodies reach the store and the decision code, not just the 401.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    status_code_conformance,
)

from autoscaler.api.app import create_app
from autoscaler.api.security import ApiSettings
from autoscaler.control.state import ControllerState
from autoscaler.store.file import FilePolicyStore
from tests.api.support import WRITE_TOKEN, decision, observation, register, spec


def _build_app(tmp: Path) -> FastAPI:
    state = ControllerState()
    state.ready = True
    for ns, name in (("llm", "chat"), ("a", "a")):
        status = register(state, spec(namespace=ns, name=name))
        for i in range(20):
            d = decision(float(i), current=2, desired=2 + i % 3)
            status.observations.append(observation(float(i), current=2, waiting=8.0 + i))
            status.history.append(d)
            status.last_decision = d
    return create_app(state, FilePolicyStore(tmp / "p.yaml"), ApiSettings(WRITE_TOKEN))


_TMP = tempfile.TemporaryDirectory(prefix="schemathesis-")
schema = schemathesis.openapi.from_asgi("/openapi.json", _build_app(Path(_TMP.name)))


@pytest.fixture(scope="module", autouse=True)
def _cleanup_tmp() -> Iterator[None]:
    yield
    _TMP.cleanup()


@schema.parametrize()
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api_never_answers_with_a_server_error(case: schemathesis.Case) -> None:
    case.call_and_validate(
        headers={"Authorization": f"Bearer {WRITE_TOKEN}"},
        checks=[not_a_server_error, status_code_conformance, content_type_conformance],
    )
