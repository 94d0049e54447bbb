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
# A target's metricsPath: a URL path without whitespace or control characters (a CR/LF
# would split the scrape's request line). The CRD's pattern is this one (RE2: ``$`` is
# the end of the text); the REST API and the file store check the same with fullmatch.
METRICS_PATH_PATTERN: Final = r"^/[^\x00-\x20\x7f]*$"
METRICS_PATH_MAX: Final = 1024
# A Kubernetes object name (RFC 1123 subdomain), as the REST API checks scaleTargetRef.name.
OBJECT_NAME_PATTERN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
LABEL_VALUE_PATTERN: Final = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
ENGINE_NAMES: Final = ("auto", "vllm", "sglang", "tgi", "trtllm")


def metrics_path_problem(path: object) -> str | None:
    """Why ``path`` is not a metricsPath (None: it is)."""
    import re

    if not isinstance(path, str) or not path.startswith("/"):
        return "must be a path starting with '/'"
    if len(path) > METRICS_PATH_MAX:
        return f"must be at most {METRICS_PATH_MAX} characters"
    if re.fullmatch(METRICS_PATH_PATTERN[1:-1], path) is None:
        return "must not contain spaces or control characters (CR, LF, tab, ...)"
    return None
