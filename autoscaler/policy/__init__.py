"""Pure decision core: desired replicas from signals (HPA/KEDA/KPA semantics + prediction)."""

from autoscaler.policy.core import decide
from autoscaler.policy.schema import Policy, load_policy

__all__ = ["Policy", "decide", "load_policy"]
