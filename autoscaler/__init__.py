"""llm-autoscaler: an autoscaler controller for LLM inference servers on Kubernetes."""

from autoscaler import _lazy_kube

__version__ = "0.1.0"

# kubernetes_asyncio.client's ~1,600 API and model classes load on first use, not all at
# import (37 MB of RSS; see autoscaler/_lazy_kube.py).
_lazy_kube.install()
