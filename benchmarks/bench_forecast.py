"""Forecast error at the cold-start horizon, per forecaster, on real and synthetic traces.

Series: requests/s and tokens/s binned into 5 s ticks (what a controller sees), fed
online to each forecaster at the end of each bin. At every tick each model forecasts
``t + h`` for h in 60/180/600 s; the actual is the mean rate over the 60 s window centred
on ``t + h`` (replicas are sized for sustained load, not for one 5 s Poisson bin).
MAPE skips windows whose actual is 0 (undefined); WAPE = sum|error| / sum|actual| keeps
them. ``naive`` = the mean of the last 60 s (persistence), the reference to beat.

Run: .venv/bin/python benchmarks/bench_forecast.py   (writes benchmarks/results/forecast.json)
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import math
import platform
import time
from pathlib import Path
from typing import TypedDict

import numpy as np

from autoscaler.forecast.auto import Auto
from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal

TRACES = Path(__file__).resolve().parents[1] / "data" / "traces"
RESULTS = Path(__file__).parent / "results" / "forecast.json"
HORIZONS_S = (60.0, 180.0, 600.0)
BIN_S = 5.0
ACTUAL_WINDOW_S = 60.0
DAY_S = 86_400.0


class Row(TypedDict):
    models: dict[str, dict[str, float]]
    auto_chose: str


def _seconds(stamp: str) -> float:
    day, clock = stamp.split(" ")
    h, m, s = clock.split(":")
    d = int(day.split("-")[2])
    return d * DAY_S + int(h) * 3600 + int(m) * 60 + float(s)


def load_trace(name: str) -> dict[str, np.ndarray]:
    """Rates per 5 s bin: arrival_rate_per_s, prompt/generation_tokens_per_s."""
    times: list[float] = []
    prompt: list[int] = []
    gen: list[int] = []
    with gzip.open(TRACES / f"AzureLLMInferenceTrace_{name}.csv.gz", "rt") as fh:
        for row in csv.DictReader(fh):
            times.append(_seconds(row["TIMESTAMP"]))
            prompt.append(int(row["ContextTokens"]))
            gen.append(int(row["GeneratedTokens"]))
    t = np.asarray(times) - times[0]
    n = int(t[-1] // BIN_S) + 1
    idx = (t // BIN_S).astype(int)
    return {
        "arrival_rate_per_s": np.bincount(idx, minlength=n) / BIN_S,
        "prompt_tokens_per_s": np.bincount(idx, weights=prompt, minlength=n) / BIN_S,
        "generation_tokens_per_s": np.bincount(idx, weights=gen, minlength=n) / BIN_S,
    }


def diurnal(days: int = 3, seed: int = 7) -> dict[str, np.ndarray]:
    """Synthetic diurnal days: a morning ramp, a lunch dip, an evening peak, a night
    trough (peak 20 req/s, trough 1.5 req/s), day volume +-10 %, Poisson counts per bin,
    and a few 30-120 s bursts; returns the arrival rate per 5 s bin."""
    rng = np.random.default_rng(seed)
    n_per_day = int(DAY_S // BIN_S)
    hours = (np.arange(n_per_day) * BIN_S) / 3600.0
    shape = (
        0.075
        + 0.55 * np.exp(-0.5 * ((hours - 11.0) / 2.5) ** 2)
        + 0.925 * np.exp(-0.5 * ((hours - 19.5) / 2.0) ** 2)
        - 0.12 * np.exp(-0.5 * ((hours - 13.0) / 0.5) ** 2)
    )
    rates: list[np.ndarray] = []
    for _ in range(days):
        lam = 20.0 * np.clip(shape, 0.05, None) * rng.uniform(0.9, 1.1)
        for _ in range(4):
            start = rng.integers(0, n_per_day - 30)
            lam[start : start + rng.integers(6, 24)] *= rng.uniform(2.0, 4.0)
        rates.append(rng.poisson(lam * BIN_S) / BIN_S)
    return {"arrival_rate_per_s": np.concatenate(rates)}


def actual_series(rate: np.ndarray) -> np.ndarray:
    """Mean rate over the window centred on each bin end."""
    half = int(ACTUAL_WINDOW_S / BIN_S / 2)
    c = np.concatenate([[0.0], np.cumsum(rate)])
    n = len(rate)
    lo = np.clip(np.arange(n) - half + 1, 0, n)
    hi = np.clip(np.arange(n) + half + 1, 0, n)
    out: np.ndarray = (c[hi] - c[lo]) / np.maximum(hi - lo, 1)
    return out


def models(horizon_s: float, period_s: float) -> dict[str, Forecaster]:
    seasonal = Seasonal(period_s=period_s, bins=48)
    return {
        "ewma": Ewma(),
        "holt": Holt(),
        "seasonal": seasonal,
        "auto": Auto(candidates=(Ewma(), Holt(), seasonal), horizon_s=horizon_s),
    }


def evaluate(rate: np.ndarray, period_s: float, eval_from_s: float) -> dict[str, Row]:
    """{horizon: {"models": {model: {mape, wape, n}}, "auto_chose": name}}."""
    actual = actual_series(rate)
    n = len(rate)
    trailing = int(ACTUAL_WINDOW_S / BIN_S)
    c = np.concatenate([[0.0], np.cumsum(rate)])
    out: dict[str, Row] = {}
    for h in HORIZONS_S:
        steps = int(h / BIN_S)
        half = int(ACTUAL_WINDOW_S / BIN_S / 2)
        ms = models(h, period_s)
        preds: dict[str, list[float]] = {name: [] for name in (*ms, "naive")}
        truth: list[float] = []
        for i in range(n):
            t = (i + 1) * BIN_S
            for name in ms:
                ms[name] = ms[name].update(t, float(rate[i]))
            j = i + steps
            if t < eval_from_s or j + half >= n:
                continue
            for name, m in ms.items():
                p = m.predict(t, h)
                preds[name].append(float("nan") if p is None else p)
            lo = max(0, i + 1 - trailing)
            preds["naive"].append(float((c[i + 1] - c[lo]) / (i + 1 - lo)))
            truth.append(float(actual[j]))
        a = np.asarray(truth)
        scores: dict[str, dict[str, float]] = {}
        for name, p_list in preds.items():
            pa = np.asarray(p_list)
            ok = ~np.isnan(pa)
            err = np.abs(pa[ok] - a[ok])
            pos = ok & (a > 0)
            mape = float(np.mean(np.abs(pa[pos] - a[pos]) / a[pos])) if pos.any() else math.nan
            wape = float(err.sum() / max(np.abs(a[ok]).sum(), 1e-12))
            scores[name] = {"mape": mape, "wape": wape, "n": int(ok.sum())}
        auto = ms["auto"]
        assert isinstance(auto, Auto)
        out[f"{int(h)}"] = {"models": scores, "auto_chose": auto.model.name}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=3, help="synthetic diurnal days (last scored)")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    started = time.perf_counter()
    cases: list[tuple[str, str, np.ndarray, float, float]] = []
    for trace in ("code", "conv"):
        series = load_trace(trace)
        for signal in ("arrival_rate_per_s", "generation_tokens_per_s", "prompt_tokens_per_s"):
            cases.append((trace, signal, series[signal], DAY_S, 300.0))
    syn = diurnal(args.days)
    cases.append(
        ("diurnal", "arrival_rate_per_s", syn["arrival_rate_per_s"], DAY_S, (args.days - 1) * DAY_S)
    )
    results: dict[str, object] = {}
    names = ("naive", "ewma", "holt", "seasonal", "auto")
    header = (
        f"{'trace':8} {'signal':24} {'h_s':>4} "
        + " ".join(f"{n:>15}" for n in names)
        + "  auto chose"
    )
    print("MAPE / WAPE at the horizon (lower is better)")
    print(header)
    print("-" * len(header))

    def fmt(r: dict[str, float]) -> str:
        return f"{r['mape']:6.3f} / {r['wape']:5.3f}"

    for trace, signal, rate, period, eval_from in cases:
        res = evaluate(rate, period, eval_from)
        results[f"{trace}/{signal}"] = res
        for h, row in res.items():
            cells = " ".join(f"{fmt(row['models'][n]):>15}" for n in names)
            print(f"{trace:8} {signal:24} {h:>4} {cells}  {row['auto_chose']}")
    elapsed = time.perf_counter() - started
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(
        json.dumps(
            {
                "benchmark": "forecast",
                "bin_s": BIN_S,
                "actual_window_s": ACTUAL_WINDOW_S,
                "horizons_s": list(HORIZONS_S),
                "python": platform.python_version(),
                "elapsed_s": round(elapsed, 1),
                "results": results,
            },
            indent=2,
        )
    )
    print(f"wrote {args.out} in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
