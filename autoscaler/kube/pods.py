"""Pods as the controller keeps them: a compact record per pod (from the shared pod
informer) and, per target, a view of the pods its selector matches.

One pod watch serves every target (`autoscaler.kube.cache.ClusterCache`); each pod event
is routed to the views of its namespace whose selector matches it, so a tick reads a
cached snapshot (rebuilt only after a change) instead of listing or watching per target.
From a target's pods it keeps: the Ready pods' metrics URLs (``status.podIP:<port><path>``),
how many pods are on the way (created, not terminating, not yet Ready) and cold-start
samples (creation -> Ready ``lastTransitionTime``) for the forecaster's horizon.
"""

from __future__ import annotations

import math
import sys
import weakref
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from autoscaler.kube.gpu import is_pool_pod, request_totals
from autoscaler.kube.selectors import equality_requirements, parse_label_selector
from autoscaler.names import ASLEEP_SINCE_ANNOTATION, METRICS_PORT_ANNOTATION, SLEEPING_LABEL

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class PodInfo:
    name: str
    uid: str
    ready: bool
    terminating: bool
    phase: str
    ip: str | None
    metrics_url: str | None
    sleeping: bool = False  # labelled a sleeper (names.SLEEPING_LABEL)
    asleep_since_s: float | None = None  # unix seconds, from names.ASLEEP_SINCE_ANNOTATION
    engine_url: str | None = None  # http://<podIP>:<port>: the engine's API (sleep, wake_up)


@dataclass(frozen=True, slots=True)
class PodSnapshot:
    """What the control loop reads each tick (immutable; rebuilt only after a change)."""

    synced: bool
    ready_urls: tuple[str, ...]
    ready: int
    pending: int  # created, not terminating, not yet Ready: capacity on the way
    terminating: int
    cold_start_samples_s: tuple[float, ...]
    pods: tuple[PodInfo, ...]
    placed: int = 0  # bound to a node and not finished (what GPU capacity counts)
    cold_start_total: int = 0  # samples ever taken (the tuple keeps the newest only)
    sleeping: int = 0  # sleepers not terminating (docs/policy.md#sleepers)
    # not terminating, not bound, and the scheduler said it cannot place them
    # (PodScheduled=False, reason Unschedulable): the variant split skips such a variant
    unschedulable: int = 0


@dataclass(frozen=True, slots=True)
class PodRecord:
    """The fields of a Pod the controller uses (a few hundred bytes instead of kilobytes)."""

    namespace: str
    name: str
    uid: str
    labels: Mapping[str, str]
    port_override: int | None
    ready: bool  # Ready condition True, Running, not terminating
    terminating: bool
    phase: str
    ip: str | None
    node: str | None
    requests: tuple[tuple[str, float], ...]  # extended resources (GPUs) it requests
    cold_start_s: float | None
    pool: bool  # a warm-pool pause pod
    sleeping: bool = False  # labelled names.SLEEPING_LABEL=true
    asleep_since_s: float | None = None
    unschedulable: bool = False  # PodScheduled=False, reason Unschedulable, not bound

    @property
    def placed(self) -> bool:
        return self.node is not None and self.phase not in TERMINAL_PHASES


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _ready_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c  # type: ignore[no-any-return]
    return None


def unschedulable(pod: Mapping[str, Any]) -> bool:
    """Not bound to a node and the scheduler's verdict is ``Unschedulable`` (no node
    fits: what a Pending pod waiting for capacity shows)."""
    if (pod.get("spec") or {}).get("nodeName"):
        return False
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled":
            return bool(c.get("status") == "False" and c.get("reason") == "Unschedulable")
    return False


def cold_start_s(pod: Mapping[str, Any]) -> float | None:
    """Creation -> Ready, or None when unknown or polluted by a container restart."""
    cond = _ready_condition(pod)
    if cond is None or cond.get("status") != "True":
        return None
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    if any(int(s.get("restartCount") or 0) > 0 for s in statuses):
        return None
    created = _ts((pod.get("metadata") or {}).get("creationTimestamp"))
    ready_at = _ts(cond.get("lastTransitionTime"))
    if created is None or ready_at is None or ready_at < created:
        return None
    return ready_at - created


class _Labels(dict[str, str]):
    """One pod's labels, shared by every pod carrying the same ones (a weakly referenced
    dict: never mutated once made)."""

    __slots__ = ("__weakref__",)


