"""Report a comparison: a rich table, a JSON document and a load/replicas/TTFT plot."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.sim.simulator import SimResult
from autoscaler.sim.traces import Trace

COLUMNS: tuple[tuple[str, str], ...] = (
    ("policy", "policy"),
    ("gpu_hours", "GPU-h"),
    ("cost_usd", "cost $"),
    ("slo_attainment", "SLO att."),
    ("slo_attainment_feasible", "att. feasible"),
    ("slo_misses", "misses"),
    ("ttft_p50_s", "TTFT p50 s"),
    ("ttft_p99_s", "TTFT p99 s"),
    ("itl_p99_s", "ITL p99 s"),
    ("dropped", "dropped"),
    ("rejected", "rejected"),
    ("scale_events", "scale ev."),
    ("max_replicas", "max rep."),
)


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def print_table(summaries: Sequence[dict[str, Any]], title: str) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title)
    for _, header in COLUMNS:
        table.add_column(header, justify="left" if header == "policy" else "right")
    for s in summaries:
        table.add_row(*(_fmt(s.get(key)) for key, _ in COLUMNS))
    Console(width=160).print(table)


def markdown_table(summaries: Sequence[dict[str, Any]]) -> str:
    head = "| " + " | ".join(h for _, h in COLUMNS) + " |"
    sep = "|" + "|".join("---" if k == "policy" else "---:" for k, _ in COLUMNS) + "|"
    rows = ["| " + " | ".join(_fmt(s.get(k)) for k, _ in COLUMNS) + " |" for s in summaries]
    return "\n".join([head, sep, *rows])


def write_json(path: Path, document: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=False) + "\n")


def publish(path: Path, document: dict[str, Any]) -> None:
    """A benchmark's ending: its markdown table to stdout, the document to ``path``."""
    print(document["markdown"])
    write_json(path, document)
    print(f"wrote {path}", file=sys.stderr)


def _ttft_p99_by_bin(r: SimResult, bin_s: float, nbins: int) -> np.ndarray:
    out = np.full(nbins, np.nan)
    idx = np.minimum((r.arrival_s // bin_s).astype(np.int64), nbins - 1)
    for b in range(nbins):
        vals = r.ttft_s[idx == b]
        if len(vals):
            # Dropped requests (inf) are drawn at the top of the axis.
            out[b] = min(float(np.quantile(vals, 0.99)), 1e3)
    return out


PLOT_EXTRA = "sim"


def pyplot() -> Any:
    """matplotlib.pyplot, headless. matplotlib is the optional ``sim`` extra (the controller
    image does not carry it), so a missing one is a clear error, raised before any work."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(
            f"--plot: matplotlib is not installed; it is the optional {PLOT_EXTRA!r} extra: "
            f"pip install 'llm-autoscaler[{PLOT_EXTRA}]'"
        ) from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot(results: Sequence[SimResult], trace: Trace, path: Path, slo_ttft_s: float) -> None:
    plt = pyplot()
    span = max(trace.duration_s, 1.0)
    bin_s = 60.0 if span <= 4 * 3600 else 600.0
    nbins = max(1, math.ceil(span / bin_s))
    fig, axes = plt.subplots(3, 1, figsize=(11, 9), sharex=True)
    rate = trace.rate_per_s(bin_s)[:nbins]
    axes[0].plot(np.arange(len(rate)) * bin_s / 60, rate, color="black")
    axes[0].set_ylabel(f"arrivals / s ({bin_s:g} s bins)")
    axes[0].set_title(f"{trace.name}: load, replicas and TTFT p99 per policy")
    for r in results:
        t = np.asarray(r.timeline_t) / 60
        axes[1].step(t, r.timeline_spec, where="post", label=r.policy)
        axes[2].plot(
            np.arange(nbins) * bin_s / 60, _ttft_p99_by_bin(r, bin_s, nbins), label=r.policy
        )
    axes[1].set_ylabel("replicas (Deployment spec)")
    axes[1].legend(loc="upper right", fontsize=8, ncol=3)
    axes[2].axhline(slo_ttft_s, color="red", linestyle="--", linewidth=1, label="SLO")
    axes[2].set_yscale("log")
    axes[2].set_ylabel("TTFT p99 per bin, s")
    axes[2].set_xlabel("minutes")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
