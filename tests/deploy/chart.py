"""Lint and render charts/llm-autoscaler with Helm's own Go SDK (helm-python-sdk: Helm
over ctypes, no binary), for the unit tests and the real tier alike."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import helm_python  # type: ignore[import-untyped]
import yaml

from tests.deploy.manifests import ROOT, Obj

CHART = ROOT / "charts" / "llm-autoscaler"
CI_VALUES = sorted((CHART / "ci").glob("*.yaml"))


def values_of(path: Path | None) -> dict[str, Any]:
    if path is None:
        return {}
    loaded: dict[str, Any] = yaml.safe_load(path.read_text()) or {}
    return loaded


def lint(values: dict[str, Any]) -> dict[str, Any]:
    report: dict[str, Any] = helm_python.lint(str(CHART), values, strict=True)
    return report


def render_files(
    values: dict[str, Any], *, name: str = "llm-autoscaler", namespace: str = "llm-autoscaler"
) -> dict[str, str]:
    """Template path -> rendered text (NOTES.txt included), as ``helm template``."""
    chart = helm_python.Chart.load(str(CHART))
    try:
        rendered: dict[str, str] = chart.render(
            values, name=name, namespace=namespace, is_install=True
        )
    finally:
        chart.close()
    return rendered


def render_chart(
    values: dict[str, Any], *, name: str = "llm-autoscaler", namespace: str = "llm-autoscaler"
) -> list[Obj]:
    """The objects ``helm install`` would create from the templates (CRDs not included:
    Helm installs ``crds/`` first, unrendered; see `chart_crds`)."""
    out: list[Obj] = []
    for path, text in sorted(render_files(values, name=name, namespace=namespace).items()):
        if path.endswith(".txt"):
            continue
        out.extend(d for d in yaml.safe_load_all(text) if d)
    return out


def chart_crds() -> list[Obj]:
    return [
        d
        for p in sorted((CHART / "crds").glob("*.yaml"))
        for d in yaml.safe_load_all(p.read_text())
        if d
    ]
