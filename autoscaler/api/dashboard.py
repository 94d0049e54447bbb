"""The live dashboard: an HTML page at ``/`` and its JSON feed ``/v1/dashboard/state``.

It only reads `ControllerState` (what the control loop publishes): per target the recent
observations (load, queue, KV usage, TTFT quantiles, forecast), the decision history with
reasons, and current/desired/warm-pool replicas. The page polls the feed every second and
draws with uPlot, vendored in ``static/`` (no CDN at run time). Missing signals are
``null`` in the feed and gaps in the charts, never zeros.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from importlib import resources
from typing import Any, Final

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, Response

from autoscaler.control.state import ControllerState, TargetStatus
from autoscaler.domain import SIGNALS, Decision, Observation

DEFAULT_SLO_TTFT_S: Final = 0.5
SERIES_POINTS: Final = 600
DECISIONS_SHOWN: Final = 50
STATIC_FILES: Final[dict[str, str]] = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
    "uPlot.iife.min.js": "text/javascript; charset=utf-8",
    "uPlot.min.css": "text/css; charset=utf-8",
    "uPlot.LICENSE": "text/plain; charset=utf-8",
}
_SERIES_SIGNALS: Final = (
    "arrival_rate_per_s",
    "waiting",
    "running",
    "kv_cache_usage",
    "kv_cache_usage_max",
    "ttft_p50_s",
    "ttft_p95_s",
    "ttft_p99_s",
)


def _num(value: float | int | None) -> float | int | None:
    """JSON-safe number: NaN/inf become null (a missing value, not a zero)."""
    if value is None:
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _clean(value: Any) -> Any:
    if isinstance(value, float):
        return _num(value)
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def _forecast_replicas(decision: Decision | None) -> int | None:
    if decision is None:
        return None
    values = [m.forecast_replicas for m in decision.metrics if m.forecast_replicas is not None]
    return max(values) if values else None


def _capped(value: int | None, cap: int) -> int | None:
    return None if value is None else min(value, cap)


def _slo_ttft_s(status: TargetStatus, default_s: float) -> float:
    for m in status.spec.policy.metrics:
        if m.signal in ("ttft_p95_s", "ttft_p99_s"):
            return float(m.target)
    return default_s


def _series(status: TargetStatus) -> dict[str, list[Any]]:
    obs: list[Observation] = list(status.observations)[-SERIES_POINTS:]
    by_t: dict[float, Decision] = {d.t: d for d in status.history}
    out: dict[str, list[Any]] = {"t": [o.t for o in obs]}
    for name in _SERIES_SIGNALS:
        out[name] = [_num(o.signals.get(name)) for o in obs]
    out["forecast_arrival_rate_per_s"] = [
        _num(o.forecast.signals.get("arrival_rate_per_s")) if o.forecast else None for o in obs
    ]
    out["current_replicas"] = [o.current_replicas for o in obs]
    out["ready_replicas"] = [o.ready_replicas for o in obs]
    decisions = [by_t.get(o.t) for o in obs]
    out["desired_replicas"] = [d.desired_replicas if d else None for d in decisions]
    cap = status.spec.policy.max_replica_count
    out["forecast_replicas"] = [_capped(_forecast_replicas(d), cap) for d in decisions]
    return out


def decision_runs(decisions: list[Decision]) -> list[dict[str, Any]]:
    """Consecutive decisions (newest first) with the same replicas, reason and limits
    collapse into one row: the newest decision, how many, and the time span they cover.
    Limits that repeat the reason are dropped (no "rate-limited (rate-limited)")."""
    runs: list[dict[str, Any]] = []
    for d in decisions:
        reason = str(d.reason)
        limits = [str(x) for x in d.limits if str(x) != reason]
        key = (d.current_replicas, d.desired_replicas, reason, tuple(limits))
        if runs and runs[-1]["_key"] == key:
            runs[-1]["count"] += 1
            runs[-1]["first_t"] = d.t
            continue
        runs.append(
            {
                "_key": key,
                **d.to_dict(),
                "limits": limits,
                "count": 1,
                "first_t": d.t,
                "last_t": d.t,
            }
        )
    for r in runs:
        del r["_key"]
    return runs


def _policy_doc(status: TargetStatus) -> dict[str, Any]:
    """The policy as the REST API takes it (camelCase), fields left at defaults omitted."""
    policy = status.spec.policy
    doc: dict[str, Any] = policy.model_dump(by_alias=True, mode="json", exclude_defaults=True)
    return {
        "minReplicaCount": policy.min_replica_count,
        "maxReplicaCount": policy.max_replica_count,
        **doc,
    }


def target_view(status: TargetStatus, slo_ttft_s: float = DEFAULT_SLO_TTFT_S) -> dict[str, Any]:
    """Everything the page shows for one target (JSON-ready)."""
    spec = status.spec
    policy = spec.policy
    last_obs = status.observations[-1] if status.observations else None
    last = status.last_decision
    forecast = last_obs.forecast if last_obs else None
    view: dict[str, Any] = _clean(
        {
            "id": str(spec.ref),
            "namespace": spec.ref.namespace,
            "name": spec.ref.name,
            "mode": spec.mode,
            "slo_ttft_s": _slo_ttft_s(status, slo_ttft_s),
            "policy": {
                "min_replicas": policy.min_replica_count,
                "max_replicas": policy.max_replica_count,
                "metrics": [
                    {"signal": m.signal, "type": m.type, "target": m.target} for m in policy.metrics
                ],
                "warm_pool": policy.warm_pool.enabled,
                "document": _policy_doc(status),
                "patch_path": f"/v1/targets/{spec.ref.namespace}/{spec.ref.name}/policy",
                "target_path": f"/v1/targets/{spec.ref.namespace}/{spec.ref.name}",
            },
            "current_replicas": last_obs.current_replicas if last_obs else None,
            "ready_replicas": last_obs.ready_replicas if last_obs else None,
            "desired_replicas": last.desired_replicas if last else None,
            "forecast_replicas": _forecast_replicas(last),
            # What the decision core can act on: the forecast above maxReplicaCount is cut.
            "forecast_replicas_capped": _capped(_forecast_replicas(last), policy.max_replica_count),
            "applied_replicas": status.applied_replicas,
            "warm_pool_replicas": status.warm_pool_replicas,
            "condition": status.condition,
            "active": status.active,
            "latest": {s: (last_obs.signals.get(s) if last_obs else None) for s in SIGNALS},
            "forecast": (
                {
                    "horizon_s": forecast.horizon_s,
                    "model": forecast.model,
                    "signals": dict(forecast.signals),
                }
                if forecast
                else None
            ),
            "series": _series(status),
            "decisions": decision_runs(status.recent_decisions(DECISIONS_SHOWN)),
        }
    )
    return view


CONTROLLER_CLOCK: Final = (
    "t and chart times: the controller's monotonic clock, in seconds; 'updated': your wall clock"
)
Comparison = Callable[[], Mapping[str, Any]]
"""Optional side-by-side series (the demo's two fleets), passed through to the page."""


def dashboard_state(
    state: ControllerState,
    slo_ttft_s: float = DEFAULT_SLO_TTFT_S,
    comparison: Comparison | None = None,
    clock_note: str = CONTROLLER_CLOCK,
) -> dict[str, Any]:
    """The JSON feed: controller flags, one view per target sorted by id, and the
    side-by-side block when there is one (``null`` otherwise)."""
    targets = sorted(state.targets.values(), key=lambda s: str(s.spec.ref))
    return {
        "clock": clock_note,
        "ready": state.ready,
        "leader": state.is_leader,
        "ticks": state.ticks,
        "targets": [target_view(s, slo_ttft_s) for s in targets],
        "comparison": _clean(comparison()) if comparison is not None else None,
    }


def _static(name: str) -> bytes:
    return resources.files("autoscaler.api").joinpath("static", name).read_bytes()


def dashboard_router(
    state: ControllerState,
    slo_ttft_s: float = DEFAULT_SLO_TTFT_S,
    *,
    comparison: Comparison | None = None,
    clock_note: str = CONTROLLER_CLOCK,
) -> APIRouter:
    """``/`` (the page), ``/dashboard/static/{file}`` and ``/v1/dashboard/state``."""
    router = APIRouter(tags=["dashboard"])

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def page() -> HTMLResponse:
        return HTMLResponse(_static("index.html"), headers={"Cache-Control": "no-cache"})

    @router.get("/dashboard/static/{name}", include_in_schema=False)
    async def static(name: str) -> Response:
        media_type = STATIC_FILES.get(name)
        if media_type is None:
            raise HTTPException(status_code=404, detail=f"static file {name!r} not found")
        return Response(_static(name), media_type=media_type)

    @router.get("/v1/dashboard/state")
    async def feed() -> JSONResponse:
        return JSONResponse(dashboard_state(state, slo_ttft_s, comparison, clock_note))

    return router
