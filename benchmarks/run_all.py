"""Run every benchmark in turn (each prints its table and writes benchmarks/results/*.json).

    .venv/bin/python benchmarks/run_all.py [--quick]

Benchmarks measure ratios side by side within one script run; the machine is shared, so
compare figures from the same run only.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = (
    "bench_parser.py",
    "bench_scrape.py",
    "bench_prometheus_fleet.py",
    "bench_forecast.py",
    "bench_api.py",
    "bench_policies.py",
    "bench_sensitivity.py",
    "bench_oracle.py",
    "plot_results.py",
    "bench_warmpool.py",
    "bench_seeds.py",
    "bench_variants.py",
    "bench_gpu_variants.py",
    "bench_pd.py",
    "bench_reaction.py",
    "bench_emulator_speed.py",
    "bench_serverless.py",
    "bench_wake.py",
)
QUICK_FLAG = {
    "bench_policies.py": "--quick",
    "bench_oracle.py": "--quick",
    "bench_warmpool.py": "--quick",
    "bench_prometheus_fleet.py": "--ticks=2",
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="shorter runs where supported")
    args = parser.parse_args()
    failed: list[str] = []
    for name in ORDER:
        script = HERE / name
        if not script.exists():
            continue
        cmd = [sys.executable, str(script)]
        if args.quick and name in QUICK_FLAG:
            cmd.append(QUICK_FLAG[name])
        print(f"\n=== {name} ===", flush=True)
        started = time.monotonic()
        rc = subprocess.run(cmd, check=False).returncode
        print(f"=== {name}: exit {rc} in {time.monotonic() - started:.0f} s ===", flush=True)
        if rc != 0:
            failed.append(name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
