"""`llm-autoscaler signals`: one JSON line per file, null for absent, exit 1 on bad pages."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autoscaler.cli import main

FIXTURES = Path(__file__).parents[1] / "fixtures" / "metrics"


def test_prints_one_line_per_file_with_null_for_absent(capsys: pytest.CaptureFixture[str]) -> None:
    files = [str(FIXTURES / "vllm_v1_0.10.txt"), str(FIXTURES / "tgi.txt")]
    assert main(["signals", *files]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["engine"] for x in lines] == ["vllm", "tgi"]
    assert lines[0]["waiting"] is not None and lines[0]["ttft_count"] > 0
    assert lines[1]["kv_cache_usage"] is None and lines[1]["ttft_count"] is None


def test_invalid_file_reports_file_and_line_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text('# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{a="1" 3\n')
    good = str(FIXTURES / "sglang.txt")
    assert main(["signals", str(bad), good]) == 1
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert lines[0]["file"] == str(bad) and lines[0]["line"] == 2 and "error" in lines[0]
    assert lines[1]["engine"] == "sglang"
