"""Names shared by the controller, the CRD, the local API endpoint and the manifests."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

CRD_GROUP: Final = "autoscaling.llmscaler.io"
CRD_VERSION: Final = "v1alpha1"
CRD_KIND: Final = "LLMAutoscaler"
CRD_PLURAL: Final = "llmautoscalers"
CRD_SHORT_NAME: Final = "llmas"
# Local/demo only: a pod whose metrics listen on their own port of 127.0.0.1.
METRICS_PORT_ANNOTATION: Final = "autoscaling.llmscaler.io/metrics-port"
COMPONENT: Final = "llm-autoscaler"
# Sleepers (docs/policy.md#sleepers): a replica in vLLM sleep mode carries this label
# ("true"), so whatever routes requests can leave it out, and the annotation says since
# when (unix seconds) for the TTL. Lower deletion cost: the ReplicaSet removes it first.
SLEEPING_LABEL: Final = "autoscaling.llmscaler.io/sleeping"
# For a plain Service (docs/activator.md, "A plain Service and sleepers"): the pod template
# sets it to "true", the controller "false" before it puts a pod to sleep and "true" once a
# wake has completed, so a Service selecting awake="true" never lists a sleeper.
AWAKE_LABEL: Final = "autoscaling.llmscaler.io/awake"
ASLEEP_SINCE_ANNOTATION: Final = "autoscaling.llmscaler.io/asleep-since"
POD_DELETION_COST_ANNOTATION: Final = "controller.kubernetes.io/pod-deletion-cost"
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
    if not isinstance(path, str) or not path.startswith("/"):
        return "must be a path starting with '/'"
    if len(path) > METRICS_PATH_MAX:
        return f"must be at most {METRICS_PATH_MAX} characters"
    if re.fullmatch(METRICS_PATH_PATTERN[1:-1], path) is None:
        return "must not contain spaces or control characters (CR, LF, tab, ...)"
    return None


# Label keys and values as Kubernetes validates them (apimachinery validation.IsQualifiedName
# and IsValidLabelValue): a selector the API server would refuse is refused when written.
_LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_NAME_MAX = 63
DNS_SUBDOMAIN_MAX = 253


def label_key_problem(key: object) -> str | None:
    """Why ``key`` is not a label key (None: it is): ``[prefix/]name``, the name 1-63
    alphanumerics, '-', '_', '.' starting and ending alphanumeric, the optional prefix a
    DNS subdomain of at most 253 characters."""
    if not isinstance(key, str):
        return "must be a string"
    prefix, slash, name = key.rpartition("/")
    if slash and (
        not prefix or len(prefix) > DNS_SUBDOMAIN_MAX or not _DNS_SUBDOMAIN.fullmatch(prefix)
    ):
        return (
            f"prefix {prefix!r} must be a DNS subdomain (lowercase alphanumerics, '-', '.', "
            f"at most {DNS_SUBDOMAIN_MAX} characters)"
        )
    if not name or len(name) > LABEL_NAME_MAX or not _LABEL_NAME.fullmatch(name):
        return (
            f"name {name!r} must be 1-{LABEL_NAME_MAX} characters of alphanumerics, '-', '_' "
            "or '.', starting and ending with an alphanumeric"
        )
    return None


def label_value_problem(value: object) -> str | None:
    """Why ``value`` is not a label value (None: it is): empty, or at most 63
    alphanumerics, '-', '_', '.' starting and ending alphanumeric."""
    if not isinstance(value, str):
        return "must be a string"
    if value and (len(value) > LABEL_NAME_MAX or not _LABEL_NAME.fullmatch(value)):
        return (
            f"must be empty or at most {LABEL_NAME_MAX} characters of alphanumerics, '-', "
            "'_' or '.', starting and ending with an alphanumeric"
        )
    return None


def match_labels_problems(labels: Mapping[Any, Any], field: str) -> list[str]:
    """One ``field.<key>: value ...: rule`` message per invalid key or value."""
    out = []
    for key, value in labels.items():
        if (why := label_key_problem(key)) is not None:
            out.append(f"{field}: key {key!r} is not a label key: {why}")
        elif (why := label_value_problem(value)) is not None:
            out.append(f"{field}.{key}: value {value!r} is not a label value: {why}")
    return out
