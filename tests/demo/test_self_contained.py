"""The repository is self-contained: no test, doc, benchmark or default reaches outside it."""

from __future__ import annotations

import gzip
import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Only the optional real-control-plane tier may look outside (../shared/k8s, and it skips
# with its reason when absent); nothing else may.
ALLOWED = ("tests/real/",)
OUTSIDE = re.compile(r"\.\./shared(?!/k8s)|/work/|\"shared\" / \"traces\"")


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    paths = [ROOT / line for line in out.splitlines() if not line.startswith(ALLOWED)]
    return [p for p in paths if p.suffix in {".py", ".md", ".toml", ".sh", ".yaml", ".cfg"}]


def test_no_tracked_file_points_outside_the_repository() -> None:
    offenders = []
    for path in _tracked_text_files():
        if path.resolve() == Path(__file__).resolve() or not path.is_file():
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []


def test_azure_traces_ship_with_their_attribution() -> None:
    traces = ROOT / "data" / "traces"
    readme = (traces / "README.md").read_text()
    assert "CC BY 4.0" in readme and "Splitwise" in readme
    for name, rows in (("code", 8_819), ("conv", 19_366)):
        with gzip.open(traces / f"AzureLLMInferenceTrace_{name}.csv.gz", "rt") as fh:
            assert sum(1 for _ in fh) == rows + 1  # header + one line per request
