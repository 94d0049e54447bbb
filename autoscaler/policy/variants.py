"""One model on several Deployments (GPU variants): the greedy split of its demand.

The model's demand is decided once, from the summed signals of all its pods (in the
caller's unit: requests/s, prompt tokens/s ...); this module only splits it. Each variant
serves ``capacity_per_replica`` of that unit within the SLO and costs
``cost_per_replica_hour`` (a GPU-hour price, or a slice's fraction of one: only ratios
matter).

The rule is llm-d's workload-variant-autoscaler's, made exact and length-aware:

- scale-up adds one replica at a time to the cheapest variant (cost per unit of
  capacity) that can place a pod: not at its max, no Pending pod, a free slot in the
  capacity book (free MIG slices or GPUs for its resource). ``gap_aware`` ranks by the
  cost of closing the remaining gap with that variant alone in whole replicas instead,
  so a sliver of demand goes to a slice rather than a whole GPU (measured in
  docs/policy.md "Variants": better for short top-ups between re-balances of the
  optimised mix, worse as the only rule, where slivers pile up under noise);
- scale-down removes one replica at a time from the most expensive variant above its
  min, as long as the demand stays covered;
- requests too long for a variant (over its ``max_model_len``) count only toward the
  variants that can serve them: demand arrives per length class, and a count covers it
  when every class and everything longer fits on the variants long enough for it.

Pure: no I/O, no clock. Stabilisation windows and rate limits stay the caller's, per
variant, as for a single Deployment.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from autoscaler.errors import ConfigError

EPS = 1e-9


@dataclass(frozen=True, slots=True)
class Variant:
    """One Deployment of the model. ``max_model_len`` None: no length limit."""

    name: str
    cost_per_replica_hour: float
    capacity_per_replica: float
    min_replicas: int = 0
    max_replicas: int | None = None
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        problems: list[str] = []
        p = f"variants[{self.name}]"
        if not self.name:
            problems.append("variants[].name: value '' must be non-empty")
        if not (math.isfinite(self.cost_per_replica_hour) and self.cost_per_replica_hour > 0):
            problems.append(
                f"{p}.cost_per_replica_hour: value {self.cost_per_replica_hour} must be > 0"
            )
        if not (math.isfinite(self.capacity_per_replica) and self.capacity_per_replica > 0):
            problems.append(
                f"{p}.capacity_per_replica: value {self.capacity_per_replica} must be > 0"
            )
        if self.min_replicas < 0:
            problems.append(f"{p}.min_replicas: value {self.min_replicas} must be >= 0")
        if self.max_replicas is not None and self.max_replicas < self.min_replicas:
            problems.append(
                f"{p}.max_replicas: value {self.max_replicas} must be >= min_replicas"
                f" {self.min_replicas}"
            )
        if self.max_model_len is not None and self.max_model_len < 1:
            problems.append(f"{p}.max_model_len: value {self.max_model_len} must be >= 1")
        if problems:
            raise ConfigError("invalid variant", problems)

    @property
    def cost_per_capacity(self) -> float:
        """Cost of one unit of demand-hour on this variant: the greedy rule's order."""
        return self.cost_per_replica_hour / self.capacity_per_replica

    def serves(self, length_tokens: int) -> bool:
        return self.max_model_len is None or length_tokens <= self.max_model_len


@dataclass(frozen=True, slots=True)
class VariantState:
    """What the cluster shows for one variant now. ``free_slots``: pods the capacity book
    can still place for its GPU resource (None: not limited, e.g. nodes are provisioned)."""

    replicas: int
    pending: int = 0
    free_slots: int | None = None

    def __post_init__(self) -> None:
        if self.replicas < 0 or self.pending < 0 or self.pending > self.replicas:
            raise ConfigError(
                f"variant state: replicas {self.replicas} and pending {self.pending} must "
                "satisfy 0 <= pending <= replicas"
            )
        if self.free_slots is not None and self.free_slots < 0:
            raise ConfigError(f"variant state: free_slots value {self.free_slots} must be >= 0")


@dataclass(frozen=True, slots=True)
class LengthDemand:
    """Demand of the requests whose prompt + output is at most ``max_len_tokens``
    (and longer than the previous class's bound)."""

    max_len_tokens: int
    demand: float


