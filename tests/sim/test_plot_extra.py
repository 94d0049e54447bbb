"""matplotlib is the optional `sim` extra: the controller runs without it, and
`simulate --plot` without it fails at once with an error naming the extra."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from autoscaler.cli import main
from autoscaler.sim import report

ROOT = Path(__file__).resolve().parents[2]
# Makes `import matplotlib` (and PIL, its image backend) fail in a child interpreter.
_BLOCK = "import sys\nfor name in ('matplotlib', 'PIL'):\n    sys.modules[name] = None\n"


def test_matplotlib_is_in_the_sim_extra_and_dev_pulls_it_in_not_the_runtime() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = {Requirement(d).name for d in project["dependencies"]}
    assert "matplotlib" not in runtime
    extras = project["optional-dependencies"]
    assert "matplotlib" in {Requirement(d).name for d in extras["sim"]}
    dev = [Requirement(d) for d in extras["dev"]]
    assert any(r.name == "llm-autoscaler" and "sim" in r.extras for r in dev)


def test_the_controller_and_every_command_import_without_matplotlib() -> None:
    code = _BLOCK + (
        "import autoscaler.app, autoscaler.cli\n"
        "autoscaler.cli.build_parser()\n"  # imports every command module
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_plot_without_the_extra_fails_before_simulating_and_names_the_extra(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import raises ImportError
    ran: list[object] = []
    monkeypatch.setattr(report, "print_table", lambda *a, **k: ran.append(a))
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "input_length": 5, "output_length": 5}\n')
    png = tmp_path / "p.png"
    assert main(["simulate", "--trace", str(trace), "--plot", str(png)]) == 2
    err = capsys.readouterr().err
    assert "matplotlib" in err and "llm-autoscaler[sim]" in err
    assert not png.exists() and not ran
