"""Policy stores: where targets and their policies live (a file locally, the CRD in-cluster)."""

from autoscaler.store.base import PolicyStore, StoredTarget
from autoscaler.target import TargetSpec

__all__ = ["PolicyStore", "StoredTarget", "TargetSpec"]
