"""Suite-wide fixtures."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import structlog


@pytest.fixture(autouse=True)
def _logging_left_as_found() -> Iterator[None]:
    """A test that configures logging (a benchmark's ``main`` sets WARNING, the demo
    points every logger at a file) must not change what later tests log or capture:
    structlog's configuration and the root logger's handlers and level are put back."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)