# Per distinct label set, the one mapping every pod carrying it shares: a ReplicaSet's
# pods differ only in name, uid and IP, and each decoded event holds fresh strings for
# the rest. Gone with the last pod carrying it (weak values), so rollouts leave nothing.
_LABEL_SETS: weakref.WeakValueDictionary[tuple[tuple[str, str], ...], _Labels] = (
    weakref.WeakValueDictionary()
)
_intern = sys.intern
_NO_LABELS: Mapping[str, str] = _Labels()


def shared_labels(labels: Mapping[str, Any] | None) -> Mapping[str, str]:
    """``labels`` as the one shared mapping for that label set (keys and values interned)."""
    if not labels:
        return _NO_LABELS
    key = tuple(sorted((_intern(str(k)), _intern(str(v))) for k, v in labels.items()))
    shared = _LABEL_SETS.get(key)
    if shared is None:
        shared = _LABEL_SETS[key] = _Labels(key)
    return shared


def _opt_intern(value: Any) -> str | None:
    return _intern(value) if isinstance(value, str) and value else None


def pod_record(pod: Mapping[str, Any]) -> PodRecord:
    """The informer's transform for pods. Strings many pods repeat (namespace, phase,
    node, labels) are shared, not one copy per pod (issue 16: 8,000 pods)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    spec = pod.get("spec") or {}
    cond = _ready_condition(pod)
    terminating = bool(meta.get("deletionTimestamp"))
    phase = _intern(str(status.get("phase") or "Pending"))
    ready = cond is not None and cond.get("status") == "True" and phase == "Running"
    annotations = meta.get("annotations") or {}
    override = annotations.get(METRICS_PORT_ANNOTATION)
    labels = shared_labels(meta.get("labels"))
    sleeping = labels.get(SLEEPING_LABEL) == "true"
    return PodRecord(
        namespace=_intern(str(meta.get("namespace") or "")),
        name=str(meta.get("name")),
        uid=str(meta.get("uid")),
        labels=labels,
        port_override=int(override) if override else None,
        ready=ready and not terminating,
        terminating=terminating,
        phase=phase,
        ip=status.get("podIP") or None,
        node=_opt_intern(spec.get("nodeName")),
        requests=tuple(sorted(request_totals(spec).items())),
        cold_start_s=cold_start_s(pod),
        pool=is_pool_pod(labels),
        sleeping=sleeping,
        asleep_since_s=_since(annotations.get(ASLEEP_SINCE_ANNOTATION)) if sleeping else None,
        unschedulable=unschedulable(pod) and not terminating,
    )


def _since(value: Any) -> float | None:
    """Unix seconds as the controller writes them; anything else reads as unknown."""
    try:
        since = float(value)
    except (TypeError, ValueError):
        return None
    return since if math.isfinite(since) else None


def pod_info(rec: PodRecord, port: int, path: str) -> PodInfo:
    use_port = rec.port_override or port
    url = f"http://{rec.ip}:{use_port}{path}" if rec.ip and rec.ready else None
    engine = f"http://{rec.ip}:{use_port}" if rec.ip else None
    return PodInfo(
        rec.name,
        rec.uid,
        rec.ready,
        rec.terminating,
        rec.phase,
        rec.ip,
        url,
        rec.sleeping,
        rec.asleep_since_s,
        engine,
    )


class TargetPods:
    """The pods one target's selector matches, kept up to date by `PodIndex`."""

    def __init__(
        self, namespace: str, selector: str, port: int, path: str, *, max_samples: int = 256
    ) -> None:
        if not selector:
            raise ValueError("label_selector: empty selector would match every pod")
        self.namespace, self.selector, self.port, self.path = namespace, selector, port, path
        self.match: Callable[[Mapping[str, str]], bool] = parse_label_selector(selector)
        self.pods: dict[str, PodRecord] = {}
        self._samples: deque[float] = deque(maxlen=max_samples)
        self._samples_total = 0
        self._sampled: set[str] = set()  # uids already sampled (dropped when the pod goes)
        self._snap: PodSnapshot | None = None

    def upsert(self, rec: PodRecord) -> None:
        self.pods[rec.name] = rec
        if rec.cold_start_s is not None and rec.uid not in self._sampled:
            self._sampled.add(rec.uid)
            self._samples.append(rec.cold_start_s)
            self._samples_total += 1
        self._snap = None

    def remove(self, name: str) -> None:
        rec = self.pods.pop(name, None)
        if rec is not None:
            self._sampled.discard(rec.uid)
            self._snap = None

    def snapshot(self, synced: bool = True) -> PodSnapshot:
        snap = self._snap
        if snap is None or snap.synced != synced:
            snap = self._snap = self._build(synced)
        return snap

    def _build(self, synced: bool) -> PodSnapshot:
        infos = sorted(
            (pod_info(p, self.port, self.path) for p in self.pods.values()), key=lambda i: i.name
        )
        ready = [i for i in infos if i.ready]
        return PodSnapshot(
            synced=synced,
            ready_urls=tuple(i.metrics_url for i in ready if i.metrics_url),
            ready=len(ready),
            pending=sum(1 for i in infos if not i.ready and not i.terminating),
            terminating=sum(1 for i in infos if i.terminating),
            cold_start_samples_s=tuple(self._samples),
            pods=tuple(infos),
            placed=sum(1 for p in self.pods.values() if p.placed),
            cold_start_total=self._samples_total,
            sleeping=sum(1 for i in infos if i.sleeping and not i.terminating),
            unschedulable=sum(1 for p in self.pods.values() if p.unschedulable),
        )


