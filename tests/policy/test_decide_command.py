"""The offline `decide` command: one JSON line per input line, errors that name the line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from autoscaler.policy.profiles import PROFILES, RECOMMENDED_SCALE_DOWN_WINDOW_S

ROOT = Path(__file__).resolve().parents[2]


def _run(
    tmp_path: Path, policy: str, lines: list[str], *extra: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "p.yaml").write_text(policy)
    (tmp_path / "s.jsonl").write_text("\n".join(lines) + "\n")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler",
            "decide",
            "--policy",
            str(tmp_path / "p.yaml"),
            "--signals",
            str(tmp_path / "s.jsonl"),
            *extra,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


POLICY = "maxReplicaCount: 10\nmetrics:\n  - {signal: waiting, type: AverageValue, target: 4}\n"


def test_prints_one_decision_per_line_and_treats_absent_signals_as_missing(tmp_path: Path) -> None:
    proc = _run(
        tmp_path,
        POLICY,
        [
            json.dumps(
                {"t": 0, "current_replicas": 2, "ready_replicas": 2, "signals": {"waiting": 16}}
            ),
            json.dumps({"t": 1, "current_replicas": 2, "ready_replicas": 2, "signals": {}}),
        ],
    )
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [o["desired_replicas"] for o in out] == [4, 2]
    assert [o["reason"] for o in out] == ["scale-up", "hold-missing-data"]
    assert out[0]["t"] == 0


def test_bad_line_is_reported_with_line_field_and_value(tmp_path: Path) -> None:
    proc = _run(
        tmp_path,
        POLICY,
        [
            json.dumps({"t": 0, "current_replicas": 2, "signals": {"waiting": 1}}),
            json.dumps({"t": 1, "current_replicas": -3, "signals": {}}),
        ],
    )
    assert proc.returncode == 1
    assert "line 2" in proc.stderr and "current_replicas" in proc.stderr and "-3" in proc.stderr


def test_invalid_policy_is_rejected_before_any_output(tmp_path: Path) -> None:
    proc = _run(
        tmp_path, "minReplicaCount: 9\nmaxReplicaCount: 2\n", ['{"t": 0, "current_replicas": 1}']
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert "minReplicaCount: value 9" in proc.stderr


def test_bundled_example_replays(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler",
            "decide",
            "--policy",
            "examples/policy.yaml",
            "--signals",
            "examples/signals.jsonl",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    reasons = {json.loads(x)["reason"] for x in proc.stdout.splitlines()}
    assert {"hold-missing-data", "scale-down"} <= reasons
    assert reasons & {"scale-up", "panic"}


def test_first_line_is_an_initial_recommendation_no_scale_down_in_first_window(
    tmp_path: Path,
) -> None:
    # HPA recordInitialRecommendation (kubernetes#68826): the replay starts like a new HPA.
    # The policy file names no profile: the recommended profile's scale-down window holds.
    w = RECOMMENDED_SCALE_DOWN_WINDOW_S
    lines = [
        json.dumps({"t": t, "current_replicas": 6, "signals": {"waiting": 0}})
        for t in (0, w // 2, w - 1, w + 1)
    ]
    proc = _run(tmp_path, POLICY, lines)
    assert proc.returncode == 0, proc.stderr
    desired = [json.loads(x)["desired_replicas"] for x in proc.stdout.splitlines()]
    assert desired == [6, 6, 6, 1]


def test_lines_without_a_replica_count_follow_the_decisions(tmp_path: Path) -> None:
    # Issue 14: without current_replicas the replayed count is the previous decision's, so
    # "scale down 6 -> 5" is printed once, then the next step, not once per line.
    policy = POLICY + (
        "behavior:\n  scaleDown:\n    stabilizationWindowSeconds: 0\n"
        "    policies: [{type: Pods, value: 1, periodSeconds: 15}]\n"
    )
    lines = [json.dumps({"t": t, "signals": {"waiting": 0}}) for t in (0, 5, 15, 30)]
    proc = _run(tmp_path, policy, lines, "--start-replicas", "6")
    assert proc.returncode == 0, proc.stderr
    out = [json.loads(x) for x in proc.stdout.splitlines()]
    assert [(o["current_replicas"], o["desired_replicas"]) for o in out] == [
        (6, 5),
        (5, 5),
        (5, 4),
        (4, 3),
    ]
    bad = _run(tmp_path, policy, lines, "--start-replicas", "-1")
    assert bad.returncode == 2 and "--start-replicas: value -1" in bad.stderr


def _run_plain(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "autoscaler", "decide", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )


def test_without_a_policy_file_the_recommended_profile_decides(tmp_path: Path) -> None:
    # prompt tokens/s 24000: replicas = ceil(24000 / each profile's per-replica target).
    def wanted(name: str) -> int:
        (m,) = [m for m in PROFILES[name]().metrics if m.signal == "prompt_tokens_per_s"]
        return math.ceil(24000 / m.target)

    assert wanted("recommended") != wanted("cost-first")
    line = json.dumps({"t": 0, "current_replicas": 1, "signals": {"prompt_tokens_per_s": 24000}})
    (tmp_path / "s.jsonl").write_text(line + "\n")
    default = _run_plain("--signals", str(tmp_path / "s.jsonl"))
    assert default.returncode == 0, default.stderr
    cost = _run_plain("--profile", "cost-first", "--signals", str(tmp_path / "s.jsonl"))
    assert cost.returncode == 0, cost.stderr
    assert json.loads(default.stdout)["desired_replicas"] == wanted("recommended")
    assert json.loads(cost.stdout)["desired_replicas"] == wanted("cost-first")


def test_profile_flag_and_file_must_agree_and_names_are_checked(tmp_path: Path) -> None:
    line = json.dumps({"t": 0, "current_replicas": 1, "signals": {"waiting": 0}})
    proc = _run(tmp_path, "profile: recommended\n", [line], "--profile", "cost-first")
    assert proc.returncode == 2
    assert "--profile: value 'cost-first' differs from the policy file's profile" in proc.stderr
    proc = _run(tmp_path, "profile: cheap\n", [line])
    assert proc.returncode == 2
    assert "profile: value 'cheap' must be one of cost-first, recommended" in proc.stderr
