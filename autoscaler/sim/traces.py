"""Request traces for the simulator: loaders (Azure CSV, JSONL) and seeded transforms.

A trace is three aligned numpy arrays (arrival second from the first request, prompt
tokens, output tokens). Transforms return new traces and never mutate their input, so one
loaded trace can feed every policy of a comparison.
"""

from __future__ import annotations

import csv
import gzip
import io
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

from autoscaler.errors import ConfigError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True, eq=False)
class Trace:
    """Requests sorted by arrival; ``arrival_s`` starts at 0."""

    name: str
    arrival_s: FloatArray
    prompt_tokens: IntArray
    output_tokens: IntArray

    def __post_init__(self) -> None:
        n = len(self.arrival_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ConfigError(
                f"trace {self.name!r}: arrays differ in length "
                f"({n}, {len(self.prompt_tokens)}, {len(self.output_tokens)})"
            )
        if n and bool(np.any(np.diff(self.arrival_s) < 0)):
            raise ConfigError(f"trace {self.name!r}: arrival_s must be non-decreasing")

    def __len__(self) -> int:
        return len(self.arrival_s)

    @property
    def duration_s(self) -> float:
        return float(self.arrival_s[-1]) if len(self) else 0.0

    @property
    def mean_rate_per_s(self) -> float:
        return len(self) / self.duration_s if self.duration_s > 0 else 0.0

    def window(self, start_s: float, end_s: float) -> Trace:
        """Requests arriving in ``[start_s, end_s)``, re-based to start at 0."""
        lo, hi = np.searchsorted(self.arrival_s, [start_s, end_s], side="left")
        return _make(
            f"{self.name}[{start_s:g}:{end_s:g}]",
            self.arrival_s[lo:hi] - start_s,
            self.prompt_tokens[lo:hi],
            self.output_tokens[lo:hi],
        )

    def rate_per_s(self, bin_s: float) -> FloatArray:
        """Arrivals per second in consecutive bins of ``bin_s`` (for plots and tests)."""
        nbins = max(1, math.ceil((self.duration_s + 1e-9) / bin_s))
        counts = np.bincount((self.arrival_s // bin_s).astype(np.int64), minlength=nbins)
        return counts.astype(np.float64) / bin_s


def _make(name: str, arrival: FloatArray, prompt: IntArray, output: IntArray) -> Trace:
    order = np.argsort(arrival, kind="stable")
    arr = np.asarray(arrival, dtype=np.float64)[order]
    if len(arr):
        arr = arr - min(0.0, float(arr[0]))
    return Trace(
        name=name,
        arrival_s=arr,
        prompt_tokens=np.asarray(prompt, dtype=np.int64)[order],
        output_tokens=np.asarray(output, dtype=np.int64)[order],
    )


def from_arrays(
    name: str, arrival_s: list[float] | FloatArray, prompt: list[int], output: list[int]
) -> Trace:
    """Build a trace from plain lists (tests, synthetic workloads); sorts by arrival."""
    a = np.asarray(arrival_s, dtype=np.float64)
    p = np.asarray(prompt, dtype=np.int64)
    o = np.asarray(output, dtype=np.int64)
    if len(a) and (float(a.min()) < 0):
        raise ConfigError(f"trace {name!r}: arrival_s must be >= 0 (value {float(a.min())})")
    _check_tokens(name, p, o)
    return _make(name, a, p, o)


def _check_tokens(name: str, prompt: IntArray, output: IntArray) -> None:
    for field_name, arr in (("prompt tokens", prompt), ("output tokens", output)):
        if len(arr) and int(arr.min()) < 1:
            i = int(np.argmin(arr))
            raise ConfigError(
                f"trace {name!r}: row {i}: {field_name} value {int(arr[i])} must be >= 1"
            )


def _open_text(path: Path) -> io.TextIOBase:
    with path.open("rb") as probe:
        magic = probe.read(2)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8")
    return io.TextIOWrapper(path.open("rb"), encoding="utf-8")


def _int_field(name: str, line: int, field_name: str, raw: object) -> int:
    try:
        if isinstance(raw, bool):
            raise ValueError
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError
            value = int(raw)
        else:
            value = int(str(raw).strip())
    except (TypeError, ValueError):
        raise ConfigError(
            f"{name}: line {line}: {field_name} value {raw!r} must be an integer"
        ) from None
    if value < 1:
        raise ConfigError(f"{name}: line {line}: {field_name} value {value} must be >= 1")
    return value


def load_azure_csv(path: Path) -> Trace:
    """Azure LLM inference trace: ``TIMESTAMP,ContextTokens,GeneratedTokens``."""
    times: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    with _open_text(path) as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        want = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]
        if header is None or [h.strip() for h in header] != want:
            raise ConfigError(f"{path}: line 1: header {header!r} must be {','.join(want)}")
        for line, row in enumerate(reader, start=2):
            if not row:
                continue
            if len(row) != 3:
                raise ConfigError(f"{path}: line {line}: {len(row)} columns, expected 3")
            try:
                ts = datetime.fromisoformat(row[0].strip())
            except ValueError:
                raise ConfigError(
                    f"{path}: line {line}: TIMESTAMP value {row[0]!r} must be "
                    "'YYYY-MM-DD HH:MM:SS[.fffffff]'"
                ) from None
            times.append(ts.timestamp() if ts.tzinfo else _naive_seconds(ts))
            prompt.append(_int_field(str(path), line, "ContextTokens", row[1]))
            output.append(_int_field(str(path), line, "GeneratedTokens", row[2]))
    a = np.asarray(times, dtype=np.float64)
    if len(a):
        a = a - a.min()
    return _make(path.name, a, np.asarray(prompt), np.asarray(output))


def _naive_seconds(ts: datetime) -> float:
    # Naive wall-clock: only differences matter, so avoid the local time zone entirely.
    return (
        ts.toordinal() * 86400.0
        + ts.hour * 3600
        + ts.minute * 60
        + ts.second
        + (ts.microsecond / 1e6)
    )


def load_jsonl(path: Path) -> Trace:
    """JSONL with ``timestamp`` (ms), ``input_length``, ``output_length`` per line."""
    times: list[float] = []
    prompt: list[int] = []
    output: list[int] = []
    with _open_text(path) as fh:
        for line, text in enumerate(fh, start=1):
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{path}: line {line}: invalid JSON ({err.msg})") from None
            if not isinstance(row, dict):
                raise ConfigError(f"{path}: line {line}: value must be a JSON object")
            for key in ("timestamp", "input_length", "output_length"):
                if key not in row:
                    raise ConfigError(f"{path}: line {line}: field {key!r} is missing")
            ts = row["timestamp"]
            if isinstance(ts, bool) or not isinstance(ts, int | float) or not math.isfinite(ts):
                raise ConfigError(
                    f"{path}: line {line}: timestamp value {ts!r} must be a number (ms)"
                )
            times.append(float(ts) / 1000.0)
            prompt.append(_int_field(str(path), line, "input_length", row["input_length"]))
            output.append(_int_field(str(path), line, "output_length", row["output_length"]))
    a = np.asarray(times, dtype=np.float64)
    if len(a):
        a = a - a.min()
    return _make(path.name, a, np.asarray(prompt), np.asarray(output))


def load_trace(path: str | Path) -> Trace:
    """Load by content: a JSONL line starts with ``{``, anything else is Azure CSV."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"trace: path {str(p)!r} does not exist or is not a file")
    with _open_text(p) as fh:
        first = fh.read(64).lstrip()
    return load_jsonl(p) if first.startswith("{") else load_azure_csv(p)


def speed_up(trace: Trace, factor: float) -> Trace:
    """Compress time by ``factor`` (2.0 = same requests in half the time)."""
    if not factor > 0:
        raise ConfigError(f"speed_up: factor value {factor} must be > 0")
    return _make(
        f"{trace.name}x{factor:g}",
        trace.arrival_s / factor,
        trace.prompt_tokens,
        trace.output_tokens,
    )


def scale_rate(trace: Trace, factor: float, seed: int = 0, jitter_s: float = 0.5) -> Trace:
    """Scale the request rate keeping the time span: thin (factor < 1) or duplicate.

    Each request is kept ``floor(factor)`` times plus once more with probability
    ``frac(factor)``; copies get a uniform jitter in ``[0, jitter_s)`` so duplicated
    requests do not all land in the same instant.
    """
    if not factor > 0:
        raise ConfigError(f"scale_rate: factor value {factor} must be > 0")
    rng = np.random.default_rng(seed)
    base = math.floor(factor)
    copies = base + (rng.random(len(trace)) < factor - base).astype(np.int64)
    idx = np.repeat(np.arange(len(trace)), copies)
    first = np.concatenate(([0], np.cumsum(copies)[:-1])) if len(trace) else np.array([])
    is_copy = np.ones(len(idx), dtype=bool)
    if len(idx):
        is_copy[first[copies > 0].astype(np.int64)] = False
    arrival = trace.arrival_s[idx] + np.where(is_copy, rng.random(len(idx)) * jitter_s, 0.0)
    return _make(
        f"{trace.name}*{factor:g}", arrival, trace.prompt_tokens[idx], trace.output_tokens[idx]
    )


def diurnal_envelope(t_s: FloatArray, day_s: float, trough: float, peak_at_s: float) -> FloatArray:
    """Relative load in ``[trough, 1]``: a cosine day with its maximum at ``peak_at_s``."""
    phase = 2.0 * np.pi * (t_s - peak_at_s) / day_s
    return trough + (1.0 - trough) * 0.5 * (1.0 + np.cos(phase))


def diurnal_day(
    trace: Trace,
    *,
    day_s: float = 86_400.0,
    trough: float = 0.1,
    peak_at_s: float | None = None,
    peak_scale: float = 1.0,
    seed: int = 0,
) -> Trace:
    """Tile ``trace`` over ``day_s`` and thin it under a day/night envelope.

    At the peak the rate is ``peak_scale`` x the trace's own rate (duplicating when > 1),
    at night ``trough`` x that. The trace's burst structure is kept inside each tile.
    """
    if not day_s > 0 or not 0 <= trough <= 1 or not peak_scale > 0:
        raise ConfigError(
            f"diurnal_day: day_s {day_s} must be > 0, trough {trough} in [0, 1], "
            f"peak_scale {peak_scale} > 0"
        )
    if len(trace) == 0 or trace.duration_s <= 0:
        raise ConfigError(f"diurnal_day: trace {trace.name!r} must span > 0 s")
    span = trace.duration_s + trace.duration_s / max(len(trace) - 1, 1)
    tiles = math.ceil(day_s / span)
    offsets = np.repeat(np.arange(tiles) * span, len(trace))
    arrival = np.tile(trace.arrival_s, tiles) + offsets
    keep = arrival < day_s
    arrival = arrival[keep]
    prompt = np.tile(trace.prompt_tokens, tiles)[keep]
    output = np.tile(trace.output_tokens, tiles)[keep]
    tiled = _make(f"{trace.name}-tiled", arrival, prompt, output)
    if peak_scale != 1.0:
        tiled = scale_rate(tiled, peak_scale, seed=seed + 1)
    peak = day_s / 2 if peak_at_s is None else peak_at_s
    rng = np.random.default_rng(seed)
    env = diurnal_envelope(tiled.arrival_s, day_s, trough, peak)
    mask = rng.random(len(tiled)) < env
    return Trace(
        name=f"{trace.name}-diurnal",
        arrival_s=tiled.arrival_s[mask],
        prompt_tokens=tiled.prompt_tokens[mask],
        output_tokens=tiled.output_tokens[mask],
    )


def poisson_trace(
    rate_per_s: float,
    duration_s: float,
    prompt_tokens: int,
    output_tokens: int,
    seed: int = 0,
    name: str = "poisson",
) -> Trace:
    """Synthetic constant-size Poisson arrivals (unit tests, sanity checks)."""
    rng = np.random.default_rng(seed)
    n = rng.poisson(rate_per_s * duration_s)
    arrival = np.sort(rng.random(n) * duration_s)
    return _make(
        name,
        arrival,
        np.full(n, prompt_tokens, dtype=np.int64),
        np.full(n, output_tokens, dtype=np.int64),
    )


def iter_requests(trace: Trace) -> Iterator[tuple[float, int, int]]:
    """(arrival_s, prompt_tokens, output_tokens) as Python scalars."""
    yield from zip(
        trace.arrival_s.tolist(),
        trace.prompt_tokens.tolist(),
        trace.output_tokens.tolist(),
        strict=True,
    )


def _truncated_lognormal(
    rng: np.random.Generator, n: int, median: float, sigma: float, hi: int
) -> IntArray:
    """``n`` log-normal integers in [1, hi], out-of-range draws redrawn (not clipped, so no
    pile-up at the bound)."""
    out = np.empty(0, dtype=np.int64)
    while len(out) < n:
        draw = np.rint(rng.lognormal(math.log(median), sigma, size=2 * (n - len(out)) + 16))
        keep = draw[(draw >= 1) & (draw <= hi)].astype(np.int64)
        out = np.concatenate([out, keep])
    return out[:n]


def long_context_chat(seed: int = 0, duration_s: float = 3600.0) -> Trace:
    """A synthesized long-context chat hour (issue 18's held-out trace, by its statistics):
    prompts log-normal with median 7k and sigma 1.12 (mean ~12.3k, p99 ~80k) redrawn above
    126k tokens; outputs log-normal median 200, sigma 1.03 (mean ~340); arrivals Poisson
    at a rate drifting smoothly between 145 and 250 per minute (mean ~3.3/s: three
    sinusoids of 41, 17 and 9 minutes with seeded phases, rescaled to that band)."""
    if not duration_s > 0:
        raise ConfigError(f"duration_s: value {duration_s} must be > 0")
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration_s, 1.0)
    phases = rng.uniform(0, 2 * math.pi, size=3)
    wave = sum(
        w * np.sin(2 * math.pi * t / (p * 60.0) + ph)
        for w, p, ph in zip((1.0, 0.5, 0.25), (41.0, 17.0, 9.0), phases, strict=True)
    )
    span = float(wave.max() - wave.min()) or 1.0
    per_min = 145.0 + 105.0 * (wave - float(wave.min())) / span
    counts = rng.poisson(per_min / 60.0)
    arrival = np.repeat(t, counts) + rng.uniform(0.0, 1.0, size=int(counts.sum()))
    n = len(arrival)
    prompt = _truncated_lognormal(rng, n, 7000.0, 1.12, 126_000)
    output = _truncated_lognormal(rng, n, 200.0, 1.03, 4096)
    output = np.minimum(output, 131_072 - prompt)
    return _make("long-context chat (synthetic)", np.sort(arrival), prompt, output)


def mixed_rag_chat(seed: int = 0, duration_s: float = 3 * 3600.0) -> Trace:
    """A synthesized mixed RAG + chat service (issue 36's scenario nobody tuned on).

    Two request classes: chat (70%: prompts uniform 1-2k tokens) and RAG (30%: prompts
    uniform 20-60k tokens, retrieved context); outputs log-normal median 200, sigma 0.8
    for both. Arrivals Poisson under a slow diurnal swing (cosine from 0.4 of the peak at
    t = 0 to the peak after ``duration_s``: the morning ramp of a 2 x ``duration_s``
    day) at 150 requests/min at the peak, times 5-minute bursts at 2.5x the rate that
    start as a Poisson process (one per 20 minutes on average)."""
    if not duration_s > 0:
        raise ConfigError(f"duration_s: value {duration_s} must be > 0")
    rng = np.random.default_rng(seed)
    t = np.arange(0.0, duration_s, 1.0)
    swing = 0.4 + 0.6 * (1.0 - np.cos(math.pi * t / duration_s)) / 2.0
    burst = np.ones_like(t)
    starts = np.cumsum(rng.exponential(1200.0, size=int(duration_s / 600.0) + 4))
    for s in starts[starts < duration_s]:
        burst[(t >= s) & (t < s + 300.0)] = 2.5
    counts = rng.poisson(150.0 / 60.0 * swing * burst)
    arrival = np.sort(np.repeat(t, counts) + rng.uniform(0.0, 1.0, size=int(counts.sum())))
    n = len(arrival)
    rag = rng.random(n) < 0.3
    prompt = np.where(
        rag, rng.integers(20_000, 60_001, size=n), rng.integers(1_000, 2_001, size=n)
    ).astype(np.int64)
    output = _truncated_lognormal(rng, n, 200.0, 0.8, 4096)
    return _make("mixed RAG + chat (synthetic)", arrival, prompt, output)
