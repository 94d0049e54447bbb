"""The keda overlay applies on its own and hands KEDA what it needs (issue 15 item 8)."""

from __future__ import annotations

from tests.deploy.manifests import DEPLOY, load_docs, render

KEDA = DEPLOY / "overlays" / "keda"


def test_the_overlay_creates_every_namespace_its_objects_live_in() -> None:
    objs = render(KEDA)
    created = {o["metadata"]["name"] for o in objs if o["kind"] == "Namespace"}
    used = {o["metadata"]["namespace"] for o in objs if o["metadata"].get("namespace")}
    assert used <= created, f"namespaces used but not created: {sorted(used - created)}"


def test_keda_llmautoscaler_is_the_example_in_mode_keda() -> None:
    (keda,) = load_docs(KEDA / "llmautoscaler.yaml")
    example = next(
        d
        for d in load_docs(DEPLOY / "examples" / "vllm-llama3-8b-full-gpu.yaml")
        if d["kind"] == "LLMAutoscaler"
    )
    assert example["spec"]["mode"] == "direct"
    assert keda["spec"]["mode"] == "keda"
    assert {**keda["spec"], "mode": "direct"} == example["spec"]
    assert keda["metadata"] == example["metadata"]
    (scaled,) = [o for o in render(KEDA) if o["kind"] == "ScaledObject"]
    assert scaled["spec"]["scaleTargetRef"]["name"] == keda["spec"]["scaleTargetRef"]["name"]
    assert scaled["metadata"]["namespace"] == keda["metadata"]["namespace"]


def test_metrics_api_trigger_gets_the_read_only_token() -> None:
    docs = load_docs(KEDA / "scaledobject-metrics-api.yaml")
    (auth,) = [d for d in docs if d["kind"] == "ClusterTriggerAuthentication"]
    (ref,) = auth["spec"]["secretTargetRef"]
    assert ref["name"] == "llm-autoscaler-read-token"
    (dep,) = [o for o in render(DEPLOY / "base") if o["kind"] == "Deployment"]
    env = {e["name"]: e for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    read = env["AUTOSCALER_API_READ_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert (read["name"], read.get("optional")) == ("llm-autoscaler-read-token", True)
    write = env["AUTOSCALER_API_TOKEN"]["valueFrom"]["secretKeyRef"]
    assert write["name"] != ref["name"]
