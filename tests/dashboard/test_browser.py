"""The dashboard in a real headless browser (Debian chromium): loads, draws, shows reasons."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

from autoscaler.control.state import ControllerState

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--window-size=1400,1800",
)


def chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    assert path, "chromium is missing: run `make system-deps` (scripts/system-deps.sh)"
    return path


async def run_chromium(url: str, profile: Path, *extra: str) -> str:
    sized = any(e.startswith("--window-size") for e in extra)
    flags = [f for f in CHROMIUM_FLAGS if not (sized and f.startswith("--window-size"))]
    proc = await asyncio.create_subprocess_exec(
        chromium(),
        *flags,
        f"--user-data-dir={profile}",
        "--virtual-time-budget=4000",
        *extra,
        url,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise
    assert proc.returncode == 0
    return out.decode()


async def test_page_renders_charts_with_data_and_a_decision(
    served_state: tuple[ControllerState, str], tmp_path: Path
) -> None:
    _, base = served_state
    dom = await run_chromium(base + "/", tmp_path / "profile", "--dump-dom")
    assert 'data-state="live"' in dom, dom[:2000]
    assert 'data-target="demo/llama-3-8b"' in dom
    charts = dict(re.findall(r'data-chart="(\w+)" data-points="(\d+)"', dom))
    assert set(charts) == {"load", "queue", "kv", "ttft", "replicas"}
    assert all(int(n) > 0 for n in charts.values()), charts
    assert dom.count("<canvas") >= 5  # uPlot drew each chart on a canvas
    assert 'data-reason="scale-up"' in dom
    assert "waiting 12 over target 4 per replica" in dom
    assert re.search(r'data-tile="warm pool".*?class="value">2<', dom)
    # Side by side: both fleets drawn on each comparison chart.
    compare = dict(re.findall(r'data-compare="(\w+)" data-points="(\d+)"', dom))
    assert set(compare) == {"ttft_p95_s", "gpus", "ready", "waiting"}
    assert int(compare["gpus"]) == 60  # 30 samples x 2 fleets
    assert "KEDA+HPA (seeds)" in dom
    assert "monotonic clock" in dom  # which times are which
    # 29 identical steady decisions after the scale-up collapse into runs, not 29 rows.
    counts = [
        int(n)
        for n in re.findall(r'class="decision" data-reason="\w[\w-]*" data-count="(\d+)"', dom)
    ]
    assert len(counts) <= 4 and sum(counts) == 30, counts
    assert "maxReplicaCount" in dom and "/v1/targets/demo/llama-3-8b/policy" in dom


async def test_page_screenshot_is_written(
    served_state: tuple[ControllerState, str], tmp_path: Path
) -> None:
    _, base = served_state
    shot = tmp_path / "dashboard.png"
    await run_chromium(base + "/", tmp_path / "profile", f"--screenshot={shot}")
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000  # not a blank page