ViewKey = tuple[str, str, int, str]  # (namespace, selector, port, path)
LabelKey = tuple[str, str, str]  # (namespace, label key, label value)


class PodIndex:
    """Routes pod informer events to the target views whose selector matches the pod.

    A view whose selector has an equality requirement (every ``matchLabels`` selector
    does) is indexed under that one label, so a pod event is matched only against the
    views of the labels it carries, and a new view is seeded only from the pods carrying
    its label: cost per event and per new view independent of the number of targets.
    Other views (set-based selectors only) are matched against every pod of their
    namespace. Per tick: nothing (views cache their snapshot).
    """

    def __init__(self) -> None:
        self.pods: dict[str, dict[str, PodRecord]] = defaultdict(dict)  # namespace -> name ->
        self._by_label: dict[LabelKey, dict[str, PodRecord]] = defaultdict(dict)
        self._views: dict[ViewKey, TargetPods] = {}
        self._views_by_label: dict[LabelKey, list[TargetPods]] = defaultdict(list)
        self._views_by_ns: dict[str, list[TargetPods]] = defaultdict(list)  # no label key

    def _candidates(self, rec: PodRecord) -> list[TargetPods]:
        views = list(self._views_by_ns.get(rec.namespace, ()))
        for k, v in rec.labels.items():
            views.extend(self._views_by_label.get((rec.namespace, k, v), ()))
        return views

    def on_event(self, key: tuple[str, str], old: PodRecord | None, new: PodRecord | None) -> None:
        ns, name = key
        before = self.pods[ns].pop(name, None) or old
        if before is not None:
            for k, v in before.labels.items():
                holders = self._by_label.get((ns, k, v))
                if holders is not None:
                    holders.pop(name, None)
                    if not holders:  # labels come and go (pod-template-hash): no leak
                        del self._by_label[(ns, k, v)]
        if new is None:
            for view in self._candidates(before) if before is not None else ():
                view.remove(name)
            return
        self.pods[ns][name] = new
        for k, v in new.labels.items():
            self._by_label[(ns, k, v)][name] = new
        now = self._candidates(new)
        for view in now:
            if view.match(new.labels):
                view.upsert(new)
            else:
                view.remove(name)
        if before is not None and before.labels != new.labels:
            kept = {id(v) for v in now}
            for view in self._candidates(before):
                if id(view) not in kept:
                    view.remove(name)

    def view(self, namespace: str, selector: str, port: int, path: str) -> TargetPods:
        """The view for this selector (created on first use from the pods cached now)."""
        key = (namespace, selector, port, path)
        v = self._views.get(key)
        if v is None:
            v = self._views[key] = TargetPods(namespace, selector, port, path)
            eq = equality_requirements(selector)
            if eq:
                label = (namespace, *eq[0])
                self._views_by_label[label].append(v)
                seed = self._by_label.get(label, {}).values()
            else:
                self._views_by_ns[namespace].append(v)
                seed = self.pods.get(namespace, {}).values()
            for rec in seed:
                if v.match(rec.labels):
                    v.upsert(rec)
        return v

    def drop_view(self, namespace: str, selector: str, port: int, path: str) -> None:
        """Forget a view no target uses any more."""
        v = self._views.pop((namespace, selector, port, path), None)
        if v is None:
            return
        for table in (self._views_by_label, self._views_by_ns):
            for key, views in list(table.items()):
                if v in views:
                    views.remove(v)
                    if not views:
                        del table[key]  # type: ignore[arg-type]

    @property
    def views(self) -> int:
        return len(self._views)
