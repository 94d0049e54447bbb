"""The controller's logging imports structlog without rich (issue 16: ~3 MB of RSS),
rich stays importable afterwards, and a logged exception still shows its traceback in
both formats."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _run(code: str) -> dict[str, object]:
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def test_the_controller_imports_neither_rich_nor_pygments_and_rich_stays_importable() -> None:
    got = _run(
        "import json, sys, autoscaler.app\n"
        "before = sorted(m for m in ('rich', 'pygments') if m in sys.modules)\n"
        "import rich.console\n"
        "print(json.dumps({'before': before, 'after': 'rich' in sys.modules}))"
    )
    assert got == {"before": [], "after": True}


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_a_logged_exception_keeps_its_traceback(fmt: str) -> None:
    got = _run(
        "import io, json, sys\n"
        "from autoscaler.logging import configure_logging, get_logger\n"
        "buf = io.StringIO()\n"
        f"configure_logging({fmt!r}, 'INFO', buf)\n"
        "try:\n"
        "    1 / 0\n"
        "except ZeroDivisionError:\n"
        "    get_logger('t').exception('boom')\n"
        "print(json.dumps({'text': buf.getvalue(), 'rich': 'rich' in sys.modules}))"
    )
    text = str(got["text"])
    assert "boom" in text and "Traceback" in text and "ZeroDivisionError" in text
    assert got["rich"] is False
