"""The cost-optimal mix of GPU variants for a stable load (Mélange, arXiv 2404.14527).

Requests are grouped into size buckets (prompt and output length). Each variant's
replica sustains ``capacity[b]`` requests/s of bucket ``b`` alone within the SLO (learned
or profiled; a missing or zero entry: the variant cannot serve that bucket, e.g. over its
``max_model_len``). A replica serving a blend of buckets is busy by the sum of each
bucket's load over its capacity (Mélange's linear time-sharing assumption). The mix is
the integer program

    minimise    sum_v cost_v * n_v
    subject to  sum_v x[v, b] = 1                           for every bucket with load
                sum_b load_b * x[v, b] / capacity[v, b] <= n_v   for every variant
                min_v <= n_v <= max_v integer,  x >= 0

solved with scipy's ``milp`` (HiGHS). The greedy split (policy/variants.py) reacts; this
re-balances slowly, inside the stabilisation windows. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp

from autoscaler.errors import ConfigError


@dataclass(frozen=True, slots=True)
class MixVariant:
    """A variant as the optimiser sees it: price and per-bucket capacity per replica."""

    name: str
    cost_per_replica_hour: float
    capacity: Mapping[str, float]  # bucket -> requests/s one replica sustains in the SLO
    min_replicas: int = 0
    max_replicas: int | None = None

    def __post_init__(self) -> None:
        p = f"variants[{self.name}]"
        problems: list[str] = []
        if not (math.isfinite(self.cost_per_replica_hour) and self.cost_per_replica_hour > 0):
            problems.append(
                f"{p}.cost_per_replica_hour: value {self.cost_per_replica_hour} must be > 0"
            )
        for b, c in self.capacity.items():
            if not (math.isfinite(c) and c >= 0):
                problems.append(f"{p}.capacity[{b}]: value {c} must be finite and >= 0")
        if self.min_replicas < 0:
            problems.append(f"{p}.min_replicas: value {self.min_replicas} must be >= 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            problems.append(
                f"{p}.max_replicas: value {self.max_replicas} must be >= min_replicas"
                f" {self.min_replicas}"
            )
        if problems:
            raise ConfigError("invalid variant", problems)


@dataclass(frozen=True, slots=True)
class Mix:
    """The optimum: replicas per variant, its cost per hour, and the share of each
    bucket's load each variant takes (the router's weights)."""

    replicas: Mapping[str, int]
    cost_per_hour: float
    shares: Mapping[str, Mapping[str, float]]  # variant -> bucket -> share of the bucket


def optimal_mix(
    variants: Sequence[MixVariant], load: Mapping[str, float], *, time_limit_s: float = 5.0
) -> Mix | None:
    """The cheapest mix serving ``load`` (bucket -> requests/s); None when no mix within
    the variants' max can (a bucket no variant serves, or not enough replicas)."""
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"variants: names {names} must be unique")
    for b, x in load.items():
        if not (math.isfinite(x) and x >= 0):
            raise ConfigError(f"load[{b}]: value {x} must be finite and >= 0")
    buckets = sorted(b for b, x in load.items() if x > 0)
    nv, nb = len(variants), len(buckets)
    if nv == 0:
        return None if buckets else Mix({}, 0.0, {})
    # variables: n_0..n_{V-1}, then x[v, b] at V + v * B + b
    nx = nv + nv * nb
    cost = np.zeros(nx)
    lo = np.zeros(nx)
    hi = np.full(nx, np.inf)
    integrality = np.zeros(nx, dtype=np.int64)
    for i, v in enumerate(variants):
        cost[i] = v.cost_per_replica_hour
        lo[i] = v.min_replicas
        hi[i] = np.inf if v.max_replicas is None else v.max_replicas
        integrality[i] = 1
        for j, b in enumerate(buckets):
            hi[nv + i * nb + j] = 1.0 if v.capacity.get(b, 0.0) > 0 else 0.0
    rows: list[np.ndarray] = []
    rlo: list[float] = []
    rhi: list[float] = []
    for j in range(nb):  # every bucket fully assigned
        r = np.zeros(nx)
        r[[nv + i * nb + j for i in range(nv)]] = 1.0
        rows.append(r)
        rlo.append(1.0)
        rhi.append(1.0)
    for i, v in enumerate(variants):  # busy fraction within the replicas
        r = np.zeros(nx)
        r[i] = -1.0
        for j, b in enumerate(buckets):
            c = v.capacity.get(b, 0.0)
            if c > 0:
                r[nv + i * nb + j] = load[b] / c
        rows.append(r)
        rlo.append(-np.inf)
        rhi.append(0.0)
    if any(not any(v.capacity.get(b, 0.0) > 0 for v in variants) for b in buckets):
        return None
    res = milp(
        cost,
        constraints=LinearConstraint(np.array(rows), rlo, rhi) if rows else None,
        integrality=integrality,
        bounds=Bounds(lo, hi),
        options={"time_limit": time_limit_s},
    )
    if res.x is None or res.status not in (0, 1):  # 1: time limit with a feasible point
        return None
    n = {v.name: round(float(res.x[i])) for i, v in enumerate(variants)}
    shares = {
        v.name: {b: float(res.x[nv + i * nb + j]) for j, b in enumerate(buckets)}
        for i, v in enumerate(variants)
    }
    return Mix(
        replicas=n,
        cost_per_hour=sum(v.cost_per_replica_hour * n[v.name] for v in variants),
        shares=shares,
    )
