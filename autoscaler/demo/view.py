"""The demo's terminal view: a live table on a TTY, one plain line per second headless.

Two column groups, one per fleet, on the same load: this controller (``ours``) and the
seeds' KEDA+HPA chain (``keda``). Nothing else is printed while the demo runs; logs go
to a file (see `commands.demo`).
"""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.console import Console
from rich.live import Live
from rich.table import Table

from autoscaler.demo.compare import FleetSample

# Per fleet: Deployment replicas, ready, GPUs held (pause and Pending pods included),
# waiting requests, client TTFT p95 (emulated s).
FLEET_COLUMNS = ("rep", "rdy", "gpu", "queue", "ttft95")
WIDTHS = (4, 4, 4, 5, 6)  # at least the fleet key ("ours", "keda") above each
COLUMNS = 80  # both views fit a default terminal: the reason is cut, never a number


def _fit(line: str) -> str:
    """A headless line cut to `COLUMNS` (only the trailing reason text is ever long)."""
    return line if len(line) <= COLUMNS else line[: COLUMNS - 1] + "…"


def _fmt(value: float | int | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def reason_text(sample: FleetSample, cold_start_s: float) -> str:
    """The decision's reason, in words a newcomer reads right: with no replica ready yet,
    missing data means pods are cold-starting, not that something failed (the
    machine-readable reason stays ``hold-missing-data`` in the API and the logs)."""
    if sample.reason is None:
        return "waiting for the first decision"
    if sample.reason == "hold-missing-data" and sample.ready == 0:
        return f"waiting for the first replica: cold start {cold_start_s:.0f} s"
    return sample.reason


def fleet_cells(s: FleetSample) -> tuple[str, ...]:
    return (
        _fmt(s.replicas, "d"),
        str(s.ready),
        str(s.gpus),
        str(s.waiting),
        _fmt(s.ttft_p95_s, ".2f"),
    )


class DemoView:
    def __init__(
        self,
        out: TextIO,
        live: bool,
        *,
        titles: dict[str, str],
        cold_start_s: float,
        keep_rows: int = 18,
    ) -> None:
        self.out = out
        self.console = Console(file=out)
        if self.console.width > COLUMNS and not self.console.is_terminal:
            self.console.width = COLUMNS
        self.live = live and self.console.is_terminal
        self.titles = titles
        self.cold_start_s = cold_start_s
        self.keep_rows = keep_rows
        self.rows: list[tuple[str, ...]] = []
        self.caption = ""
        self.notes: list[str] = []  # the model at zero: held, answered, back to zero
        self.mix = ""  # the target with variants: its replicas per variant, last change
        self._live: Live | None = None

    def __enter__(self) -> DemoView:
        if self.live:
            self._live = Live(self._table(), console=self.console, refresh_per_second=2)
            self._live.__enter__()
        else:  # two header lines, as the table: the fleet over its columns
            fleets = [" " * 5] + [f"{k:<{sum(WIDTHS) + len(WIDTHS) - 1}}" for k in self.titles]
            print(" ".join(fleets).rstrip(), file=self.out)
            heads = [f"{'t_s':>5}"] + [
                f"{c:>{w}}" for _ in self.titles for c, w in zip(FLEET_COLUMNS, WIDTHS, strict=True)
            ]
            print(" ".join(heads), file=self.out)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
            self._live = None

    def _table(self) -> Table:
        table = Table(
            title="llm-autoscaler demo: same load, two fleets (t_s: emulated s)",
            box=box.SIMPLE_HEAD,
            padding=(0, 0),  # the box's space between columns is the gap: 80 columns fit
            expand=False,
        )
        table.add_column("t_s", justify="right", min_width=5, no_wrap=True)
        for key in self.titles:
            style = "cyan" if key == "ours" else "magenta"
            for c, width in zip(FLEET_COLUMNS, WIDTHS, strict=True):
                table.add_column(
                    f"{key}\n{c}", justify="right", min_width=width, no_wrap=True, style=style
                )
        # t_s, 5 columns per fleet and a space around each: what is left of 80 columns
        used = 5 + len(self.titles) * sum(WIDTHS) + 2 + len(self.titles) * len(WIDTHS) + 1
        table.add_column(
            "\nreason (ours)",
            justify="left",
            no_wrap=True,
            overflow="ellipsis",
            max_width=max(COLUMNS - used - 1, 8),
        )
        for r in self.rows[-self.keep_rows :]:
            table.add_row(*r)
        legend = "\n".join(f"{k} = {t}" for k, t in self.titles.items())
        lines = [legend, *(f"zero: {n}" for n in self.notes[-3:])]
        if self.mix:
            lines.append(f"variants: {self.mix}")
        if self.caption:
            lines.append(self.caption)
        table.caption = "\n".join(lines)
        return table

    def note(self, text: str) -> None:
        """A moment of the model at zero: a line of its own headless, the caption live."""
        self.notes.append(text)
        if self._live is not None:
            self._live.update(self._table())
        else:
            print(_fit(f"{'':5} zero: {text}"), file=self.out, flush=True)

    def variants(self, text: str) -> None:
        """The target with variants changed its split: one line headless, live a caption
        line (the table keeps its columns)."""
        self.mix = text
        if self._live is not None:
            self._live.update(self._table())
        else:
            print(_fit(f"{'':5} variants: {text}"), file=self.out, flush=True)

    def update(self, t_s: float, samples: dict[str, FleetSample]) -> None:
        ours = samples["ours"]
        r = (f"{t_s:5.0f}", *(c for k in self.titles for c in fleet_cells(samples[k])))
        r = (*r, reason_text(ours, self.cold_start_s))
        self.rows.append(r)
        if ours.message and ours.reason not in (None, "steady", "hold-missing-data"):
            self.caption = f"ours, last decision: {ours.message}"
        if self._live is not None:
            self._live.update(self._table())
        else:
            # The reason on a line of its own when it changes: rows stay within 80
            # columns and the reason is never cut.
            if len(self.rows) == 1 or self.rows[-2][-1] != r[-1]:
                print(_fit(f"{'':5} ours: {r[-1]}"), file=self.out)
            widths = (5, *(w for _ in self.titles for w in WIDTHS))
            cells = " ".join(f"{c:>{w}}" for c, w in zip(r[:-1], widths, strict=True))
            print(cells, file=self.out, flush=True)
