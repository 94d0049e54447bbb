"""`llm-autoscaler signals` refuses what the scraper refuses: values out of range (strict
JSON out, never NaN/Infinity) and pages over the page limit (reads no further)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.cli import main
from autoscaler.commands import signals as command


@pytest.mark.parametrize(
    ("value", "reason"), [("+Inf", "not-finite"), ("NaN", "not-finite"), ("-1e9", "negative")]
)
def test_a_page_with_a_value_out_of_range_is_refused_in_strict_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str, reason: str
) -> None:
    page = tmp_path / "page.txt"
    page.write_text(
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{model_name="m",engine="0"}} {value}\n'
    )
    assert main(["signals", str(page)]) == 1
    out = capsys.readouterr().out
    line = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert "waiting" in line["error"] and reason in line["error"]


def test_an_endless_file_is_read_only_up_to_the_page_limit(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(command, "MAX_PAGE_BYTES", 1024)
    assert main(["signals", "/dev/zero"]) == 1
    line = json.loads(capsys.readouterr().out)
    assert "larger than 1024 bytes" in line["error"]
