"""Writes docs/img/dashboard.png: the real demo's dashboard (both fleets) in the tests'
headless Chromium, taken ``--at`` real seconds into a demo run.

    .venv/bin/python -m tests.dashboard.screenshot [--at 50] [--out docs/img/dashboard.png]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import tempfile
from pathlib import Path

from autoscaler.demo.app import DemoOptions, DemoResult, run_demo
from autoscaler.logging import configure_logging
from tests.dashboard.test_browser import run_chromium

ROOT = Path(__file__).resolve().parents[2]


async def shoot(at_s: float, out: Path, speed: float, width: int, height: int) -> None:
    ready: asyncio.Future[DemoResult] = asyncio.get_running_loop().create_future()
    with tempfile.TemporaryDirectory() as tmp:
        opts = DemoOptions(
            http_port=0,
            grpc_port=0,
            duration_s=at_s + 5,
            speed=speed,
            headless=True,
            summary_path=Path(tmp) / "summary.json",
        )
        demo = asyncio.create_task(run_demo(opts, io.StringIO(), on_ready=ready.set_result))
        result = await ready
        await asyncio.sleep(at_s)
        out.parent.mkdir(parents=True, exist_ok=True)
        await run_chromium(
            result.url + "/",
            Path(tmp) / "profile",
            f"--screenshot={out}",
            f"--window-size={width},{height}",
        )
        await demo


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--at", type=float, default=50.0, help="real seconds into the demo")
    p.add_argument("--speed", type=float, default=4.0, help="demo speed")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "dashboard.png")
    p.add_argument("--width", type=int, default=1400)
    p.add_argument("--height", type=int, default=2000)
    args = p.parse_args()
    log = tempfile.NamedTemporaryFile("w", prefix="demo-", suffix=".log", delete=False)  # noqa: SIM115
    configure_logging(fmt="json", stream=log)
    asyncio.run(shoot(args.at, args.out, args.speed, args.width, args.height))
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
