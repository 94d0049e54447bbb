"""`llm-autoscaler demo --headless` from a clean process, driven like a user would: it
prints a token and a curl line; a policy PATCH with that token changes what the demo
does (the maximum clamps the fleet), a PATCH to keda mode hands the target to KEDA; the
model at zero behind the activator gets its request held through the cold start,
answered, its replicas sleep when idle, a burst wakes them in seconds, and it goes back
to zero; the target with variants grows its MIG slices before a second H100 and sheds
the H100 first; the terminal shows only the table and the summary, and the process exits 0.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from autoscaler.demo.variants import SLICES, variants_line
from autoscaler.demo.zero import BURST, ZERO_OUTPUT_TOKENS, ZERO_POLICY

ROOT = Path(__file__).resolve().parents[2]
TARGET = "/v1/targets/demo/llama-3-8b"


def _call(url: str, token: str, method: str = "GET", body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(
        url,
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {token}",
            "Content-Type": "application/merge-patch+json",
        },
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as err:  # e.g. 404 before the first decision
        return err.code, json.loads(err.read() or b"null")


def _decision(base: str, token: str) -> dict[str, Any]:
    try:
        status, body = _call(base + TARGET + "/decision", token)
    except OSError:  # a slow answer on a loaded machine: ask again
        status, body = 0, None
    return body if status == 200 else {"current_replicas": 0, "desired_replicas": 99}


def _until(pred: Any, timeout_s: float) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.3)
    raise AssertionError(f"condition not met in {timeout_s} s")


def _banner(proc: subprocess.Popen[str]) -> tuple[str, str, list[str]]:
    assert proc.stdout is not None
    lines: list[str] = []
    while not any("curl -X PATCH" in line for line in lines):
        line = proc.stdout.readline()
        assert line, "demo exited before printing its banner"
        lines.append(line)
    text = "".join(lines)
    url = re.search(r"dashboard: (http://127\.0\.0\.1:\d+)/", text)
    token = re.search(r"API token \(generated for this run\): (\S+)", text)
    assert url and token, text
    return url.group(1), token.group(1), lines


def test_headless_demo_takes_a_live_policy_patch_and_a_keda_switch(tmp_path: Path) -> None:
    summary_path = tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "autoscaler", "demo", "--headless", "--duration", "50"]
    cmd += ["--speed", "8", "--http-port", "0", "--grpc-port", "0"]
    cmd += ["--summary", str(summary_path), "--log-file", str(tmp_path / "demo.log")]
    env = {k: v for k, v in __import__("os").environ.items() if k != "AUTOSCALER_API_TOKEN"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        base, token, head = _banner(proc)
        # The burst scales the fleet up; then the user caps it at 2 through the REST API.
        _until(lambda: _decision(base, token)["current_replicas"] >= 3, 60)
        status, _ = _call(base + TARGET + "/policy", token, "PATCH", {"maxReplicaCount": 2})
        assert status == 200
        _until(lambda: _decision(base, token)["desired_replicas"] <= 2, 20)
        history = _call(base + TARGET + "/decisions?limit=100", token)[1]["items"]
        capped = [d for d in history if d["reason"] == "max-replicas"]
        assert capped and capped[-1]["current_replicas"] >= 3, history[:5]
        assert capped[-1]["desired_replicas"] == 2
        status, doc = _call(base + TARGET, token, "PATCH", {"mode": "keda"})
        assert status == 200 and doc["mode"] == "keda"
        status, keda = _call(base + "/v1/keda/demo/llama-3-8b?targetSize=1", token)
        assert status == 200, keda
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    terminal = "".join(head) + out + err
    assert proc.returncode == 0, err[-2000:]
    assert "Traceback" not in terminal, terminal[-3000:]
    access_lines = [ln for ln in terminal.splitlines() if re.search(r'"(GET|POST|PATCH|PUT) /', ln)]
    assert len(access_lines) <= 20
    assert '"event": "decision"' not in terminal  # decisions go to the log file
    assert "summary:" in out and "load: " in out
    summary = json.loads(summary_path.read_text())
    assert summary["scale_ups"] >= 1 and summary["scale_downs"] >= 1, summary
    assert summary["load"]["failed"] == 0 and summary["load"]["ok"] > 100, summary["load"]
    fleets = summary["fleets"]
    assert set(fleets) == {"ours", "keda"} and fleets["keda"]["load"]["ok"] > 100, fleets
    assert "waiting for the first replica: cold start 60 s" in terminal
    # The model at zero: held by the activator, scaled 0 -> 1 by the poke, answered once
    # its pod is Ready (after the 60 s cold start), back to zero after the idle period.
    zero = summary["zero"]
    assert zero["replicas_at_send"] == 0 and zero["error"] is None, zero
    assert zero["status"] == 200 and zero["tokens"] == ZERO_OUTPUT_TOKENS, zero
    assert zero["scaled_up_at_s"] - zero["sent_at_s"] < 20, zero  # not after the cold start
    assert zero["held_s"] >= 50 and zero["answered_at_s"] - zero["sent_at_s"] >= 50, zero
    # Idle: the replicas go to sleep (not deleted) after the idle period; the burst at
    # zero awake wakes them all in seconds (the cold start took ~60), and every request
    # of it is answered; idle again, the sleepers are released: 0 replicas.
    idle_s = zero["asleep_at_s"] - zero["answered_at_s"]
    assert idle_s >= ZERO_POLICY["cooldownPeriod"] - 2 and zero["sleepers"] >= 2, zero
    assert (zero["awake_at_burst"], zero["asleep_at_burst"]) == (0, zero["sleepers"]), zero
    assert zero["woken"] == zero["sleepers"] and zero["woken_in_s"] < 5, zero
    assert zero["burst_answered"] == zero["burst"] == BURST, zero
    assert zero["burst_held_max_s"] < 5 < 50 <= zero["held_s"], zero
    assert zero["back_to_zero_at_s"] > zero["burst_done_at_s"], zero
    assert "held by the activator" in out and "sleepers released: 0 replicas" in out
    assert f"sleepers woken in {zero['woken_in_s']:.1f} s for a burst of {BURST}" in out
    # The target with variants: the slices (cheapest) grew first and all of them before
    # the second H100; on the way down the H100 went first. The printed line says so.
    mix = summary["variants"]
    assert (mix["first_up"], mix["mig_start"], mix["mig_max"]) == ("mig", 0, SLICES), mix
    assert mix["h100_start"] == 1 and mix["h100_max"] >= 2, mix
    assert mix["mig_at_h100_up"] == SLICES, mix
    assert mix["first_down"] == "h100", mix
    assert mix["load"]["failed"] == 0 and mix["load"]["ok"] > 100, mix["load"]
    assert mix["line"] in out and mix["line"] == variants_line(mix)
    assert f"h100 1->{mix['h100_max']} once the {SLICES} slices were taken" in mix["line"]
    assert "scale-down took h100 first" in mix["line"]
