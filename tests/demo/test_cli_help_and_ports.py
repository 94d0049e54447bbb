"""What a newcomer sees first: every subcommand's --help explains itself, and a taken
port is one line naming the port and the flag to change it (exit 2, no traceback)."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from autoscaler.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", COMMANDS)
def test_every_subcommand_has_a_description_and_helped_options(name: str) -> None:
    sub = build_parser()._subparsers._group_actions[0].choices[name]  # type: ignore[union-attr]
    assert sub.description, name
    for action in sub._actions:
        if action.option_strings and action.dest != "help":
            assert action.help, f"{name} {action.option_strings} has no help text"


def test_run_help_names_the_mode_default() -> None:
    run = build_parser()._subparsers._group_actions[0].choices["run"]  # type: ignore[union-attr]
    assert "default: AUTOSCALER_MODE, else direct" in " ".join(run.format_help().split())


@pytest.mark.parametrize("flag", ["--http-port", "--grpc-port"])
def test_demo_on_a_taken_port_says_which_and_exits_2(flag: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--grpc-port" if flag == "--http-port" else "--http-port"
        proc = subprocess.run(
            [
                *(sys.executable, "-m", "autoscaler", "demo", "--headless", flag, str(port)),
                *(other, "0", "--duration", "5", "--log-file", str(tmp_path / "log")),
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr + proc.stdout
    (line,) = proc.stderr.strip().splitlines()
    assert f"port {port}" in line and "already in use" in line and flag in line


def test_run_on_a_taken_port_says_which_and_exits_2(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run(
            [sys.executable, "-m", "autoscaler", "run", "--http-port", str(port)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={"PATH": "/usr/bin:/bin", "KUBECONFIG": str(tmp_path / "none")},
        )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"port {port}" in proc.stderr and "--http-port" in proc.stderr


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from autoscaler import __version__

    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"llm-autoscaler {__version__}"


def test_run_without_kubeconfig_or_cluster_says_so_in_one_line(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # no KUBECONFIG, no ~/.kube
    proc = subprocess.run(
        [sys.executable, "-m", "autoscaler", "run", "--http-port", "0", "--grpc-port", "0"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    (line,) = proc.stderr.strip().splitlines()
    assert "no kubeconfig and not in a cluster" in line
    assert "--kubeconfig" in line and "KUBECONFIG" in line
