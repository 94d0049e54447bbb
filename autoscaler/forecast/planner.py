"""The facade the control loop and the simulator call each tick, per target.

``update(t, signals)`` feeds the canonical signals; ``forecast(t)`` returns a
`domain.Forecast` of the signals the policy scales on, at ``t + horizon`` where the
horizon is the learned cold start (or the policy's fixed ``horizonSeconds``).

Rates (requests/s, tokens/s) are forecast directly. Load signals (running, waiting, KV
usage) follow demand: their smoothed current value is scaled by the ratio of predicted to
current rate of the driver signal, so the decision core's existing per-replica targets
apply unchanged. When the current rate is ~0 (idle) the ratio is undefined, so the
learned load per unit of rate (Little's law: running = rate x time in system) is used.
KV usage forecasts may exceed 1: that means "more than the current replicas hold".

This class holds mutable state (the current frozen model of each signal); it never
reads the clock.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from sys import intern
from types import MappingProxyType
from typing import Literal, Protocol

from autoscaler.domain import FRACTION_SIGNALS, Forecast
from autoscaler.forecast.auto import Auto
from autoscaler.forecast.capacity import CapacityEstimator
from autoscaler.forecast.coldstart import ColdStartEstimator
from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from autoscaler.forecast.regime import RegimeEstimator
from autoscaler.forecast.robust import check_finite, check_positive

_isfinite = math.isfinite

ForecasterKind = Literal["ewma", "holt", "seasonal", "auto"]
RATE_SIGNALS: tuple[str, ...] = (
    "arrival_rate_per_s",
    "prompt_tokens_per_s",
    "generation_tokens_per_s",
)
LOAD_SIGNALS: tuple[str, ...] = ("running", "waiting", "kv_cache_usage", "kv_cache_usage_max")
_INTENSITY = Ewma(tau_s=600.0)


class PredictionLike(Protocol):
    """The policy's ``prediction`` block (duck-typed: forecast/ does not import policy/)."""

    @property
    def forecaster(self) -> str: ...

    @property
    def horizon_seconds(self) -> float | None: ...

    @property
    def cold_start_prior_seconds(self) -> float: ...

    @property
    def min_pods_to_learn(self) -> int: ...


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    forecaster: ForecasterKind = "auto"
    horizon_s: float | None = None  # policy horizonSeconds; None: learned cold start
    cold_start_prior_s: float = 90.0
    min_pods_to_learn: int = 3
    rate_signals: tuple[str, ...] = RATE_SIGNALS
    load_signals: tuple[str, ...] = LOAD_SIGNALS
    load_tau_s: float = 30.0
    # Load forecasts scale the latest reading (what the core compares "now" with), not
    # the smoothed level: a smoothed base sits below the instantaneous load, so the
    # forecast could never exceed "now" and prediction would do nothing.
    load_base: Literal["latest", "smoothed"] = "latest"
    season_period_s: float = 86_400.0
    season_bins: int = 48
    min_rate_for_ratio: float = 0.05  # driver level below this: use learned intensity
    max_ratio: float = 20.0
    capacity_fallback: Mapping[str, float] = field(default_factory=dict)
    slo_s: float = 0.5
    latency_signal: str = "ttft_p95_s"

    def __post_init__(self) -> None:
        if self.forecaster not in ("ewma", "holt", "seasonal", "auto"):
            raise ValueError(
                f"forecaster: value {self.forecaster!r} must be one of ewma, holt, seasonal, auto"
            )
        if self.horizon_s is not None:
            check_positive("horizon_s", self.horizon_s)
        check_positive("cold_start_prior_s", self.cold_start_prior_s)
        check_positive("load_tau_s", self.load_tau_s)
        check_finite("min_rate_for_ratio", self.min_rate_for_ratio, minimum=0.0)
        check_positive("max_ratio", self.max_ratio)
        if not self.rate_signals:
            raise ValueError("rate_signals: value () must name at least one rate signal")
        object.__setattr__(
            self, "capacity_fallback", MappingProxyType(dict(self.capacity_fallback))
        )

    @classmethod
    def from_prediction(cls, prediction: PredictionLike, **overrides: object) -> PlannerConfig:
        """Build from the policy's ``prediction`` block (plus explicit overrides)."""
        kind = prediction.forecaster
        if kind not in ("ewma", "holt", "seasonal", "auto"):
            raise ValueError(f"prediction.forecaster: value {kind!r} is not supported")
        base: dict[str, object] = {
            "forecaster": kind,
            "horizon_s": prediction.horizon_seconds,
            "cold_start_prior_s": prediction.cold_start_prior_seconds,
            "min_pods_to_learn": prediction.min_pods_to_learn,
        }
        base.update(overrides)
        return cls(**base)  # type: ignore[arg-type]


