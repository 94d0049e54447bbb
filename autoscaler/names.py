"""Names shared by the controller, the CRD, the local API endpoint and the manifests."""

from __future__ import annotations

from typing import Final

CRD_GROUP: Final = "autoscaling.llmscaler.io"
CRD_VERSION: Final = "v1alpha1"
CRD_KIND: Final = "LLMAutoscaler"
CRD_PLURAL: Final = "llmautoscalers"
CRD_SHORT_NAME: Final = "llmas"
# Local/demo only: a pod whose metrics listen on their own port of 127.0.0.1.
METRICS_PORT_ANNOTATION: Final = "autoscaling.llmscaler.io/metrics-port"
COMPONENT: Final = "llm-autoscaler"
