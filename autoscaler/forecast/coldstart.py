"""Learn a target's cold start (pod start -> Ready) online; it sets the forecast horizon.

A replica ordered now serves only after its cold start, so demand must be forecast at
``now + cold start``. Cold starts are heavy-tailed (cached vs uncached image, warm vs cold
node), so the estimate is a high quantile (default p90) of the most recent samples, not
the mean: planning for the typical start would miss every slow one. Until
``min_pods_to_learn`` starts were seen, the configured prior is used.

The quantile is numpy's linear one, computed by `quantile_sorted` (bit for bit), so the
controller does not import numpy (~13 MB of RSS) for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from autoscaler.forecast.robust import check_finite, check_positive, quantile_sorted


@dataclass(frozen=True, slots=True)
class ColdStartEstimator:
    prior_s: float = 90.0
    min_pods_to_learn: int = 3
    quantile: float = 0.9
    window: int = 20
    max_s: float = 3600.0  # a longer "start" is a stuck pod, not a cold start
    samples_s: tuple[float, ...] = ()
    seen: int = 0
    last_t: float | None = None
    # The quantile of samples_s, computed once per sample (it is read several times per
    # tick per target); None: not computed yet.
    quantile_s: float | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_positive("prior_s", self.prior_s)
        check_positive("max_s", self.max_s)
        if self.min_pods_to_learn < 1:
            raise ValueError(f"min_pods_to_learn: value {self.min_pods_to_learn} must be >= 1")
        if not 0 < self.quantile <= 1:
            raise ValueError(f"quantile: value {self.quantile} must be in (0, 1]")
        if self.window < 1:
            raise ValueError(f"window: value {self.window} must be >= 1")

    def observe(self, t: float, duration_s: float) -> ColdStartEstimator:
        """Record that a pod became Ready at ``t`` after ``duration_s`` since it started."""
        check_finite("t", t)
        check_finite("duration_s", duration_s, minimum=0.0)
        sample = min(duration_s, self.max_s)
        samples = (*self.samples_s, sample)[-self.window :]
        return replace(
            self,
            samples_s=samples,
            seen=self.seen + 1,
            last_t=t,
            quantile_s=quantile_sorted(sorted(samples), self.quantile),
        )

    @property
    def learned(self) -> bool:
        return self.seen >= self.min_pods_to_learn

    @property
    def estimate_s(self) -> float:
        """The expected cold start: the prior until learned, then the recent quantile."""
        if not self.learned:
            return self.prior_s
        if self.quantile_s is not None:
            return self.quantile_s
        return quantile_sorted(sorted(self.samples_s), self.quantile)

    def horizon_s(self, policy_horizon_s: float | None = None) -> float:
        """Forecast horizon: the policy's fixed ``horizonSeconds`` when set, else learned."""
        if policy_horizon_s is not None:
            return check_positive("horizon_seconds", policy_horizon_s)
        return self.estimate_s
