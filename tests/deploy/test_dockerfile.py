"""The Dockerfile follows the image rules (no Docker engine here: checked by parsing)."""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.manifests import DEPLOY, ROOT, load_docs

DOCKERFILE = ROOT / "Dockerfile"
LOCK = DEPLOY / "requirements.lock"


@dataclass(frozen=True)
class Instruction:
    op: str
    args: str


def parse(text: str) -> list[Instruction]:
    """Instructions with line continuations joined and comments dropped."""
    out: list[Instruction] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        op, _, args = buf.partition(" ")
        out.append(Instruction(op.upper(), args.strip()))
        buf = ""
    return out


def _stages() -> list[list[Instruction]]:
    stages: list[list[Instruction]] = []
    for ins in parse(DOCKERFILE.read_text()):
        if ins.op == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def _args() -> dict[str, str]:
    out = {}
    for ins in parse(DOCKERFILE.read_text()):
        if ins.op == "ARG" and "=" in ins.args:
            name, _, value = ins.args.partition("=")
            out[name] = value
    return out


def _final() -> list[Instruction]:
    return _stages()[-1]


def _one(stage: list[Instruction], op: str) -> Instruction:
    found = [i for i in stage if i.op == op]
    assert len(found) == 1, f"{op}: {len(found)} in the final stage"
    return found[0]


def test_is_multi_stage_on_a_pinned_slim_python_311() -> None:
    stages = _stages()
    assert len(stages) >= 2
    base = stages[-1][0].args.split()[0]
    base = re.sub(r"\$\{(\w+)\}", lambda m: _args()[m.group(1)], base)
    assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", base), base
    assert stages[0][0].args.split()[-1] == "builder"


def test_final_stage_copies_the_venv_and_installs_no_build_tools() -> None:
    final = _final()
    copies = [i.args for i in final if i.op == "COPY"]
    assert copies and all(c.startswith("--from=builder") for c in copies)
    runs = " ".join(i.args for i in final if i.op == "RUN")
    for tool in ("apt-get install", "gcc", "build-essential", "pip install", "make"):
        assert tool not in runs, tool


def test_runs_as_numeric_non_root_user() -> None:
    user = _one(_final(), "USER").args
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) > 0
    pod_uid = load_docs(DEPLOY / "base" / "deployment.yaml")[0]["spec"]["template"]["spec"][
        "securityContext"
    ]["runAsUser"]
    assert int(uid) == pod_uid


def test_is_read_only_root_filesystem_friendly() -> None:
    env = " ".join(i.args for i in _final() if i.op == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "HOME=/tmp" in env
    assert not [i for i in _final() if i.op == "VOLUME"], "no writable volumes besides /tmp"


def test_entrypoint_cmd_ports_and_healthcheck() -> None:
    final = _final()
    assert json.loads(_one(final, "ENTRYPOINT").args) == ["llm-autoscaler"]
    assert json.loads(_one(final, "CMD").args) == ["run"]
    assert set(_one(final, "EXPOSE").args.split()) == {"8080", "9090"}
    health = _one(final, "HEALTHCHECK").args
    assert "/healthz" in health and "CMD" in health
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert "llm-autoscaler" in scripts


def test_dependencies_install_only_from_the_lock() -> None:
    builder = " ".join(i.args for i in _stages()[0] if i.op == "RUN")
    assert "-r requirements.lock" in builder and "--no-deps" in builder
    assert "pip check" in builder
    copied = " ".join(i.args for i in _stages()[0] if i.op == "COPY")
    assert "deploy/requirements.lock" in copied


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in LOCK.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([A-Za-z0-9_.+\-]+)", line.strip())
        assert m, f"not an exact pin: {line!r}"
        pins[canonicalize_name(m.group(1))] = m.group(2)
    return pins


def test_lock_pins_every_runtime_dependency_within_pyproject_specifiers() -> None:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = _lock()
    for dep in map(Requirement, deps):
        name = canonicalize_name(dep.name)
        assert name in pins, f"{dep.name} missing from the lock"
        assert dep.specifier.contains(pins[name], prereleases=True), (dep, pins[name])


def test_lock_is_closed_under_installed_requirements() -> None:
    import importlib.metadata as md

    pins = _lock()
    for name in pins:
        for req in map(Requirement, md.distribution(name).requires or []):
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            assert canonicalize_name(req.name) in pins, f"{name} needs {req.name}"


def test_dockerignore_keeps_the_context_to_what_is_copied() -> None:
    lines = [
        x.strip()
        for x in (ROOT / ".dockerignore").read_text().splitlines()
        if x.strip() and not x.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!autoscaler/", "!deploy/requirements.lock"} <= set(lines)
