"""The demo's table fits a default 80-column terminal, live and headless: the trailing
reason text is cut with an ellipsis, never a number, a header or the legend."""

from __future__ import annotations

import io

from rich.console import Console

from autoscaler.demo.compare import FleetSample
from autoscaler.demo.view import COLUMNS, DemoView

TITLES = {"ours": "llm-autoscaler (this controller)", "keda": "KEDA ScaledObject + HPA"}
LONG = "capacity-limited-with-a-reason-far-longer-than-any-terminal-row-has-room-for"
SAMPLES = {
    "ours": FleetSample(12, 10, 24, 1234, 14.52, LONG, "scale up 1 -> 5; " + "x " * 60, "direct"),
    "keda": FleetSample(16, 16, 32, 99999, 123.45, "steady", None, None),
}
NUMBERS = ("1234", "14.52", "99999", "123.45")


def test_live_table_fits_80_columns_with_every_number_whole() -> None:
    view = DemoView(io.StringIO(), True, titles=TITLES, cold_start_s=60)
    view.update(4.0, SAMPLES)
    out = io.StringIO()
    Console(file=out, width=COLUMNS, force_terminal=False).print(view._table())
    lines = out.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= COLUMNS
    (row,) = [line for line in lines if "14.52" in line]
    assert all(n in row for n in NUMBERS) and "…" in row
    text = out.getvalue()
    assert TITLES["ours"] in text and TITLES["keda"] in text  # the legend, not cropped


def test_headless_lines_fit_80_columns_with_every_number_whole() -> None:
    out = io.StringIO()
    cold = FleetSample(1, 0, 4, 0, None, "hold-missing-data", None, None)
    with DemoView(out, False, titles=TITLES, cold_start_s=60) as view:
        view.update(0.0, {"ours": cold, "keda": cold})
        view.update(1.0, {"ours": cold, "keda": cold})  # same reason: not repeated
        view.update(4.0, SAMPLES)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines) <= COLUMNS
    assert lines[0].split() == ["ours", "keda"] and "ttft95" in lines[1]
    reasons = [line.strip() for line in lines if "ours:" in line]
    assert reasons[0] == "ours: waiting for the first replica: cold start 60 s"  # whole
    assert len(reasons) == 2 and reasons[1].endswith("…")  # only the long one is cut
    assert all(n in lines[-1] for n in NUMBERS)
