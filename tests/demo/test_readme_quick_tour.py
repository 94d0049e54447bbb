"""README's Quick tour is run, not trusted: every command in its code block is executed (or,
for those that need a cluster or run for a minute, parsed by the real CLI parser), and the
numbers the text states are recomputed from what the commands print, so a stale README
fails here."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from autoscaler.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
TOUR = README[README.index("## Quick tour") : README.index("## How it decides")]
(BLOCK,) = re.findall(r"```bash\n(.*?)```", TOUR, flags=re.S)
COMMANDS = [
    shlex.split(line.split("#", 1)[0].removeprefix("$B/llm-autoscaler"))
    for line in BLOCK.splitlines()
    if line.startswith("$B/llm-autoscaler")
]
# Long-running or cluster-bound: parsed by the CLI here; the demo runs in
# tests/demo/test_demo_headless.py, `run` in tests/real.
PARSED_ONLY = {"demo", "run"}


def _run(args: list[str]) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _command(name: str) -> list[str]:
    """The README's command, its globs expanded as the shell would (from the repo root)."""
    (cmd,) = [c for c in COMMANDS if c[0] == name]
    out: list[str] = []
    for arg in cmd:
        out.extend(
            sorted(str(p.relative_to(ROOT)) for p in ROOT.glob(arg)) if "*" in arg else [arg]
        )
    return out


def test_the_tour_covers_every_command_it_shows() -> None:
    names = {c[0] for c in COMMANDS}
    assert names == {"decide", "signals", "simulate", "demo", "run"}, names


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c[0] in PARSED_ONLY], ids=shlex.join)
def test_long_or_cluster_commands_parse_with_the_real_cli(cmd: list[str]) -> None:
    args = build_parser().parse_args(cmd)
    assert args.command == cmd[0]


def test_the_sample_decision_is_what_decide_prints() -> None:
    sample = TOUR[TOUR.index("```json") :]
    t = float(re.search(r'"t":([0-9.]+)', sample).group(1))  # type: ignore[union-attr]
    message = re.search(r'"message":"([^"]+)"', sample).group(1)  # type: ignore[union-attr]
    decisions = [json.loads(line) for line in _run(_command("decide")).splitlines()]
    (at_t,) = [d for d in decisions if d["t"] == t]
    for key in ("current_replicas", "desired_replicas", "reason"):
        shown = re.search(rf'"{key}":"?([\w.-]+)"?', sample).group(1)  # type: ignore[union-attr]
        assert str(at_t[key]) == shown, (key, at_t[key], shown)
    assert at_t["message"] == message


def test_signals_prints_absent_as_null_never_zero() -> None:
    rows = [json.loads(line) for line in _run(_command("signals")).splitlines()]
    assert len(rows) == len(list(ROOT.glob("tests/fixtures/metrics/*.txt")))
    assert all(None in row.values() for row in rows if row["engine"] in {"tgi", "trtllm"})


def test_the_simulator_headline_matches_what_simulate_prints(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    _run([*_command("simulate"), "--quiet", "--json", str(out)])
    result: dict[str, Any] = json.loads(out.read_text())["policies"]
    ours, keda = result["ours"], result["keda-seed"]
    fewer = keda["slo_misses"] / ours["slo_misses"]
    gpu = ours["gpu_hours"] / keda["gpu_hours"]
    said = re.search(
        r"misses the TTFT SLO ([0-9.]+)x less often than the seeds' KEDA setup, at\s*#\s*"
        r"([0-9.]+)x its GPU-hours",
        BLOCK,
    )
    assert said is not None, "the simulate line's comment no longer states the headline"
    assert said.group(1) == f"{fewer:.1f}", (said.group(1), fewer)
    assert said.group(2) == f"{gpu:.2f}", (said.group(2), gpu)