@dataclass(frozen=True, slots=True)
class Split:
    """The decision: replicas per variant, and what it could not do."""

    replicas: Mapping[str, int]
    unplaced_demand: float  # demand no placeable variant could take (capacity-limited)
    unservable_demand: float  # demand longer than every variant's max_model_len
    blocked: Mapping[str, str]  # variant -> why it could not grow (when growth was wanted)


def demand_by_length(
    total_demand: float, length_shares: Mapping[int, float]
) -> tuple[LengthDemand, ...]:
    """Split the model's one demand over length classes by the observed histogram
    (class upper bound in tokens -> share of the demand; shares need not be normalised).
    An empty histogram puts everything in the shortest class (length 1)."""
    if not math.isfinite(total_demand) or total_demand < 0:
        raise ConfigError(f"demand: value {total_demand} must be a finite number >= 0")
    weights = {k: float(v) for k, v in length_shares.items() if v > 0}
    for k, v in length_shares.items():
        if k < 1 or not math.isfinite(v) or v < 0:
            raise ConfigError(
                f"length_shares[{k}]: value {v} must be finite and >= 0, key must be >= 1"
            )
    s = sum(weights.values())
    if s <= 0:
        return (LengthDemand(1, total_demand),)
    return tuple(LengthDemand(k, total_demand * weights[k] / s) for k in sorted(weights))


def _classes(demand: Sequence[LengthDemand]) -> list[LengthDemand]:
    merged: dict[int, float] = {}
    for d in demand:
        if d.max_len_tokens < 1 or not math.isfinite(d.demand) or d.demand < 0:
            raise ConfigError(
                f"demand[{d.max_len_tokens}]: value {d.demand} must be finite and >= 0 "
                "with max_len_tokens >= 1"
            )
        merged[d.max_len_tokens] = merged.get(d.max_len_tokens, 0.0) + d.demand
    return [LengthDemand(k, merged[k]) for k in sorted(merged)]


def shortfall(
    variants: Sequence[Variant], counts: Mapping[str, int], demand: Sequence[LengthDemand]
) -> float:
    """Demand the counts cannot cover (0: covered). Variants able to serve a class also
    serve every shorter one, so Hall's condition on suffixes is exact: for each class,
    the demand of it and of every longer class must fit on the variants long enough for
    it; the shortfall is the worst suffix's excess."""
    classes = _classes(demand)
    worst = 0.0
    tail = 0.0
    for c in reversed(classes):
        tail += c.demand
        cap = sum(
            v.capacity_per_replica * counts.get(v.name, 0)
            for v in variants
            if v.serves(c.max_len_tokens)
        )
        worst = max(worst, tail - cap)
    return worst if worst > EPS * max(1.0, tail) else 0.0


def _worst_suffix(
    variants: Sequence[Variant], counts: Mapping[str, int], classes: Sequence[LengthDemand]
) -> tuple[float, int]:
    """(excess, index) of the longest class whose suffix demand exceeds the capacity of the
    variants serving it; excess <= 0 when all are covered."""
    tail = 0.0
    for i in range(len(classes) - 1, -1, -1):
        c = classes[i]
        tail += c.demand
        cap = sum(
            v.capacity_per_replica * counts.get(v.name, 0)
            for v in variants
            if v.serves(c.max_len_tokens)
        )
        if tail - cap > EPS * max(1.0, tail):
            return tail - cap, i
    return 0.0, -1


def _cover_cost(v: Variant, excess: float) -> float:
    """Cost per hour of closing ``excess`` with this variant alone (whole replicas)."""
    return v.cost_per_replica_hour * math.ceil(excess / v.capacity_per_replica - EPS)


def _can_place(v: Variant, s: VariantState, added: int) -> str | None:
    if s.pending > 0:
        return f"{s.pending} pod(s) Pending"
    if v.max_replicas is not None and s.replicas + added >= v.max_replicas:
        return f"at max_replicas {v.max_replicas}"
    if s.free_slots is not None and added >= s.free_slots:
        return "no free slot in the capacity book"
    return None


