"""The demo's load: a ramp of long prompts that fills the KV cache, then a step on top.

Emulated seconds from the moment both fleets have a ready replica:

- **ramp** (``[0, RAMP_S)``): long-prompt requests (RAG-like: prompts around 4k tokens,
  outputs around 300) whose rate rises linearly from ``RAMP_START_PER_S`` to
  ``RAMP_PEAK_PER_S``. Each one holds ~4.3k tokens of KV cache for its whole decode, and
  its prefill is what makes first tokens late: the engine's own signals (prompt tokens/s,
  running, KV usage) climb with the rate before any queue forms, while a policy that
  reads only the queue (and KV at 0.8) reacts once requests already wait.
- **step** (``[RAMP_S, RAMP_S + STEP_S)``): the ramp's peak rate holds and the bundled
  burst of the Azure code trace (or ``--trace``) arrives on top, at ``--load`` times its
  rate. A step is faster than a cold start (60 s): no autoscaler adds a replica in time,
  only replicas already running absorb it.
- then nothing, until the end: the fleets scale down (GPU-hours count until the end).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from autoscaler.sim.traces import Trace, from_arrays

RAMP_S = 200.0  # emulated seconds
STEP_S = 110.0
RAMP_START_PER_S = 0.5
RAMP_PEAK_PER_S = 10.0
PROMPT_MEDIAN_TOKENS = 4000.0
PROMPT_MAX_TOKENS = 7000  # + outputs within Llama-3's 8192-token context
OUTPUT_MEDIAN_TOKENS = 300.0
OUTPUT_MAX_TOKENS = 700

Phase = Literal["ramp", "step", "after"]
PHASE_NOTES: dict[str, str] = {
    "ramp": "long prompts, rising rate: prompt tokens/s and KV climb before a queue",
    "step": (
        "code-trace burst on top of the ramp's peak: faster than a cold start, so no "
        "autoscaler adds a replica in time; only replicas already running absorb it"
    ),
}


@dataclass(frozen=True)
class DemoLoad:
    trace: Trace
    ramp_s: float = RAMP_S
    step_s: float = STEP_S

    def phase(self, at_s: float) -> Phase:
        """The phase of a request scheduled ``at_s`` emulated seconds into the load."""
        if at_s < self.ramp_s:
            return "ramp"
        return "step" if at_s < self.ramp_s + self.step_s else "after"


def _lognormal(rng: np.random.Generator, n: int, median: float, sigma: float, hi: int) -> list[int]:
    draw = np.rint(rng.lognormal(math.log(median), sigma, size=n))
    return [int(v) for v in np.clip(draw, 1, hi)]


def ramp_requests(
    duration_s: float, start_per_s: float, peak_per_s: float, hold_s: float, seed: int = 11
) -> Trace:
    """Poisson arrivals at a rate rising linearly over ``duration_s``, then ``hold_s`` at
    the peak (inhomogeneous Poisson by thinning); long prompts, short outputs."""
    rng = np.random.default_rng(seed)
    total_s = duration_s + hold_s
    n = rng.poisson(peak_per_s * total_s)
    t = np.sort(rng.random(n) * total_s)
    rate = np.where(
        t < duration_s, start_per_s + (peak_per_s - start_per_s) * t / duration_s, peak_per_s
    )
    t = t[rng.random(n) < rate / peak_per_s]
    prompt = _lognormal(rng, len(t), PROMPT_MEDIAN_TOKENS, 0.25, PROMPT_MAX_TOKENS)
    output = _lognormal(rng, len(t), OUTPUT_MEDIAN_TOKENS, 0.5, OUTPUT_MAX_TOKENS)
    return from_arrays("ramp (long prompts)", t, prompt, output)


def demo_load(burst: Trace) -> DemoLoad:
    """The ramp, then ``burst``'s first `STEP_S` seconds on top of the ramp's peak."""
    ramp = ramp_requests(RAMP_S, RAMP_START_PER_S, RAMP_PEAK_PER_S, hold_s=STEP_S)
    step = burst.window(0.0, STEP_S)
    arrival = np.concatenate([ramp.arrival_s, step.arrival_s + RAMP_S])
    prompt = np.concatenate([ramp.prompt_tokens, step.prompt_tokens])
    output = np.concatenate([ramp.output_tokens, step.output_tokens])
    trace = from_arrays(f"ramp then step ({burst.name})", arrival, prompt.tolist(), output.tolist())
    return DemoLoad(trace)
