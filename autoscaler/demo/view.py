"""The demo's terminal view: a live table on a TTY, one plain line per second headless."""

from __future__ import annotations

from typing import TextIO

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autoscaler.domain import Decision, Observation

# Short headers so the live table fits an 80-column terminal: time (emulated s), spec
# replicas, ready, desired, waiting, running, mean KV usage, TTFT p95 (s), reason.
COLUMNS = ("t_s", "rep", "rdy", "want", "queue", "run", "kv", "ttft95", "reason")
WIDTHS = (5, 3, 3, 4, 5, 4, 4, 6, 17)


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def row(t_s: float, decision: Decision, obs: Observation | None) -> tuple[str, ...]:
    sig = obs.signals if obs is not None else {}
    return (
        f"{t_s:5.0f}",
        str(decision.current_replicas),
        str(obs.ready_replicas if obs is not None else "-"),
        str(decision.desired_replicas),
        _fmt(sig.get("waiting"), ".0f"),
        _fmt(sig.get("running"), ".0f"),
        _fmt(sig.get("kv_cache_usage"), ".2f"),
        _fmt(sig.get("ttft_p95_s"), ".2f"),
        str(decision.reason),
    )


class DemoView:
    def __init__(self, out: TextIO, live: bool, keep_rows: int = 20) -> None:
        self.out = out
        self.console = Console(file=out)
        self.live = live and self.console.is_terminal
        self.keep_rows = keep_rows
        self.rows: list[tuple[str, ...]] = []
        self.messages: list[str] = []
        self._live: Live | None = None

    def __enter__(self) -> DemoView:
        if self.live:
            self._live = Live(self._table(), console=self.console, refresh_per_second=2)
            self._live.__enter__()
        else:
            print(" ".join(f"{c:>9}" for c in COLUMNS), file=self.out, flush=True)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)

    def _table(self) -> Table:
        table = Table(title="llm-autoscaler demo: demo/llama-3-8b", expand=False)
        for c, width in zip(COLUMNS, WIDTHS, strict=True):
            if c == "reason":
                table.add_column(c, justify="left", min_width=width, no_wrap=True)
            else:
                table.add_column(c, justify="right", min_width=width, no_wrap=True)
        for r in self.rows[-self.keep_rows :]:
            table.add_row(*r)
        if self.messages:
            table.caption = self.messages[-1]
        return table

    def update(self, t_s: float, decision: Decision, obs: Observation | None) -> None:
        r = row(t_s, decision, obs)
        self.rows.append(r)
        if decision.changed:
            self.messages.append(decision.message)
        if self._live is not None:
            self._live.update(self._table())
        else:
            line = " ".join(f"{c:>9}" for c in r[:-1]) + f"  {r[-1]}"
            if decision.changed:
                line += f"  | {decision.message}"
            print(line, file=self.out, flush=True)