def split(
    variants: Sequence[Variant],
    states: Mapping[str, VariantState],
    demand: Sequence[LengthDemand],
    *,
    gap_aware: bool = False,
) -> Split:
    """Replicas per variant covering ``demand`` from the current counts (see module doc).

    Each variant first goes to within [min, max]. Scale-up then covers the longest
    uncovered length class first, adding to the cheapest placeable variant serving it
    (what serves a class serves every shorter one); otherwise scale-down removes from
    the most expensive variant (per unit of capacity) whose removal keeps the demand
    covered. Variants with Pending pods never grow (their pods are not placeable now)
    but may shrink."""
    names = [v.name for v in variants]
    if len(set(names)) != len(names):
        raise ConfigError(f"variants: names {names} must be unique")
    missing = [n for n in names if n not in states]
    if missing:
        raise ConfigError(f"states: variants {missing} have no state")
    counts: dict[str, int] = {}
    for v in variants:
        n = max(states[v.name].replicas, v.min_replicas)
        if v.max_replicas is not None:
            n = min(n, v.max_replicas)
        counts[v.name] = n
    classes = _classes(demand)
    longest_served = (
        max((math.inf if v.max_model_len is None else v.max_model_len) for v in variants)
        if variants
        else 0
    )
    servable = [c for c in classes if c.max_len_tokens <= longest_served]
    unservable = sum(c.demand for c in classes if c.max_len_tokens > longest_served)

    added = {v.name: max(0, counts[v.name] - states[v.name].replicas) for v in variants}
    blocked: dict[str, str] = {}
    by_cost = sorted(variants, key=lambda v: (v.cost_per_capacity, v.cost_per_replica_hour, v.name))
    grew = shortfall(variants, counts, servable) > 0
    unplaced = 0.0
    todo = list(servable)
    while todo:
        # the longest class whose suffix is short: what serves it serves all shorter ones
        excess, c = _worst_suffix(variants, counts, todo)
        if excess <= 0:
            break
        # gap-aware: cheapest to close this gap alone (a whole H100 for a sliver of
        # demand loses to one slice, though the H100 is cheaper per unit of capacity)
        order = (
            sorted(by_cost, key=lambda v: (_cover_cost(v, excess), v.cost_per_capacity))
            if gap_aware
            else by_cost
        )
        for v in order:
            if not v.serves(todo[c].max_len_tokens):
                continue
            why = _can_place(v, states[v.name], added[v.name])
            if why is not None:
                blocked[v.name] = why
                continue
            counts[v.name] += 1
            added[v.name] += 1
            break
        else:  # nothing placeable serves it: that much of the class stays unplaced
            unplaced += excess
            todo[c] = LengthDemand(todo[c].max_len_tokens, max(0.0, todo[c].demand - excess))
    gap = unplaced
    if grew:
        # trim what this decision added and a later addition made redundant (a slice
        # placed for a short class, then an H100 for the long one that covers both);
        # only new pods go, never a running one for a starting one
        for v in reversed(by_cost):
            while added[v.name] > 0 and counts[v.name] > v.min_replicas:
                trial = dict(counts)
                trial[v.name] -= 1
                if (
                    shortfall(variants, trial, servable)
                    > shortfall(variants, counts, servable) + 1e-9
                ):
                    break
                counts = trial
                added[v.name] -= 1
    else:
        # scale-down: most expensive first, while the demand stays covered (never in the
        # decision that grew: new pods are not ready yet, so no swap of ready for starting)
        for v in reversed(by_cost):
            while counts[v.name] > v.min_replicas:
                trial = dict(counts)
                trial[v.name] -= 1
                if shortfall(variants, trial, servable) > 0:
                    break
                counts = trial
    return Split(
        replicas=counts,
        unplaced_demand=gap,
        unservable_demand=unservable,
        blocked=dict(sorted(blocked.items())) if gap > 0 else {},
    )


# ------------------------------------------------------------------ the controller's split


@dataclass(frozen=True, slots=True)
class VariantChange:
    """One variant's replicas moving, and why (the Event's reason and message)."""

    name: str
    from_replicas: int
    to_replicas: int
    reason: str  # scale-up | scale-down | min-replicas | max-replicas
    message: str


