"""The demo's local state: its log is appended (rotated when large), and a killed demo's
temp directory is removed by the next start."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from autoscaler.commands import demo as demo_command
from autoscaler.demo.app import PID_FILE, TEMPDIR_PREFIX, sweep_stale_tempdirs


def test_the_log_is_appended_across_restarts_and_rotated_when_large(tmp_path: Path) -> None:
    path = tmp_path / "out" / "demo.log"
    for run in ("first", "second"):
        fh = demo_command._log_to_file(path, "INFO")
        fh.write(f"{run} run\n")
        fh.close()
    assert path.read_text() == "first run\nsecond run\n"
    path.write_text("x" * (demo_command.LOG_ROTATE_BYTES + 1))
    demo_command._log_to_file(path, "INFO").close()
    assert path.with_name("demo.log.1").stat().st_size == demo_command.LOG_ROTATE_BYTES + 1
    assert path.read_text() == ""


def test_a_killed_demos_temp_dir_is_removed_and_a_running_ones_kept(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(gone.stdout)
    killed = tmp_path / f"{TEMPDIR_PREFIX}killed"
    running = tmp_path / f"{TEMPDIR_PREFIX}running"
    unknown = tmp_path / f"{TEMPDIR_PREFIX}no-pid-file"
    for d, pid in ((killed, dead_pid), (running, os.getpid()), (unknown, None)):
        (d / "cluster").mkdir(parents=True)
        if pid is not None:
            (d / PID_FILE).write_text(f"{pid}\n")
    assert sweep_stale_tempdirs(tmp_path) == [killed]
    assert not killed.exists() and running.exists() and unknown.exists()
