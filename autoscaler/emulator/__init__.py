"""vLLM-compatible emulator: OpenAI API + /metrics driven by the simulator's replica model."""

from autoscaler.emulator.clock import EmuClock
from autoscaler.emulator.fleet import EmulatorFleet, QueueJump
from autoscaler.emulator.server import EmulatedReplica, ReplicaConfig

__all__ = ["EmuClock", "EmulatedReplica", "EmulatorFleet", "QueueJump", "ReplicaConfig"]