@dataclass(frozen=True, slots=True)
class VariantPlan:
    """The controller's split of one decision over the variants, at ``t``.

    ``desired_replicas`` is the decision's total in reference replicas (a replica of
    ``capacity_per_replica`` 1: see `plan_replicas`); ``demand_capacity`` the capacity
    split (that total plus the unschedulable pods' capacity, kept in their variants)."""

    t: float
    desired_replicas: int  # the decision's total (reference replicas that can run)
    replicas: Mapping[str, int]  # per variant, what to write
    changes: tuple[VariantChange, ...]  # the variants whose replicas move (write these)
    unplaced_replicas: int  # of the total, what no variant could place now
    blocked: Mapping[str, str]  # variant -> why it could not grow (when growth was wanted)
    demand_capacity: float = 0.0  # capacity units split (reference replicas + stuck pods)
    unservable_share: float = 0.0  # of the demand, longer than every variant's maxModelLen
    too_long_share: Mapping[str, float] = field(default_factory=dict)  # variant -> share over
    # its maxModelLen (only longer variants serve it); absent: 0
    lengths_known: bool = False  # False: no length histogram, one class every variant serves
    notes: tuple[str, ...] = ()


def capacity_units(
    variants: Sequence[Variant], replicas: Mapping[str, int], *, round_up: bool = True
) -> int:
    """Replicas per variant as reference replicas (capacity 1 each): what the decision
    counts for a target with variants, so an H100 of capacity 3 weighs three slices of
    capacity 1. Rounded up (a fraction of a reference replica is one to the policy), 0
    stays 0."""
    total = sum(v.capacity_per_replica * replicas.get(v.name, 0) for v in variants)
    return math.ceil(total - EPS) if round_up else round(total)


def length_shares_from_buckets(cumulative: Mapping[float, float]) -> dict[int, float]:
    """Length classes from a request-length histogram's cumulative bucket increases over
    the window (upper bound in tokens -> requests at most that long, ``+Inf`` included):
    class upper bound -> share of the tokens (each bucket's requests times its midpoint;
    the ``+Inf`` bucket at the highest finite bound + 1, the least its requests can be).
    Empty (no histogram, no request in the window): {} (the caller's "unknown")."""
    bounds = sorted(b for b in cumulative if not math.isnan(b))
    shares: dict[int, float] = {}
    below, lo = 0.0, 0.0
    running = 0.0
    for b in bounds:
        running = max(running, float(cumulative[b]))  # non-monotonic fixed as Prometheus
        count = max(0.0, running - below)
        below = running
        if math.isinf(b):
            key = math.floor(lo) + 1
            mid = float(key)
        else:
            key = max(1, math.ceil(b))
            mid = max(1.0, (lo + b) / 2)
            lo = b
        if count > 0:
            shares[key] = shares.get(key, 0.0) + count * mid
    total = sum(shares.values())
    if total <= 0:
        return {}
    return {k: v / total for k, v in sorted(shares.items())}


def _too_long_text(bound: int, servers: Sequence[str]) -> str:
    names = ", ".join(servers)
    verb = "serves" if len(servers) == 1 else "serve"
    return f"requests over {bound} tokens: only {names} {verb} them"


