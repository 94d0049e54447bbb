"""`llm-autoscaler decide`: replay a timestamped signal sequence through the core offline.

Each input line: ``{"t": 0, "current_replicas": 2, "ready_replicas": 2,
"signals": {"waiting": 12}}``; optional ``pods_read``, ``capacity_max_replicas`` and
``forecast: {"horizon_s": 90, "signals": {...}}``. A signal absent from ``signals`` is
missing data. Output: one JSON decision per input line. The replica count of a line is
what the line says (the command does not assume its advice was applied); a line without
``current_replicas`` takes the previous decision's count, as if the advice was applied
(the first such line starts from ``--start-replicas``). The first line is
the first reconcile of the target: like a new HPA, its current count is recorded as a
recommendation (no scale-down inside the first stabilisation window).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from autoscaler.domain import DecisionState, Forecast, Observation
from autoscaler.errors import ConfigError
from autoscaler.policy.core import decide, initial_state
from autoscaler.policy.document import PROFILE_FIELD, load_policy, profile_names
from autoscaler.policy.schema import Policy
from autoscaler.settings import read_config_file


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "decide",
        help="replay signals (JSONL) through the decision core",
        description="Replays a timestamped signal sequence (one JSON object per line) "
        "through the pure decision core with a policy; prints one JSON decision per line "
        "(reason, message, numbers). No cluster needed.",
    )
    p.add_argument(
        "--policy",
        default=None,
        help="policy document (YAML or JSON): a profile and the fields set over it "
        "(docs/policy.md#workload-classes-profiles); default: an empty document, the "
        "recommended profile",
    )
    p.add_argument(
        "--profile",
        choices=profile_names(),
        default=None,
        help="the profile, for a policy file without one (a file naming another is refused)",
    )
    p.add_argument("--signals", required=True, help="signals JSONL file ('-' for stdin)")
    p.add_argument(
        "--start-replicas",
        type=int,
        default=None,
        help="replica count before the first line, for lines without current_replicas "
        "(default: the policy's minReplicaCount, at least 1); such lines then follow the "
        "decisions, as if each was applied",
    )
    p.set_defaults(func=run)


def _number(line_no: int, field: str, value: Any, *, integer: bool = False) -> float:
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or (integer and (not float(value).is_integer() or value < 0)):
        rule = "a non-negative integer" if integer else "a number"
        raise ConfigError(f"line {line_no}: field {field!r} value {value!r} must be {rule}")
    return float(value)


def parse_observation(
    line_no: int, record: Mapping[str, Any], current_default: int | None = None
) -> Observation:
    """One JSONL record -> Observation, with errors naming line, field, value and rule.
    ``current_default`` stands in for an absent ``current_replicas`` (else it is required)."""
    if not isinstance(record, Mapping):
        raise ConfigError(f"line {line_no}: expected a JSON object, got {type(record).__name__}")
    for required in ("t", "current_replicas"):
        if required not in record and not (required != "t" and current_default is not None):
            raise ConfigError(f"line {line_no}: field {required!r} is required")
    t = _number(line_no, "t", record["t"])
    raw_current = record.get("current_replicas", current_default)
    current = int(_number(line_no, "current_replicas", raw_current, integer=True))
    ready = int(
        _number(line_no, "ready_replicas", record.get("ready_replicas", current), integer=True)
    )
    raw_signals = record.get("signals", {})
    if not isinstance(raw_signals, Mapping):
        raise ConfigError(f"line {line_no}: field 'signals' must be an object")
    signals = {
        str(k): _number(line_no, f"signals.{k}", v) for k, v in raw_signals.items() if v is not None
    }
    pods_read = record.get("pods_read")
    cap = record.get("capacity_max_replicas")
    forecast = None
    if (f := record.get("forecast")) is not None:
        if not isinstance(f, Mapping):
            raise ConfigError(f"line {line_no}: field 'forecast' must be an object")
        forecast = Forecast(
            horizon_s=_number(line_no, "forecast.horizon_s", f.get("horizon_s")),
            signals={
                str(k): _number(line_no, f"forecast.signals.{k}", v)
                for k, v in dict(f.get("signals", {})).items()
            },
            model=str(f.get("model", "input")),
        )
    return Observation(
        t=t,
        current_replicas=current,
        ready_replicas=ready,
        signals=signals,
        pods_read=None
        if pods_read is None
        else int(_number(line_no, "pods_read", pods_read, integer=True)),
        capacity_max_replicas=None
        if cap is None
        else int(_number(line_no, "capacity_max_replicas", cap, integer=True)),
        forecast=forecast,
    )


def replay(
    policy: Policy, lines: IO[str], start_replicas: int | None = None
) -> Iterator[dict[str, object]]:
    """Decisions for each non-empty line; raises ConfigError on the first bad line."""
    state: DecisionState | None = None
    applied = max(policy.min_replica_count, 1) if start_replicas is None else start_replicas
    for line_no, text in enumerate(lines, start=1):
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except json.JSONDecodeError as err:
            raise ConfigError(f"line {line_no}: not valid JSON ({err.msg})") from None
        obs = parse_observation(line_no, record, applied)
        if state is None:  # the first line is the first reconcile: HPA's initial recommendation
            state = initial_state(obs.current_replicas, obs.t)
        decision, state = decide(policy, obs, state, obs.t)
        applied = decision.desired_replicas
        yield decision.to_dict()


def _document(path: str | None, profile: str | None) -> dict[str, Any]:
    doc = read_config_file(path) if path is not None else {}
    if profile is not None:
        written = doc.get(PROFILE_FIELD, profile)
        if written != profile:
            raise ConfigError(
                f"--profile: value {profile!r} differs from the policy file's profile "
                f"{written!r}; give one of them"
            )
        doc = {**doc, PROFILE_FIELD: profile}
    return doc


def run(args: argparse.Namespace) -> int:
    try:
        if args.start_replicas is not None and args.start_replicas < 0:
            raise ConfigError(
                f"--start-replicas: value {args.start_replicas} must be a non-negative integer"
            )
        policy = load_policy(_document(args.policy, args.profile))
        stream: IO[str] = sys.stdin if args.signals == "-" else Path(args.signals).open()  # noqa: SIM115
    except (ConfigError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    with stream:
        try:
            for out in replay(policy, stream, args.start_replicas):
                print(json.dumps(out, separators=(",", ":")), flush=True)
        except ConfigError as err:
            print(f"error: {args.signals}: {err}", file=sys.stderr)
            return 1
    return 0
