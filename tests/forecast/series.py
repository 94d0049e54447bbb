"""Synthetic series with known answers, shared by the forecast tests."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TypeVar

import numpy as np

from autoscaler.forecast.models import Forecaster

F = TypeVar("F", bound=Forecaster)


def feed(model: F, samples: Iterable[tuple[float, float]]) -> F:
    for t, x in samples:
        model = model.update(t, x)
    return model


def constant(
    level: float, t0: float, t1: float, dt: float = 1.0, noise: float = 0.0, seed: int = 0
) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    n = int((t1 - t0) / dt)
    return [(t0 + i * dt, max(0.0, level + noise * float(rng.normal()))) for i in range(n)]


def linear(
    intercept: float, slope: float, t1: float, dt: float = 1.0, noise: float = 0.0, seed: int = 0
) -> list[tuple[float, float]]:
    rng = np.random.default_rng(seed)
    return [
        (i * dt, max(0.0, intercept + slope * i * dt + noise * float(rng.normal())))
        for i in range(int(t1 / dt))
    ]


def periodic(
    mean: float, amplitude: float, period_s: float, t1: float, dt: float = 10.0
) -> list[tuple[float, float]]:
    return [
        (i * dt, mean + amplitude * math.sin(2 * math.pi * i * dt / period_s))
        for i in range(int(t1 / dt))
    ]


def periodic_value(mean: float, amplitude: float, period_s: float, t: float) -> float:
    return mean + amplitude * math.sin(2 * math.pi * t / period_s)