def plan_replicas(
    variants: Sequence[Variant],
    states: Mapping[str, VariantState],
    desired_replicas: int,
    now: float,
    *,
    length_shares: Mapping[int, float] | None = None,
    rounding_slack: float = 0.0,
) -> VariantPlan:
    """Split the model's ``desired_replicas`` (decided once from every variant's pods)
    over the variants, from their current replicas, by capacity (`split`).

    The decision counts reference replicas: a replica of ``capacity_per_replica`` 1 (the
    caller counts the current replicas the same way, `capacity_units`, so a decision that
    holds asks for exactly the capacity running). The demand split is ``desired_replicas``
    capacity units; a variant's replica covers its ``capacity_per_replica`` of them, so
    one H100 of capacity 3 replaces three slices of capacity 1. ``rounding_slack``: what
    the caller's rounding up of the current capacity added (`capacity_units`: 6.75 is
    counted 7, slack 0.25); it comes off the demand, so a decision that holds never grows
    a variant for a rounding.

    ``length_shares`` (class upper bound in tokens -> share of the demand, from the pods'
    request-length histogram, `length_shares_from_buckets`): the demand of a class longer
    than a variant's ``max_model_len`` counts only toward the variants that serve it.
    None or empty (no histogram read): one class every variant serves, and a note says
    so (missing is never "no long requests").

    ``states[v].pending`` are pods the scheduler cannot place: ``desired_replicas``
    counts replicas that can run, so those pods' capacity comes on top (kept in their
    variant, which is skipped for growth; when a Deployment shrinks, Kubernetes removes
    its unscheduled pods first).

    Growth goes one replica at a time to the cheapest variant per unit of capacity that
    can place a pod (not at its max, no unschedulable pod, a free slot in the capacity
    book) and serves the longest uncovered class; removal takes from the most expensive
    per unit of capacity first, while the demand stays covered; each variant stays
    within its min/max, and demand the variants cannot place is reported
    (``unplaced_replicas``, in reference replicas), never chased. Pure: ``now`` only
    stamps the plan."""
    if desired_replicas < 0:
        raise ConfigError(f"desired_replicas: value {desired_replicas} must be >= 0")
    if not 0.0 <= rounding_slack < 1.0:
        raise ConfigError(f"rounding_slack: value {rounding_slack} must be in [0, 1)")
    stuck = sum(
        states[v.name].pending * v.capacity_per_replica for v in variants if v.name in states
    )
    total = max(0.0, desired_replicas - rounding_slack) + stuck
    notes: list[str] = []
    lengths_known = bool(length_shares) and any(s > 0 for s in (length_shares or {}).values())
    if lengths_known:
        demand = demand_by_length(total, length_shares or {})
    else:
        demand = (LengthDemand(1, total),)
        if any(v.max_model_len is not None for v in variants):
            notes.append(
                "no request-length histogram read: all demand counted as servable by every"
                " variant (maxModelLen not applied)"
            )
    result = split(variants, states, demand)
    by_cost = sorted(variants, key=lambda v: (v.cost_per_capacity, v.cost_per_replica_hour, v.name))
    blocked: dict[str, str] = dict(result.blocked)
    classes = [d for d in demand if d.demand > EPS]
    share_of = (lambda x: x / total) if total > 0 else (lambda x: 0.0)
    too_long: dict[str, float] = {}
    for v in variants:
        over = sum(d.demand for d in classes if not v.serves(d.max_len_tokens))
        if over > EPS:
            too_long[v.name] = share_of(over)
    unservable_share = share_of(result.unservable_demand)
    if result.unservable_demand > EPS:
        longest = max(v.max_model_len or 0 for v in variants)
        notes.append(
            f"{unservable_share:.0%} of the demand is over {longest} tokens: no variant "
            "serves it (not counted)"
        )
    changes: list[VariantChange] = []
    for v in variants:
        before, after = states[v.name].replicas, result.replicas[v.name]
        if after == before:
            continue
        cost = f"{v.cost_per_capacity:g}/capacity-hour"
        if after > before and before < v.min_replicas and after <= v.min_replicas:
            reason, message = "min-replicas", f"raised to minReplicas {v.min_replicas}"
        elif after < before and v.max_replicas is not None and after == v.max_replicas:
            reason, message = "max-replicas", f"lowered to maxReplicas {v.max_replicas}"
        elif after > before:
            skipped = []
            forced = ""
            for cheaper in by_cost:
                if cheaper.name == v.name:
                    break
                long = [d for d in classes if not cheaper.serves(d.max_len_tokens)]
                if long and v.serves(long[0].max_len_tokens) and not forced:
                    servers = [w.name for w in variants if w.serves(long[0].max_len_tokens)]
                    forced = _too_long_text(cheaper.max_model_len or 0, servers)
                added = result.replicas[cheaper.name] - states[cheaper.name].replicas
                why = _can_place(cheaper, states[cheaper.name], max(0, added))
                if why is not None:
                    skipped.append(f"{cheaper.name} ({why})")
                    blocked.setdefault(cheaper.name, why)
            reason = "scale-up"
            message = f"cheapest variant per unit of capacity that can place a pod (cost {cost})"
            if forced:
                message = f"{forced}; {message}"
            if skipped:
                message += "; skipped cheaper: " + ", ".join(skipped)
            if v.max_model_len is not None and not lengths_known:
                message += "; request lengths unknown: its maxModelLen not applied"
        else:
            reason = "scale-down"
            message = f"most expensive variant per unit of capacity first (cost {cost})"
        changes.append(VariantChange(v.name, before, after, reason, message))
    return VariantPlan(
        t=now,
        desired_replicas=desired_replicas,
        replicas=dict(result.replicas),
        changes=tuple(changes),
        unplaced_replicas=math.ceil(result.unplaced_demand - EPS),
        blocked=dict(sorted(blocked.items())),
        demand_capacity=total,
        unservable_share=unservable_share,
        too_long_share=too_long,
        lengths_known=lengths_known,
        notes=tuple(notes),
    )
