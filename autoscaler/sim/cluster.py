"""The GPU cluster around the replicas: nodes, slots, pods, cold starts, warm pool, drain.

Placement of a new inference pod, in order: a slot held by a warm-pool pause pod (the
pause pod is preempted; the node and its image cache are warm), a free slot on an existing
node (warm), else a new node (node provisioning + uncached image pull). A slot is what one
replica needs: whole GPUs (``gpus_per_replica``), a MIG instance, or a time-slice share.

Cost is GPU-hours billed per pod from creation (GPU requested) to deletion: the cold start
is paid, a pod waiting for a new node pays from the node's launch, pause pods are paid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Literal

import numpy as np

from autoscaler.errors import ConfigError
from autoscaler.sim.replica import CounterSink, HardwareProfile, Replica

Z90 = 1.2815515655446004  # standard normal 90th percentile


@dataclass(frozen=True, slots=True)
class Phase:
    """A log-normal duration given by its median and 90th percentile (seconds)."""

    median_s: float
    p90_s: float

    def __post_init__(self) -> None:
        if not 0 <= self.median_s <= self.p90_s:
            raise ConfigError(
                f"phase: median_s {self.median_s} must be >= 0 and <= p90_s {self.p90_s}"
            )

    def sample(self, rng: np.random.Generator) -> float:
        if self.median_s == 0:
            return 0.0
        sigma = math.log(self.p90_s / self.median_s) / Z90
        return float(self.median_s * math.exp(sigma * rng.standard_normal()))

    def scaled(self, factor: float) -> Phase:
        return Phase(self.median_s * factor, self.p90_s * factor)


WEIGHT_SOURCES: dict[str, Phase] = {
    "nvme": Phase(10, 30),
    "s3-streamer": Phase(6, 15),
    "download": Phase(60, 120),
}


@dataclass(frozen=True, slots=True)
class ColdStartModel:
    """Cold-start phases of one vLLM pod (DESIGN.md / calibration.md section 6, 8B)."""

    node_provision: Phase = Phase(120, 300)
    image_pull_uncached: Phase = Phase(120, 360)
    image_pull_cached: Phase = Phase(2, 5)
    engine_init: Phase = Phase(20, 35)
    weights: Phase = WEIGHT_SOURCES["nvme"]
    compile_cold: Phase = Phase(30, 55)
    compile_cached: Phase = Phase(10, 15)
    compile_cache: bool = True
    cuda_graphs: Phase = Phase(10, 20)
    readiness: Phase = Phase(5, 15)

    def sample(
        self, rng: np.random.Generator, *, new_node: bool, image_cached: bool
    ) -> dict[str, float]:
        """Phase durations for one pod (node provisioning only when a node is added)."""
        out = {
            "node_provision": self.node_provision.sample(rng) if new_node else 0.0,
            "image_pull": (
                self.image_pull_cached if image_cached else self.image_pull_uncached
            ).sample(rng),
            "engine_init": self.engine_init.sample(rng),
            "weights": self.weights.sample(rng),
            "compile": (self.compile_cached if self.compile_cache else self.compile_cold).sample(
                rng
            ),
            "cuda_graphs": self.cuda_graphs.sample(rng),
            "readiness": self.readiness.sample(rng),
        }
        return out

    @property
    def warm_median_s(self) -> float:
        """Sum of phase medians on a warm node with a cached image."""
        return (
            self.image_pull_cached.median_s
            + self.engine_init.median_s
            + self.weights.median_s
            + (self.compile_cached if self.compile_cache else self.compile_cold).median_s
            + self.cuda_graphs.median_s
            + self.readiness.median_s
        )

    def scaled_to(self, warm_median_s: float) -> ColdStartModel:
        """All phases scaled so a warm-node start has the given median (sensitivity runs)."""
        if not warm_median_s > 0:
            raise ConfigError(f"cold start: value {warm_median_s} must be > 0 seconds")
        f = warm_median_s / self.warm_median_s
        return ColdStartModel(
            node_provision=self.node_provision.scaled(f),
            image_pull_uncached=self.image_pull_uncached.scaled(f),
            image_pull_cached=self.image_pull_cached.scaled(f),
            engine_init=self.engine_init.scaled(f),
            weights=self.weights.scaled(f),
            compile_cold=self.compile_cold.scaled(f),
            compile_cached=self.compile_cached.scaled(f),
            compile_cache=self.compile_cache,
            cuda_graphs=self.cuda_graphs.scaled(f),
            readiness=self.readiness.scaled(f),
        )


COLD_START_PRESETS: dict[str, ColdStartModel] = {
    "default": ColdStartModel(),
    "s3-streamer": ColdStartModel(weights=WEIGHT_SOURCES["s3-streamer"]),
    "download": ColdStartModel(weights=WEIGHT_SOURCES["download"], compile_cache=False),
    "70b": ColdStartModel(
        node_provision=Phase(180, 420),
        engine_init=Phase(30, 60),
        weights=Phase(25, 90),
        compile_cold=Phase(90, 150),
        compile_cached=Phase(20, 40),
        cuda_graphs=Phase(30, 60),
        readiness=Phase(10, 25),
    ),
}


def parse_cold_start(text: str) -> ColdStartModel:
    """A preset name, or seconds: the warm-node median the default phases are scaled to."""
    if text in COLD_START_PRESETS:
        return COLD_START_PRESETS[text]
    try:
        seconds = float(text.removesuffix("s"))
    except ValueError:
        raise ConfigError(
            f"--cold-start: value {text!r} must be seconds or one of "
            f"{', '.join(sorted(COLD_START_PRESETS))}"
        ) from None
    return ColdStartModel().scaled_to(seconds)


Sharing = Literal["exclusive", "mig", "time-slicing"]


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """The cluster a policy is tested on (prices and capacity are parameters)."""

    profile: HardwareProfile
    cold_start: ColdStartModel = field(default_factory=ColdStartModel)
    price_per_gpu_hour: float = 4.0
    gpus_per_node: int = 8
    sharing: Sharing = "exclusive"
    replicas_per_gpu: int = 1  # mig: instances per GPU (3g.40gb: 2); time-slicing: tenants
    timeslice_overhead: float = 0.1  # extra step time per busy co-tenant (context switches)
    max_nodes: int | None = None
    initial_free_slots: int = 0  # free warm slots on existing nodes at t=0
    node_idle_timeout_s: float = 600.0  # cluster-autoscaler scale-down-unneeded-time
    warm_pool_size: int = 0  # pause pods
    drain_timeout_s: float = 600.0  # terminationGracePeriodSeconds of the vLLM pods
    router_timeout_s: float = 600.0  # a request nobody can serve for this long is dropped

    def __post_init__(self) -> None:
        if self.price_per_gpu_hour < 0:
            raise ConfigError(f"price_per_gpu_hour: value {self.price_per_gpu_hour} must be >= 0")
        if self.replicas_per_gpu < 1 or self.gpus_per_node < 1:
            raise ConfigError("replicas_per_gpu and gpus_per_node must be >= 1")
        if self.sharing == "exclusive" and self.replicas_per_gpu != 1:
            raise ConfigError("replicas_per_gpu must be 1 with sharing 'exclusive'")

    @property
    def slots_per_node(self) -> int:
        if self.sharing == "exclusive":
            per = max(1, round(self.profile.gpus_billed))
            return max(1, self.gpus_per_node // per)
        return self.gpus_per_node * self.replicas_per_gpu

    @property
    def gpus_billed_per_replica(self) -> float:
        if self.sharing == "time-slicing":
            return 1.0 / self.replicas_per_gpu
        return self.profile.gpus_billed

    def with_profile(self, profile: HardwareProfile) -> ClusterConfig:
        return replace(self, profile=profile)


class PodState(Enum):
    STARTING = "starting"
    READY = "ready"
    DRAINING = "draining"
    DELETED = "deleted"


@dataclass(slots=True)
class Node:
    nid: int
    ready_t: float
    slots: list[Pod | None]
    empty_since_t: float | None = None
    deleted_t: float | None = None
    image_ready_t: float | None = None  # when the image is (or will be) on the node


@dataclass(slots=True)
class Pod:
    pid: int
    created_t: float
    ready_t: float
    node: Node
    slot: int
    pause: bool = False
    state: PodState = PodState.STARTING
    replica: Replica | None = None
    drain_deadline_t: float = math.inf
    deleted_t: float | None = None
    phases: dict[str, float] = field(default_factory=dict)

    @property
    def gpu_index(self) -> int:
        return self.slot

    def billed_s(self, now: float) -> float:
        end = self.deleted_t if self.deleted_t is not None else now
        return max(0.0, end - self.created_t)


class Cluster:
    """Nodes, pods and the Deployment's replica count; replicas advance on demand."""

    def __init__(self, config: ClusterConfig, rng: np.random.Generator) -> None:
        self.config = config
        self.rng = rng
        self.nodes: list[Node] = []
        self.pods: list[Pod] = []  # every inference pod ever created
        self.pause_pods: list[Pod] = []
        self.live: list[Pod] = []  # inference pods not deleted (starting, ready, draining)
        self.ready: list[Pod] = []
        self.spec_replicas = 0
        self.scale_events = 0
        self.cold_start_samples: list[float] = []  # creation -> ready, seconds
        self._next_id = 0
        self.capacity_limited = 0
        self.counters = CounterSink()  # every replica's vLLM counters, summed as they grow
        if config.initial_free_slots:
            self._add_node(0.0, free_slots=config.initial_free_slots)

    # ------------------------------------------------------------------ placement
    def _add_node(self, now: float, free_slots: int | None = None) -> Node:
        cfg = self.config
        n = free_slots or cfg.slots_per_node
        node = Node(
            nid=len(self.nodes), ready_t=now, slots=[None] * n, empty_since_t=now, image_ready_t=now
        )
        self.nodes.append(node)
        return node

    def _live_nodes(self) -> list[Node]:
        return [n for n in self.nodes if n.deleted_t is None]

    def _find_slot(self, now: float, pause: bool) -> tuple[Node, int, bool] | None:
        """(node, slot, new_node) for a new pod, in the scheduler's order: a free slot on a
        ready node, then (inference pods only) preempting a pause pod on a ready node, then
        the node still provisioning that is ready soonest (free or pause slot), then a new
        node. A pause pod on a node that is not up yet must not attract a pod that a ready
        node could take."""
        nodes = sorted(self._live_nodes(), key=lambda n: (n.ready_t > now, n.ready_t, n.nid))
        ready = [n for n in nodes if n.ready_t <= now]
        for node in ready if not pause else nodes:
            for i, occ in enumerate(node.slots):
                if occ is None:
                    return node, i, node.ready_t > now
        if not pause:
            # ready nodes have no free slot left: preempt there, then provisioning nodes
            # (soonest first), where a free slot and a pause pod's slot are alike
            for node in nodes:
                up = node.ready_t <= now
                for i, occ in enumerate(node.slots):
                    if occ is None or occ.pause:
                        if occ is not None:
                            self._delete_pause(occ, now)
                        return node, i, not up
        cfg = self.config
        if cfg.max_nodes is not None and len(self._live_nodes()) >= cfg.max_nodes:
            return None
        provision = cfg.cold_start.node_provision.sample(self.rng)
        node = self._add_node(now)
        node.ready_t = now + provision
        node.image_ready_t = None
        return node, 0, True

    def _new_pod(self, now: float, pause: bool) -> Pod | None:
        found = self._find_slot(now, pause)
        if found is None:
            self.capacity_limited += 1
            return None
        node, slot, _ = found
        cs = self.config.cold_start
        start = max(now, node.ready_t)
        # kubelet pulls an image once per node; a second pod waits for the same pull.
        if node.image_ready_t is None:
            node.image_ready_t = start + cs.image_pull_uncached.sample(self.rng)
            image_done = node.image_ready_t
        elif node.image_ready_t <= start:
            image_done = start + cs.image_pull_cached.sample(self.rng)
        else:
            image_done = node.image_ready_t
        phases = cs.sample(self.rng, new_node=False, image_cached=True)
        phases["node_provision"] = start - now
        phases["image_pull"] = image_done - start
        ready_t = now + sum(phases.values())
        if pause:  # the pause pod runs the inference image: it only pulls it
            ready_t = image_done
        pod = Pod(self._next_id, now, ready_t, node, slot, pause=pause, phases=phases)
        self._next_id += 1
        node.slots[slot] = pod
        node.empty_since_t = None
        return pod

    def _free_slot(self, pod: Pod, now: float) -> None:
        node = pod.node
        if node.slots[pod.slot] is pod:
            node.slots[pod.slot] = None
        if all(s is None for s in node.slots):
            node.empty_since_t = now

    def _delete_pause(self, pod: Pod, now: float) -> None:
        pod.state = PodState.DELETED
        pod.deleted_t = now
        self.pause_pods.remove(pod)
        self._free_slot(pod, now)

    # ------------------------------------------------------------------ actuation
    def scale_to(self, desired: int, now: float) -> None:
        """The Deployment's /scale: create pods, or remove newest-first (starting first)."""
        if desired == self.spec_replicas:
            return
        self.scale_events += 1
        self.spec_replicas = desired
        active = [p for p in self.live if p.state is not PodState.DRAINING]
        if desired > len(active):
            for _ in range(desired - len(active)):
                pod = self._new_pod(now, pause=False)
                if pod is None:
                    break
                self.pods.append(pod)
                self.live.append(pod)
        else:
            excess = len(active) - desired
            starting = sorted(
                (p for p in active if p.state is PodState.STARTING), key=lambda p: -p.created_t
            )
            ready = sorted(
                (p for p in active if p.state is PodState.READY), key=lambda p: -p.created_t
            )
            for pod in (starting + ready)[:excess]:
                if pod.state is PodState.STARTING:
                    self._delete(pod, now)
                else:
                    pod.state = PodState.DRAINING
                    pod.drain_deadline_t = now + self.config.drain_timeout_s
                    self.ready.remove(pod)

    def _delete(self, pod: Pod, now: float) -> None:
        pod.state = PodState.DELETED
        pod.deleted_t = now
        self.live.remove(pod)
        if pod in self.ready:
            self.ready.remove(pod)
        self._free_slot(pod, now)

    def reconcile_warm_pool(self, size: int, now: float) -> None:
        """Keep ``size`` pause pods (the warm-pool Deployment recreates preempted ones)."""
        while len(self.pause_pods) > size:
            self._delete_pause(self.pause_pods[-1], now)
        while len(self.pause_pods) < size:
            pod = self._new_pod(now, pause=True)
            if pod is None:
                return
            pod.state = PodState.READY
            self.pause_pods.append(pod)
            self.pods.append(pod)

    # ------------------------------------------------------------------ time
    def tick(self, now: float) -> list[int]:
        """Readiness, drains, node removal at ``now``; returns request ids dropped."""
        dropped: list[int] = []
        for pod in list(self.live):
            if pod.state is PodState.STARTING and pod.ready_t <= now:
                pod.state = PodState.READY
                pod.replica = Replica(self.config.profile, start_s=pod.ready_t, sink=self.counters)
                self.ready.append(pod)
                self.cold_start_samples.append(pod.ready_t - pod.created_t)
            elif pod.state is PodState.DRAINING:
                rep = pod.replica
                assert rep is not None
                rep.run_until(now)
                if rep.idle:
                    self._delete(pod, now)
                elif now >= pod.drain_deadline_t:
                    dropped.extend(rep.in_flight_ids())
                    self._delete(pod, now)
        timeout = self.config.node_idle_timeout_s
        for node in self._live_nodes():
            if node.empty_since_t is not None and now - node.empty_since_t >= timeout:
                node.deleted_t = now
        if self.config.sharing == "time-slicing":
            self._apply_interference()
        return dropped

    def _apply_interference(self) -> None:
        k = self.config.replicas_per_gpu
        groups: dict[tuple[int, int], list[Replica]] = {}
        for pod in self.live:
            if pod.replica is not None:
                groups.setdefault((pod.node.nid, pod.slot // k), []).append(pod.replica)
        for reps in groups.values():
            busy = sum(1 for r in reps if not r.idle)
            scale = max(1, busy) * (1 + self.config.timeslice_overhead * max(0, busy - 1))
            for r in reps:
                r.step_time_scale = scale

    # ------------------------------------------------------------------ accounting
    def gpu_hours(self, now: float) -> float:
        per = self.config.gpus_billed_per_replica
        return sum(p.billed_s(now) for p in self.pods) * per / 3600.0

    def pending_count(self) -> int:
        return sum(1 for p in self.live if p.state is PodState.STARTING)