def make_forecaster(
    kind: ForecasterKind, *, horizon_s: float, period_s: float, bins: int
) -> Forecaster:
    """A fresh forecaster of the given kind (defaults tuned in docs/forecasting.md)."""
    holt = Holt()
    # the seasonal candidate's base is the Holt candidate's object: Auto updates it once
    seasonal = Seasonal(base=holt, period_s=period_s, bins=bins)
    if kind == "ewma":
        return Ewma()
    if kind == "holt":
        return holt
    if kind == "seasonal":
        return seasonal
    return Auto(candidates=(Ewma(), holt, seasonal), horizon_s=horizon_s)


class Planner:
    """Per-target demand forecaster, cold-start and capacity learner (see module doc)."""

    def __init__(self, config: PlannerConfig | None = None) -> None:
        self.config = config if config is not None else PlannerConfig()
        # the state of every smoothed series (frozen models, replaced each tick)
        self._models: dict[str, Forecaster] = {}
        self._loads: dict[str, Ewma] = {}
        self.latest_load: dict[str, float] = {}
        # load signal per unit of driver rate: (smoothed load, smoothed rate). Signals fed
        # the same rates hold the same rate object, so it is advanced once per tick.
        self._intensity: dict[str, tuple[Ewma, Ewma]] = {}
        self.cold_start = ColdStartEstimator(
            prior_s=self.config.cold_start_prior_s,
            min_pods_to_learn=self.config.min_pods_to_learn,
        )
        self.capacity = CapacityEstimator(
            fallback=self.config.capacity_fallback,
            slo_s=self.config.slo_s,
            latency_signal=self.config.latency_signal,
        )
        self.regime = RegimeEstimator()
        self.last_t: float | None = None
        self._numbers: dict[str, float] = {}
        self._pool_peaks: deque[tuple[float, int]] = deque()
        self._horizon_of: ColdStartEstimator | None = None  # `horizon_s` computed for these
        self._horizon_config: PlannerConfig | None = None
        self._horizon = 0.0

    # -- inputs -----------------------------------------------------------------------
    def observe_pod_ready(self, t: float, duration_s: float) -> None:
        """A pod became Ready at ``t``, ``duration_s`` after it was started."""
        self.cold_start = self.cold_start.observe(t, duration_s)

    def horizon_s(self) -> float:
        cold_start, config = self.cold_start, self.config
        # once per cold-start state and config (read twice per tick)
        if cold_start is not self._horizon_of or config is not self._horizon_config:
            self._horizon = cold_start.horizon_s(config.horizon_s)
            self._horizon_of, self._horizon_config = cold_start, config
        return self._horizon

    def update(
        self, t: float, signals: Mapping[str, float], ready_replicas: int | None = None
    ) -> None:
        """Feed one tick. Absent signals are missing (skipped), never zero."""
        check_finite("t", t)
        horizon = self.horizon_s()
        config = self.config
        models = self._models
        for name in config.rate_signals:
            value = signals.get(name)
            if value is None:
                continue
            if not (_isfinite(value) and value >= 0.0):
                _checked(name, value)
            model = models.get(name)
            if model is None:
                model = make_forecaster(
                    config.forecaster,
                    horizon_s=horizon,
                    period_s=config.season_period_s,
                    bins=config.season_bins,
                )
            if type(model) is Auto:
                model = model.with_horizon(horizon)
            models[name] = model.update(t, value)  # stored once its sample was valid
        loads = self._loads
        latest = self.latest_load
        present: list[str] = []
        for name in config.load_signals:
            value = signals.get(name)
            if value is None:
                continue
            if not (_isfinite(value) and value >= 0.0):
                _checked(name, value)
            load = loads.get(name)
            if load is None:
                load = Ewma(tau_s=config.load_tau_s)
            loads[name] = load.update(t, value)
            latest[name] = value
            present.append(name)
        driver = self._driver()
        rate_now = signals.get(driver) if driver is not None else None
        if present and rate_now is not None and rate_now >= config.min_rate_for_ratio:
            # Both sides smoothed alike, so the ratio stays unbiased through transients.
            self._update_intensity(t, rate_now, present, signals)
        if ready_replicas is not None:
            self.capacity = self.capacity.observe(t, ready_replicas, signals)
        demand = self._demand_replicas(signals)
        if demand is not None:
            # A learned cold start of 0 s (pods Ready at once) gives no burst yardstick.
            self.regime.observe(t, demand, horizon if horizon > 0.0 else None)
        self.last_t = t

    def _demand_replicas(self, signals: Mapping[str, float]) -> float | None:
        """Replicas the signals ask for at the per-replica capacities (the policy's
        AverageValue targets, `capacity_fallback`): the largest; None without any."""
        demand: float | None = None
        for name, cap in self.config.capacity_fallback.items():
            value = signals.get(name)
            if value is not None and cap > 0:
                need = value / cap
                if demand is None or need > demand:
                    demand = need
        return demand

    def _update_intensity(
        self, t: float, rate_now: float, present: list[str], signals: Mapping[str, float]
    ) -> None:
        """Advance each present signal's (load, rate) pair. Pairs fed the same rates hold
        the same rate model (a new pair starts from the shared `_INTENSITY`), so it is
        advanced once per distinct history."""
        pairs = self._intensity
        advanced: dict[int, Ewma] = {}
        for name in present:
            num, den = pairs.get(name, (_INTENSITY, _INTENSITY))
            new_den = advanced.get(id(den))
            if new_den is None:
                new_den = advanced[id(den)] = den.update(t, rate_now)
            pairs[name] = (num.update(t, signals[name]), new_den)

    @property
    def models(self) -> dict[str, Forecaster]:
        """The forecaster of each rate signal (frozen models)."""
        return dict(self._models)

    @property
    def loads(self) -> dict[str, Ewma]:
        """The smoothed load signals (frozen models)."""
        return dict(self._loads)

    @property
    def intensity(self) -> dict[str, tuple[Ewma, Ewma]]:
        """Per load signal, its smoothed value and the smoothed driver rate."""
        return dict(self._intensity)

    def intensity_of(self, name: str) -> float | None:
        """Learned load signal per unit of driver rate (e.g. running per request/s)."""
        pair = self._intensity.get(name)
        if pair is None or pair[0].level is None:
            return None
        rate = pair[1].level
        if not rate:
            return None
        return pair[0].level / rate

    def _driver(self) -> str | None:
        """The first configured rate signal with data: it drives the load forecasts."""
        for name in self.config.rate_signals:
            model = self._models.get(name)
            if model is not None and model.level is not None:
                return name
        return None

    # -- outputs ----------------------------------------------------------------------
    def predict(self, t: float, horizon_s: float) -> dict[str, float]:
        """Predicted signal values at ``t + horizon_s`` (missing ones omitted)."""
        models_now = {name: model.predict(t, 0.0) for name, model in self._models.items()}
        loads_now = {name: load.predict(t, 0.0) for name, load in self._loads.items()}
        return self._predict(t, horizon_s, self._driver(), models_now, loads_now)

    def _predict(
        self,
        t: float,
        horizon_s: float,
        driver: str | None,
        models_now: Mapping[str, float | None],
        loads_now: Mapping[str, float | None],
    ) -> dict[str, float]:
        """`predict` given each model's and load's value now (``predict(t, 0.0)``, which
        `forecast` reports too) and the driver."""
        out: dict[str, float] = {}
        for name, model in self._models.items():
            value = model.predict(t, horizon_s)
            if value is not None:
                out[name] = value
        config = self.config
        ratio: float | None = None
        driver_pred: float | None = None
        if driver is not None:
            driver_pred = out.get(driver)
            now = models_now[driver]
            if driver_pred is not None and now is not None and now >= config.min_rate_for_ratio:
                ratio = min(driver_pred / now, config.max_ratio)
        latest = config.load_base == "latest"
        for name, level in loads_now.items():
            if level is None:
                continue
            if ratio is not None:
                base = self.latest_load.get(name, level) if latest else level
                out[name] = base * ratio
            elif driver_pred is not None:
                k_level = self.intensity_of(name)
                if k_level is not None:
                    out[name] = driver_pred * k_level
        return out

    def forecast(self, t: float, horizon_s: float | None = None) -> Forecast:
        """`domain.Forecast` at ``t + horizon`` (default: the cold-start horizon)."""
        horizon = self.horizon_s() if horizon_s is None else horizon_s
        if not (_isfinite(horizon) and horizon >= 0.0):
            check_finite("horizon_s", horizon, minimum=0.0)
        models_now = {name: model.predict(t, 0.0) for name, model in self._models.items()}
        loads_now = {name: load.predict(t, 0.0) for name, load in self._loads.items()}
        driver = self._driver()
        signals = self._predict(t, horizon, driver, models_now, loads_now)
        model = self._models[driver].name if driver is not None else "none"
        caps = self.capacity.capacities()  # quantiles over the evidence: once per tick
        learned = self.capacity.learned
        flags = {name: learned(name) for name in caps}
        self._numbers = self._report(horizon, signals, caps, flags, models_now, loads_now)
        return Forecast(
            horizon_s=horizon,
            signals=MappingProxyType(signals),
            model=model,
            # learned_capacities(caps)
            capacity_per_replica=MappingProxyType({n: c for n, c in caps.items() if flags[n]}),
            regime=MappingProxyType(self.regime.numbers()),
        )

    def learned_capacities(self, caps: Mapping[str, float] | None = None) -> dict[str, float]:
        """Per-replica capacities learned from evidence at the SLO (configured targets,
        which the estimator falls back to, are left out: the policy already has them).
        ``caps``: the estimator's capacities when the caller already computed them."""
        caps = self.capacity.capacities() if caps is None else caps
        return {n: c for n, c in caps.items() if self.capacity.learned(n)}

    def needed_replicas(
        self, t: float, horizon_s: float, per_replica_capacity: Mapping[str, float]
    ) -> int | None:
        """Replicas the forecast at ``t + horizon_s`` needs (largest over signals with a
        per-replica capacity; fractions are excluded), ``None`` without forecasts."""
        predicted = self.predict(t, horizon_s)
        needs: list[int] = []
        for name, cap in per_replica_capacity.items():
            value = predicted.get(name)
            if value is None or name in FRACTION_SIGNALS:
                continue
            check_positive(f"per_replica_capacity[{name}]", cap)
            needs.append(math.ceil(value / cap - 1e-9))
        return max(needs) if needs else None

    def warm_pool_size(
        self,
        t: float,
        lead_time_s: float,
        replicas_now: int,
        per_replica_capacity: Mapping[str, float] | None = None,
        steps: int = 8,
    ) -> int:
        """Warm GPUs to hold: the peak replicas forecast within the node-provisioning
        lead time, beyond ``replicas_now`` (the caller bounds it by warmPool min/max).
        Capacity defaults to the learned per-replica capacity.

        The peak is held for ``lead_time_s`` after it was forecast (grow at once, shrink
        after the lead time), like a scale-down stabilisation window: a forecast that
        jitters around a replica boundary would otherwise create and delete a pause pod
        (and provision a node for it) every tick."""
        check_finite("lead_time_s", lead_time_s, minimum=0.0)
        caps = (
            per_replica_capacity
            if per_replica_capacity is not None
            else (self.capacity.capacities())
        )
        peak = 0
        for i in range(steps + 1):
            need = self.needed_replicas(t, lead_time_s * i / steps, caps)
            if need is not None:
                peak = max(peak, need)
        self._pool_peaks.append((t, peak))
        while self._pool_peaks and self._pool_peaks[0][0] < t - lead_time_s:
            self._pool_peaks.popleft()
        held = max(p for _, p in self._pool_peaks)
        size = max(0, held - replicas_now)
        self._numbers["warm_pool.needed_replicas"] = float(peak)
        self._numbers["warm_pool.held_replicas"] = float(held)
        self._numbers["warm_pool.size"] = float(size)
        return size

    def numbers(self) -> Mapping[str, float]:
        """Every number behind the last forecast, for the decision and the metrics."""
        return MappingProxyType(dict(self._numbers))

    def _report(
        self,
        horizon_s: float,
        predicted: Mapping[str, float],
        caps: Mapping[str, float],
        learned: Mapping[str, bool],
        models_now: Mapping[str, float | None],
        loads_now: Mapping[str, float | None],
    ) -> dict[str, float]:
        cold_start = self.cold_start
        n: dict[str, float] = {
            "forecast.horizon_s": horizon_s,
            "forecast.cold_start_s": cold_start.estimate_s,
            "forecast.cold_start_learned": float(cold_start.learned),
            "forecast.cold_start_samples": float(cold_start.seen),
        }
        for name, model in self._models.items():
            now = models_now[name]
            if now is not None:
                n[_NOW[name]] = now
            if type(model) is Auto:
                abs_actual = model.abs_actual
                if model.scored and abs_actual > 0:  # Auto.errors(), inline
                    keys = _WAPE.row(name, tuple(c.name for c in model.candidates))
                    for key, err in zip(keys, model.abs_error, strict=True):
                        n[key] = err / abs_actual
        for name, level in loads_now.items():
            if level is not None:
                n[_NOW[name]] = level
        for name, value in predicted.items():
            n[_PREDICTED[name]] = value
        for name, cap in caps.items():
            n[_PER_REPLICA[name]] = cap
            n[_LEARNED[name]] = 1.0 if learned[name] else 0.0
        return n


