"""The controller's NetworkPolicy: only KEDA's operator and Prometheus get in, each only on
the ports it needs (evaluated with NetworkPolicy's own from/ports semantics)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.deploy.manifests import DEPLOY, OVERLAYS, Obj, pod_labels, render, selects

CONTROLLER_NS = "llm-autoscaler"
KEDA = ({"kubernetes.io/metadata.name": "keda"}, {"app.kubernetes.io/name": "keda-operator"})
PROMETHEUS = (
    {"kubernetes.io/metadata.name": "monitoring"},
    {"app.kubernetes.io/name": "prometheus", "app.kubernetes.io/instance": "kps"},
)
# Pods that must not get in: a vLLM pod next to its model, a pod in KEDA's namespace that is
# not the operator, anything in the controller's own namespace, a "prometheus" elsewhere.
OUTSIDERS = {
    "vllm pod": ({"kubernetes.io/metadata.name": "llm"}, {"app": "vllm-llama3-8b"}),
    "keda admission webhook": (KEDA[0], {"app.kubernetes.io/name": "keda-admission-webhooks"}),
    "same namespace": (
        {"kubernetes.io/metadata.name": CONTROLLER_NS},
        {"app.kubernetes.io/name": "debug"},
    ),
    "prometheus elsewhere": ({"kubernetes.io/metadata.name": "llm"}, PROMETHEUS[1]),
}


def _matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    if selector is None:
        return True
    assert set(selector) <= {"matchLabels"}, "only matchLabels is evaluated here"
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peer_matches(peer: Obj, ns_labels: dict[str, str], pod: dict[str, str]) -> bool:
    own_ns = ns_labels.get("kubernetes.io/metadata.name") == CONTROLLER_NS
    if "namespaceSelector" not in peer and not own_ns:  # podSelector alone: own namespace
        return False
    return _matches(peer.get("namespaceSelector"), ns_labels) and _matches(
        peer.get("podSelector"), pod
    )


def admits(policy: Obj, source: tuple[dict[str, str], dict[str, str]], port: str) -> bool:
    """True when one ingress rule admits ``source`` (namespace labels, pod labels) on
    the named container ``port``: a rule's peers are ORed, its from and ports ANDed."""
    for rule in policy["spec"].get("ingress", []):
        peers = rule.get("from")
        ports = rule.get("ports")
        peer_ok = peers is None or any(_peer_matches(p, *source) for p in peers)
        port_ok = ports is None or any(p.get("port") == port for p in ports)
        if peer_ok and port_ok:
            return True
    return False


def _policy_and_controller(objs: list[Obj]) -> tuple[Obj, Obj]:
    (policy,) = [o for o in objs if o["kind"] == "NetworkPolicy"]
    (controller,) = [o for o in objs if o["kind"] == "Deployment"]
    return policy, controller


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_overlay_isolates_the_controller_pods(overlay: str) -> None:
    policy, controller = _policy_and_controller(render(DEPLOY / "overlays" / overlay))
    assert policy["metadata"]["namespace"] == controller["metadata"]["namespace"] == CONTROLLER_NS
    assert selects(policy["spec"]["podSelector"]["matchLabels"], pod_labels(controller))
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_keda_reaches_grpc_and_http_prometheus_only_http() -> None:
    policy, controller = _policy_and_controller(render(DEPLOY / "base"))
    container_ports = {
        p["name"] for p in controller["spec"]["template"]["spec"]["containers"][0]["ports"]
    }
    assert container_ports == {"http", "grpc"}
    rule_ports = {p["port"] for r in policy["spec"]["ingress"] for p in r["ports"]}
    assert rule_ports <= container_ports  # a named port that does not exist admits nothing
    assert admits(policy, KEDA, "grpc")
    assert admits(policy, KEDA, "http")  # the metrics-api trigger
    assert admits(policy, PROMETHEUS, "http")
    assert not admits(policy, PROMETHEUS, "grpc")


@pytest.mark.parametrize("who", sorted(OUTSIDERS))
def test_other_pods_are_refused_on_every_port(who: str) -> None:
    policy, _ = _policy_and_controller(render(DEPLOY / "base"))
    for port in ("http", "grpc"):
        assert not admits(policy, OUTSIDERS[who], port), (who, port)


def test_each_peer_pins_namespace_and_pod_together() -> None:
    """A namespaceSelector and a podSelector in separate list items are ORed: the whole
    namespace, or that pod label anywhere (labels anyone can set on their own pods)."""
    policy, _ = _policy_and_controller(render(DEPLOY / "base"))
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            assert {"namespaceSelector", "podSelector"} <= set(peer), peer
