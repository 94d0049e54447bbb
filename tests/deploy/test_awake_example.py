"""The shared-GPU example keeps sleepers, so its Service must not route to them: it
selects ``autoscaling.llmscaler.io/awake: "true"``, the pod template starts pods with that
value, and vLLM runs with sleep mode and its dev-mode routes (docs/activator.md, "A plain
Service and sleepers")."""

from __future__ import annotations

from autoscaler.names import AWAKE_LABEL
from tests.deploy.manifests import DEPLOY, load_docs


def test_the_sleeper_example_service_selects_awake_pods_and_the_template_starts_awake() -> None:
    docs = load_docs(DEPLOY / "examples" / "vllm-llama3-8b-shared-gpu.yaml")
    by_kind = {d["kind"]: d for d in docs}
    assert by_kind["LLMAutoscaler"]["spec"]["sleep"]["maxSleeping"] >= 1
    assert by_kind["Service"]["spec"]["selector"][AWAKE_LABEL] == "true"
    template = by_kind["Deployment"]["spec"]["template"]
    labels = template["metadata"]["labels"]
    assert labels[AWAKE_LABEL] == "true"
    # the Deployment's selector must not include it, or a sleeper would leave its ReplicaSet
    assert AWAKE_LABEL not in by_kind["Deployment"]["spec"]["selector"]["matchLabels"]
    (vllm,) = template["spec"]["containers"]
    assert "--enable-sleep-mode" in vllm["args"]
    assert {"name": "VLLM_SERVER_DEV_MODE", "value": "1"} in vllm["env"]