# The interned keys of `Planner._report`, built once per signal (an f-string + intern
# per key per tick was a tenth of a forecast, issue 16): ``_NOW[name]`` is
# ``"forecast.<name>.now"``; a hit is a C-level dict lookup.
class _Keys(dict[str, str]):
    def __init__(self, prefix: str, suffix: str) -> None:
        super().__init__()
        self.prefix = prefix
        self.suffix = suffix

    def __missing__(self, name: str) -> str:
        key = self[name] = intern(self.prefix + name + self.suffix)
        return key


class _WapeKeys(dict[tuple[str, str], str]):
    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[tuple[str, tuple[str, ...]], tuple[str, ...]] = {}

    def __missing__(self, name_cand: tuple[str, str]) -> str:
        name, cand = name_cand
        key = self[name_cand] = intern(f"forecast.{name}.wape.{cand}")
        return key

    def row(self, name: str, cands: tuple[str, ...]) -> tuple[str, ...]:
        """The keys of ``name``'s candidates, in order (built once per pair)."""
        row = self.rows.get((name, cands))
        if row is None:
            row = self.rows[name, cands] = tuple(self[name, c] for c in cands)
        return row


_NOW = _Keys("forecast.", ".now")
_PREDICTED = _Keys("forecast.", ".predicted")
_PER_REPLICA = _Keys("capacity.", ".per_replica")
_LEARNED = _Keys("capacity.", ".learned")
_WAPE = _WapeKeys()


def _checked(name: str, value: float) -> float:
    return check_finite(name, value, minimum=0.0)
