"""The Grafana dashboard and the alert rules query metrics that exist, in valid PromQL."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.api.metrics import ControllerMetrics
from autoscaler.domain import Reason
from autoscaler.metrics.engines import VLLM_FALLBACK_FAMILIES, VLLM_FAMILIES
from autoscaler.metrics.prometheus import RECORDED_QUERIES, RECORDED_RULES
from tests.deploy.manifests import DEPLOY, load_docs

DASHBOARD = DEPLOY / "grafana" / "llm-autoscaler-dashboard.json"
ALERTS = DEPLOY / "prometheus" / "alerts.yaml"
RECORDING = DEPLOY / "prometheus" / "recording-rules.yaml"
METRIC_RE = re.compile(r"\b(llm_autoscaler_\w+|vllm:\w+)")


def _controller_series() -> set[str]:
    names: set[str] = set()
    for family in ControllerMetrics().registry.collect():
        kind = family.type
        base = family.name
        if kind == "counter":
            names |= {f"{base}_total", f"{base}_created"}
        elif kind == "histogram":
            names |= {f"{base}_bucket", f"{base}_sum", f"{base}_count"}
        else:
            names.add(base)
    return names


def _vllm_series() -> set[str]:
    names: set[str] = set()
    for fam in (*VLLM_FAMILIES, *VLLM_FALLBACK_FAMILIES):
        names |= {fam, f"{fam}_bucket", f"{fam}_sum", f"{fam}_count", f"{fam}_total"}
    return names


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _dashboard_exprs() -> list[str]:
    return [t["expr"] for p in _dashboard()["panels"] for t in p.get("targets", [])]


def _rules() -> list[dict[str, Any]]:
    (rule,) = load_docs(ALERTS)
    return [r for g in rule["spec"]["groups"] for r in g["rules"]]


def _grafana_to_promql(expr: str) -> str:
    return (
        expr.replace("$__rate_interval", "1m").replace("$namespace", ".*").replace("$target", ".*")
    )


def _promtool_check(groups: list[dict[str, Any]], tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run make system-deps (Debian package prometheus)"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_alert_rules_pass_promtool(tmp_path: Path) -> None:
    (rule,) = load_docs(ALERTS)
    _promtool_check(rule["spec"]["groups"], tmp_path)


def test_recording_rules_pass_promtool_and_record_what_prometheus_mode_reads(
    tmp_path: Path,
) -> None:
    (rule,) = load_docs(RECORDING)
    _promtool_check(rule["spec"]["groups"], tmp_path)
    records = {r["record"]: r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(records) == set(RECORDED_RULES.values())
    for family, name in RECORDED_RULES.items():  # per pod: the controller groups pods
        assert records[name] == f"sum by (namespace, pod, le) (rate({family}_bucket[1m]))"
        assert f"{family}_bucket" in _vllm_series()
    read = {m for t in RECORDED_QUERIES.values() for m in re.findall(r"\w+:\w+:rate1m", t)}
    assert read == set(records)


def test_dashboard_queries_are_valid_promql(tmp_path: Path) -> None:
    exprs = _dashboard_exprs()
    assert len(exprs) >= 10
    records = [
        {"record": f"dashboard:query_{i}", "expr": _grafana_to_promql(e)}
        for i, e in enumerate(exprs)
    ]
    _promtool_check([{"name": "dashboard", "rules": records}], tmp_path)


def test_promtool_check_catches_a_broken_expression(tmp_path: Path) -> None:
    broken = [{"name": "x", "rules": [{"alert": "X", "expr": "sum by (le (rate(x[5m]))"}]}]
    try:
        _promtool_check(broken, tmp_path)
    except AssertionError:
        return
    raise AssertionError("promtool accepted a broken expression")


def test_queries_use_only_metrics_that_are_exported() -> None:
    known = _controller_series() | _vllm_series()
    exprs = _dashboard_exprs() + [r["expr"] for r in _rules()]
    used = {m for e in exprs for m in METRIC_RE.findall(e)}
    assert used - known == set()


def test_controller_metric_labels_in_queries_exist() -> None:
    """Controller series carry namespace/name (not target); reasons are Reason values."""
    exprs = _dashboard_exprs() + [r["expr"] for r in _rules()]
    for e in exprs:
        for sel in re.findall(r"llm_autoscaler_\w+\{([^}]*)\}", e):
            labels = set(re.findall(r"(\w+)\s*[=!]~?", sel))
            assert labels <= {"namespace", "name", "reason", "signal", "route"}, (e, labels)
        for reason in re.findall(r'reason="([^"]+)"', e):
            assert reason in {r.value for r in Reason}, reason


def test_dashboard_covers_controller_and_vllm_views() -> None:
    text = " ".join(_dashboard_exprs())
    for needle in (
        "llm_autoscaler_desired_replicas",
        "llm_autoscaler_current_replicas",
        "llm_autoscaler_decisions_total",
        "llm_autoscaler_forecast_value",
        "llm_autoscaler_tick_duration_seconds_bucket",
        "llm_autoscaler_scrape_errors_total",
        "vllm:num_requests_waiting",
        "vllm:num_requests_running",
        "vllm:gpu_cache_usage_perc",
        "vllm:time_to_first_token_seconds_bucket",
    ):
        assert needle in text, needle
    ids = [p["id"] for p in _dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    variables = {v["name"] for v in _dashboard()["templating"]["list"]}
    for e in _dashboard_exprs():
        assert set(re.findall(r"\$(\w+)", e)) - {"__rate_interval"} <= variables


def test_alerts_cover_down_capacity_and_scrape_failures() -> None:
    alerts = {r["alert"]: r for r in _rules()}
    assert {"LLMAutoscalerDown", "LLMAutoscalerCapacityLimited"} <= set(alerts)
    assert "LLMAutoscalerScrapeFailures" in alerts
    for r in alerts.values():
        assert r["labels"]["severity"] in {"critical", "warning", "info"}
        assert r["annotations"]["summary"] and r["annotations"]["description"]
    # The Down alert names the job the ServiceMonitor produces (the Service's name).
    (sm,) = load_docs(DEPLOY / "prometheus" / "servicemonitor.yaml")
    assert 'job="llm-autoscaler-http"' in alerts["LLMAutoscalerDown"]["expr"]
    assert sm["spec"]["endpoints"][0]["port"] == "http"


_POD_MATCHER = re.compile(r'pod=~"([^"]*)"')


@pytest.mark.parametrize(
    ("pod", "selected"),
    [
        ("vllm-llama3-8b-7c9f8d6b5-x2k4q", True),  # Deployment pod: <rs hash>-<pod suffix>
        ("vllm-llama3-8b-58bd6c9dd4-zq8n2", True),
        ("vllm-llama3-8b-0", True),  # StatefulSet ordinal
        ("vllm-llama3-8b-mig-7c9f8d6b5-x2k4q", False),  # the MIG sibling
        ("vllm-llama3-8b-shared-7c9f8d6b5-x2k4q", False),  # the shared-GPU sibling
        ("vllm-llama3-8b-warm-7c9f8d6b5-x2k4q", False),
    ],
)
def test_dashboard_pod_regex_selects_only_the_targets_own_pods(pod: str, selected: bool) -> None:
    patterns = {m for e in _dashboard_exprs() for m in _POD_MATCHER.findall(e)}
    assert patterns, "no pod matcher in the dashboard"
    for pattern in patterns:
        # Prometheus anchors regex matchers at both ends: fullmatch is its semantics.
        regex = re.compile(pattern.replace("$target", "vllm-llama3-8b"))
        assert bool(regex.fullmatch(pod)) is selected, (pattern, pod)
