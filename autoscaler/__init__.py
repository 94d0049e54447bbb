"""llm-autoscaler: an autoscaler controller for LLM inference servers on Kubernetes."""

__version__ = "0.1.0"
