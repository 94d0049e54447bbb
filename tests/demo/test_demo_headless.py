"""`llm-autoscaler demo --headless` from a clean process: it must exit 0 after scaling the
emulated Deployment up through the burst and down in the quiet after it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_headless_demo_scales_up_and_down_and_exits_zero(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler",
            "--log-level",
            "WARNING",
            "demo",
            "--headless",
            "--duration",
            "50",
            "--speed",
            "8",
            "--http-port",
            "0",
            "--grpc-port",
            "0",
            "--summary",
            str(summary_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "dashboard: http://127.0.0.1:" in proc.stdout
    summary = json.loads(summary_path.read_text())
    assert summary["scale_ups"] >= 1 and summary["scale_downs"] >= 1, summary
    assert summary["max_replicas"] > 1
    assert summary["load"]["failed"] == 0 and summary["load"]["ok"] > 100
    assert summary["first_scale_up"] and "waiting=" in summary["first_scale_up"]
