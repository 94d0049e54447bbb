"""Decisions of a target: the latest, the recent history, and a dry-run that replays a
candidate policy over the recent observations (off the event loop, rate-limited, bounded
in ticks and CPU)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Mapping
from typing import Annotated, Any, Final

from fastapi import APIRouter, Query, Request, Response

from autoscaler.api.body import SafeJSONResponse, clip, render_json
from autoscaler.api.context import ApiContext, Credentials, Name, Namespace, json_body
from autoscaler.api.documents import PROBLEM, R400, R413, R429, READ, DryRunRequest, body_schema
from autoscaler.api.errors import problem
from autoscaler.api.limits import DryRunLimits, client_key
from autoscaler.control.state import HISTORY_LEN, OBSERVATIONS_LEN
from autoscaler.domain import Decision, DecisionState, Observation, TargetRef
from autoscaler.errors import ConfigError
from autoscaler.keda.value import TargetUnknown
from autoscaler.policy.core import decide
from autoscaler.policy.schema import Policy, load_policy

_YIELD_EVERY_S: Final = 0.001  # the GIL is otherwise held up to sys.getswitchinterval()


def replay(
    policy: Policy,
    observations: list[Observation],
    live: Mapping[float, Decision],
    cpu_budget_s: float | None = None,
    *,
    yield_gil: bool = False,
) -> list[dict[str, Any]]:
    """Decide over ``observations`` from a fresh `DecisionState` (run off the loop). With
    ``cpu_budget_s`` it stops once this thread has used that much CPU (fewer decisions
    than observations): a candidate policy's cost is bounded whatever it asks for."""
    state = DecisionState()
    out: list[dict[str, Any]] = []
    started_s = yielded_s = time.thread_time()
    for obs in observations:
        if out and cpu_budget_s is not None and time.thread_time() - started_s > cpu_budget_s:
            break  # at least one decision, so the summary always has something to say
        decision, state = decide(policy, obs, state, obs.t)
        if yield_gil and time.thread_time() - yielded_s > _YIELD_EVERY_S:
            time.sleep(0)  # hand the GIL to the event loop thread if it waits for it
            yielded_s = time.thread_time()
        live_decision = live.get(obs.t)
        out.append(
            {
                **decision.to_dict(),
                "live_desired_replicas": (
                    live_decision.desired_replicas if live_decision is not None else None
                ),
            }
        )
    return out


def decisions_router(ctx: ApiContext) -> APIRouter:
    state, api_settings, dry_run_gate = ctx.state, ctx.settings, ctx.dry_run_gate
    router = APIRouter(default_response_class=SafeJSONResponse)

    def _known(ref: TargetRef) -> None:
        if state.status(ref) is None:
            raise TargetUnknown(f"target {ref} is not known to the control loop")

    @router.get(
        "/v1/targets/{namespace}/{name}/decision",
        tags=["decisions"],
        dependencies=ctx.can_read,
        responses=READ,
    )
    async def latest_decision(namespace: Namespace, name: Name) -> dict[str, Any]:
        """The latest decision with its reason and numbers."""
        ref = TargetRef(namespace, name)
        _known(ref)
        st = state.targets[ref]
        if st.last_decision is None:
            raise TargetUnknown(f"target {ref}: no decision yet")
        return st.last_decision.to_dict()

    @router.get(
        "/v1/targets/{namespace}/{name}/decisions",
        tags=["decisions"],
        dependencies=ctx.can_read,
        responses=READ,
    )
    async def decision_history(
        namespace: Namespace,
        name: Name,
        limit: Annotated[int, Query(ge=1, le=HISTORY_LEN)] = 50,
    ) -> SafeJSONResponse:
        """Recent decisions, newest first (bounded by the loop's history length)."""
        ref = TargetRef(namespace, name)
        _known(ref)
        items = state.targets[ref].recent_decisions(limit)
        return SafeJSONResponse({"items": [d.to_dict() for d in items], "limit": limit})

    @router.post(
        "/v1/targets/{namespace}/{name}/dry-run",
        tags=["decisions"],
        dependencies=ctx.can_read,
        responses={
            **READ,
            **R400,
            **R413,
            **R429,
            409: {**PROBLEM, "description": "no observations to replay"},
        },
        openapi_extra=body_schema(DryRunRequest),
    )
    async def dry_run(
        namespace: Namespace,
        name: Name,
        request: Request,
        credentials: Credentials,
        limit: Annotated[int, Query(ge=1, le=OBSERVATIONS_LEN)] = OBSERVATIONS_LEN,
    ) -> Any:
        """Replay a candidate policy over the target's recent observations, oldest first,
        from a fresh decision state. Nothing is applied or stored. The replay is open-loop:
        observed replica counts are what the live policy produced. Rate-limited per client
        (429 + Retry-After); at most ``maxTicks`` observations and ``cpuBudgetSeconds`` of
        CPU are spent (``stoppedEarly`` says when the budget cut the replay short)."""
        ref = TargetRef(namespace, name)
        verified = credentials.credentials if credentials and api_settings.read_token else None
        dry_run_gate.admit(client_key(request.client.host if request.client else None, verified))
        body = await json_body(request)
        if not isinstance(body, Mapping) or set(body) - {"policy"}:
            raise ConfigError("invalid body", ['body: expected an object {"policy": {...}}'])
        policy_doc = body.get("policy", {})
        if not isinstance(policy_doc, Mapping):
            raise ConfigError(
                "invalid body", [clip(f"policy: value {policy_doc!r} must be an object")]
            )
        try:
            policy = load_policy(policy_doc)
        except ConfigError as err:
            raise ConfigError(str(err), [f"policy.{p}" for p in err.problems]) from None
        _known(ref)
        st = state.targets[ref]
        limits = api_settings.dry_run
        observations = list(st.observations)[-min(limit, limits.max_ticks) :]
        if not observations:
            return problem(409, f"target {ref}: no recent observations to replay")
        live = {d.t: d for d in st.history}
        content = await dry_run_gate.run_in_thread(
            _dry_run_document, ref, policy, observations, live, limits
        )
        return Response(content, media_type="application/json")

    return router


def _dry_run_document(
    ref: TargetRef,
    policy: Policy,
    observations: list[Observation],
    live: Mapping[float, Decision],
    limits: DryRunLimits,
) -> bytes:
    """Replay and render in the worker thread: encoding 600 decisions on the event loop
    cost more loop time than the replay itself (the loop only sends the bytes)."""
    decisions = replay(policy, observations, live, limits.cpu_budget_s, yield_gil=limits.yield_gil)
    desired = [int(d["desired_replicas"]) for d in decisions]
    return render_json(
        {
            "target": str(ref),
            "observations": len(decisions),
            "stoppedEarly": len(decisions) < len(observations),
            "limits": {"maxTicks": limits.max_ticks, "cpuBudgetSeconds": limits.cpu_budget_s},
            "order": "oldest-first",
            "summary": {
                "final_desired_replicas": desired[-1],
                "max_desired_replicas": max(desired),
                "min_desired_replicas": min(desired),
                "changes": sum(1 for a, b in itertools.pairwise(desired) if a != b),
            },
            "decisions": decisions,
        }
    )
