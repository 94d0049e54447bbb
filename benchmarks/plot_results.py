"""Plot the policy comparison: GPU-hours vs SLO attainment per scenario, with the oracle.

Reads ``benchmarks/results/policies.json`` and ``oracle.json`` (run ``bench_policies.py``
and ``bench_oracle.py`` first) and writes ``docs/img/pareto.png``: one panel per
scenario, every policy as a point, the oracle's frontier (what no policy can beat) as a
line, the fixed fleets run beside ``ours`` as grey dots, the issue-7 static-peak target
box where it applies.

    .venv/bin/python benchmarks/plot_results.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OUT = ROOT / "docs" / "img" / "pareto.png"
MARKERS = {
    "static-peak": ("s", "#444444"),
    "hpa-gpu-util": ("v", "#8c564b"),
    "keda-seed": ("^", "#d62728"),
    "knative-kpa": ("D", "#9467bd"),
    "aibrix-apa": ("P", "#e377c2"),
    "ours": ("o", "#1f77b4"),
    "ours-capacity": ("o", "#17becf"),
    "ours-lean": ("*", "#2ca02c"),
    "ours-cost": ("P", "#17becf"),
}


def main() -> int:
    policies = json.loads((RESULTS / "policies.json").read_text())["scenarios"]
    oracle = json.loads((RESULTS / "oracle.json").read_text())["scenarios"]
    labels = list(policies)
    cols = 3
    rows = (len(labels) + 1 + cols - 1) // cols  # one spare panel holds the legend
    fig, grid = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.0 * rows))
    panels = list(grid.flat)
    for ax, label in zip(panels, labels, strict=False):
        sc = policies[label]
        floor = 0.8 if label.startswith("long-context") else 0.9
        floor = 0.6 if label == "mixed RAG + chat" else floor
        static = sc["policies"]["static-peak"]["gpu_hours"]
        if label in oracle:
            n_req = oracle[label]["requests"]  # admitted requests (rejected are not misses)
            for key, style, name in (
                ("frontier", {"color": "#bbbbbb", "lw": 2}, "oracle, no cold start (bound)"),
                (
                    "cold_start_frontier",
                    {"color": "#bbbbbb", "lw": 1.2, "ls": "--"},
                    "oracle paying cold starts (bound)",
                ),
                (
                    "reactive_frontier",
                    {"color": "#888888", "lw": 1.2, "ls": ":"},
                    "reactive, one cold start late (causal reference)",
                ),
            ):
                pts = [
                    (g, 1 - m / n_req)
                    for g, m in oracle[label].get(key, [])
                    if 1 - m / n_req > floor
                ]
                if pts:
                    xs, ys = zip(*pts, strict=True)
                    ax.plot(xs, ys, label=name, **style)  # type: ignore[arg-type]
        for fleet in sc.get("fixed_fleets", {}).values():
            ax.scatter(
                fleet["gpu_hours"],
                fleet["slo_attainment"],
                marker=".",
                color="#999999",
                s=60,
                label="fixed fleets",
            )
        for name, s in sc["policies"].items():
            marker, color = MARKERS.get(name, ("x", "black"))
            att = s["slo_attainment"]
            if att < floor:
                ax.annotate(
                    f"{name} {att:.2f}",
                    (s["gpu_hours"], floor),
                    fontsize=7,
                    color=color,
                    xytext=(0, 4),
                    textcoords="offset points",
                    rotation=90,
                    va="bottom",
                )
                continue
            size = 140 if marker == "*" else 45
            ax.scatter(s["gpu_hours"], att, marker=marker, color=color, s=size, label=name)
        if label == "business day x8":
            ax.axvline(0.4 * static, color="#2ca02c", ls=":", lw=1)
            ax.axhline(0.99, color="#2ca02c", ls=":", lw=1)
            ax.text(0.4 * static, 0.9005, " 40% of static-peak", fontsize=7, color="#2ca02c")
        ax.set_title(f"{label} (TTFT SLO {sc.get('slo_ttft_s', 0.5):g} s)", fontsize=10)
        ax.set_xlabel("GPU-hours")
        ax.set_ylim(floor, 1.001)
        ax.grid(alpha=0.3)
    for ax in panels[::cols]:
        ax.set_ylabel("TTFT SLO attainment (admitted requests)")
    legend: dict[str, object] = {}
    for ax in panels[: len(labels)]:
        for handle, name in zip(*ax.get_legend_handles_labels(), strict=True):
            legend.setdefault(name, handle)
    names = list(legend)
    handles = [legend[n] for n in names]
    for ax in panels[len(labels) :]:
        ax.axis("off")
    panels[-1].legend(handles, names, loc="center", fontsize=9, frameon=False)
    fig.tight_layout()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(OUT, dpi=110)
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
