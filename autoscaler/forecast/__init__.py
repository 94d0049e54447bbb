"""Demand forecasting and cold-start-aware planning (pure: time comes in as arguments)."""

from autoscaler.forecast.auto import Auto
from autoscaler.forecast.capacity import CapacityEstimator
from autoscaler.forecast.coldstart import ColdStartEstimator
from autoscaler.forecast.models import Ewma, Forecaster, Holt, Seasonal
from autoscaler.forecast.planner import Planner, PlannerConfig, make_forecaster
from autoscaler.forecast.robust import Robustness

DemandForecaster = Planner  # the name the control loop and the simulator may prefer

__all__ = [
    "Auto",
    "CapacityEstimator",
    "ColdStartEstimator",
    "DemandForecaster",
    "Ewma",
    "Forecaster",
    "Holt",
    "Planner",
    "PlannerConfig",
    "Robustness",
    "Seasonal",
    "make_forecaster",
]
