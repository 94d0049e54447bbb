"""The load regime a decision was made in, in words (for status, Events and `decide`).

The planner learns the regime (`forecast.regime`) and hands it to the decision as
``regime.*`` numbers; this renders them. A status condition can carry the sentence:
``describe(decision.numbers)`` (None when the decision had no forecast).
"""

from __future__ import annotations

from collections.abc import Mapping


def regime_name(numbers: Mapping[str, float]) -> str | None:
    """``Fleet``, ``Steady`` or ``Following`` (the ``LoadRegime`` condition's reason; None
    when the decision had no forecast). ``Fleet`` wins when both hold: it is the one that
    changes the scale-up side."""
    if "regime.steady" not in numbers:
        return None
    if numbers.get("regime.fleet") == 1.0 and "regime.fleet_replicas" in numbers:
        return "Fleet"
    return "Steady" if numbers["regime.steady"] == 1.0 else "Following"


def describe(numbers: Mapping[str, float]) -> str | None:
    """One sentence on the regime a decision's numbers show, and why (None without)."""
    if "regime.steady" not in numbers:
        return None
    spread = numbers["regime.level_range_replicas"]
    window_min = numbers["regime.window_s"] / 60.0
    level = numbers["regime.level_replicas"]
    burst = numbers.get("regime.burst_replicas", 0.0)
    fleet = numbers.get("regime.fleet_replicas")
    if numbers.get("regime.fleet") == 1.0 and fleet is not None:
        length = numbers.get("regime.burst_length_s", 0.0)
        cold = numbers.get("regime.cold_start_s", 0.0)
        return (
            f"fleet: the smoothed demand ({level:.1f} replicas) moved {spread:.2f} replicas "
            f"over {window_min:.0f} min while bursts rose {burst:.1f} replicas above it and "
            f"lasted {length:.0f} s, shorter than the {cold:.0f} s cold start: holding the "
            f"learned fleet of {fleet:.0f} replicas (a high quantile of the demand) and "
            "buying none for bursts, which end before a new replica is Ready"
        )
    if numbers["regime.steady"] == 1.0:
        hold_min = numbers.get("regime.scale_down_window_s", 0.0) / 60.0
        return (
            f"steady: the smoothed demand ({level:.1f} replicas) moved {spread:.2f} replicas "
            f"over {window_min:.0f} min while bursts rose {burst:.1f} replicas above it: "
            f"holding a constant count (scale-down after {hold_min:.0f} min) beats chasing "
            "bursts"
        )
    release = numbers.get("regime.release_window_s")
    if release is not None:
        length = numbers.get("regime.burst_length_s", 0.0)
        return (
            f"following, long bursts: the smoothed demand ({level:.1f} replicas) moved "
            f"{spread:.2f} replicas over {window_min:.0f} min and its bursts last {length:.0f} s, "
            f"longer than the {numbers.get('regime.cold_start_s', release):.0f} s cold start: "
            f"replicas bought for a burst are released {release:.0f} s after it"
        )
    return (
        f"following: the smoothed demand ({level:.1f} replicas) moved {spread:.2f} replicas "
        f"over the last {window_min:.0f} min, bursts {burst:.1f} replicas above it (steady "
        "needs about one replica or less of movement, bursts of two or more, and "
        f"{window_min:.0f} min of history): the count follows the load under the policy's "
        "windows"
    )
