"""Emulator speed factor: real seconds of one request at speed 1 and speed 10, side by side.

Run: .venv/bin/python benchmarks/bench_emulator_speed.py [--repeats 3] [--max-tokens 100]
Writes benchmarks/results/emulator_speed.json.

The test suite asserts only what does not depend on CPU load (the EmuClock mapping with a
fake clock, and that emulated latencies do not change with the speed); the wall-clock
ratio lives here. Expect a ratio near the speed factor minus HTTP and scheduling overhead.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from autoscaler.emulator import EmulatorFleet  # noqa: E402
from autoscaler.sim.report import publish  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "emulator_speed.json"


async def _one(http: aiohttp.ClientSession, url: str, max_tokens: int) -> float:
    body = {"prompt": "w " * 10, "max_tokens": max_tokens}
    t0 = time.perf_counter()
    async with http.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, resp.status
        await resp.read()
    return time.perf_counter() - t0


async def measure(speeds: tuple[float, ...], repeats: int, max_tokens: int) -> dict[float, float]:
    """Median real seconds of one request per speed, speeds interleaved per repeat."""
    samples: dict[float, list[float]] = {s: [] for s in speeds}
    async with EmulatorFleet(speed=1.0) as fleet, aiohttp.ClientSession() as http:
        rep = await fleet.start_replica("a")
        for _ in range(repeats):
            for speed in speeds:
                fleet.set_speed(speed)
                samples[speed].append(await _one(http, rep.url, max_tokens))
    return {s: statistics.median(v) for s, v in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=100)
    args = parser.parse_args()
    speeds = (1.0, 10.0)
    medians = asyncio.run(measure(speeds, args.repeats, args.max_tokens))
    base = medians[speeds[0]]
    rows = [f"| {s:g} | {medians[s]:.3f} | {base / medians[s]:.2f} |" for s in speeds]
    markdown = "\n".join(
        [
            f"Emulator speed factor ({args.max_tokens} tokens, median of {args.repeats})",
            "",
            "| speed | real s per request | speed-up vs 1 |",
            "|---|---|---|",
            *rows,
        ]
    )
    document: dict[str, Any] = {
        "benchmark": "emulator_speed",
        "command": "python benchmarks/bench_emulator_speed.py "
        f"--repeats {args.repeats} --max-tokens {args.max_tokens}",
        "machine": platform.platform(),
        "median_real_s": {str(s): medians[s] for s in speeds},
        "speedup": {str(s): base / medians[s] for s in speeds},
        "markdown": markdown,
    }
    publish(RESULTS, document)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
