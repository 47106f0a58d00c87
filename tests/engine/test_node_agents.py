"""Device plugins and node agents: what looks like one, and the denial that says how to let
it run (golden cases `access-device-plugin-*` show whole objects)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.checks.isolation import node_agent
from webhook.engine.compiled import compile_rules
from webhook.engine.pipeline import evaluate
from webhook.engine.podviews import pod_views
from webhook.engine.subject import subject_for
from webhook.ruleset.models import RuleSet

RULES = compile_rules(RuleSet())


def daemonset(
    spec: dict[str, Any], labels: dict[str, str] | None = None, kind: str = "DaemonSet"
) -> dict[str, Any]:
    """A DaemonSet (or another controller, or a bare Pod) running `spec`."""
    template = {"metadata": {"labels": labels or {}}, "spec": spec}
    if kind == "Pod":
        return {"apiVersion": "v1", "kind": "Pod", **template}
    return {"apiVersion": "apps/v1", "kind": kind, "spec": {"template": template}}


def container(name: str = "agent", image: str = "example.com/agent:1", **extra: Any) -> Any:
    return {"name": name, "image": image, **extra}


def host(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "hostPath": {"path": path}}


def why(obj: dict[str, Any]) -> str | None:
    group = "apps" if obj["kind"] != "Pod" else ""
    (view,) = pod_views(obj, group=group, kind=obj["kind"], is_gpu=RULES.base.is_gpu)
    return node_agent(view)


@pytest.mark.parametrize(
    "spec,labels,expected",
    [
        # kubelet sockets: device plugins, DRA and CSI plugins register there; monitors read
        # the pod-resources API
        (
            {
                "containers": [container()],
                "volumes": [host("dp", "/var/lib/kubelet/device-plugins/")],
            },
            None,
            "it mounts /var/lib/kubelet/device-plugins",
        ),
        (
            {
                "containers": [container()],
                "volumes": [host("p", "/var/lib/kubelet/plugins/gpu.nvidia.com")],
            },
            None,
            "it mounts /var/lib/kubelet/plugins/gpu.nvidia.com",
        ),
        (
            {"containers": [container(image="intel/intel-gpu-plugin:0.31.0")]},
            None,
            "its image 'intel/intel-gpu-plugin:0.31.0'",
        ),
        (
            {"containers": [container(image="nvcr.io/nvidia/driver:550.127.08-ubuntu22.04")]},
            None,
            "its image 'nvcr.io/nvidia/driver:550.127.08-ubuntu22.04'",
        ),
        ({"containers": [container(name="gpu-feature-discovery")]}, None, "its container"),
        (
            {"containers": [container()]},
            {"app.kubernetes.io/name": "dcgm-exporter"},
            "its label app.kubernetes.io/name=dcgm-exporter",
        ),
        # not an agent: nothing says so, or not on every node
        ({"containers": [container()], "volumes": [host("dev", "/dev")]}, None, None),
        (
            {"containers": [container()], "volumes": [host("k", "/var/lib/kubelet/pods")]},
            None,
            None,
        ),
    ],
)
def test_what_looks_like_a_device_plugin_or_node_agent(
    spec: dict[str, Any], labels: dict[str, str] | None, expected: str | None
) -> None:
    found = why(daemonset(spec, labels))
    if expected is None:
        assert found is None
    else:
        assert found is not None and found.startswith(expected)


def test_only_a_daemonset_or_a_pod_it_owns_is_an_agent() -> None:
    spec = {"containers": [container(image="nvcr.io/nvidia/k8s-device-plugin:v0.17.1")]}
    assert why(daemonset(spec, kind="Deployment")) is None
    assert why(daemonset(spec, kind="Pod")) is None
    owned = daemonset(spec, kind="Pod")
    owned["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "nvdp", "uid": "1"}]
    assert why(owned) is not None


def test_a_forged_volume_does_not_crash_the_guess() -> None:
    spec = {"containers": [container()], "volumes": [{"name": "x", "hostPath": "/dev"}]}
    assert why(daemonset(spec)) is None


def _denial(obj: dict[str, Any], namespace: str) -> str:
    decision = evaluate(subject_for(obj, namespace=namespace), RULES, None)
    assert not decision.allowed
    return decision.message()


def named(obj: dict[str, Any], name: str) -> dict[str, Any]:
    return {**obj, "metadata": {"name": name}}


def test_an_agent_is_told_to_exempt_its_daemonset_never_its_account_or_namespace() -> None:
    """Any pod of the namespace may name an account that exists, and the namespace is shared:
    the advice names the DaemonSet, which only whoever may write DaemonSets there controls."""
    spec = {
        "serviceAccountName": "nvidia-device-plugin",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [container(securityContext={"privileged": True})],
        "volumes": [host("dp", "/var/lib/kubelet/device-plugins")],
    }
    message = _denial(named(daemonset(spec), "nvidia-device-plugin"), "gpu-infra")
    assert (
        "Fix: exempt it in the rule set with exemptions.workloads: [{kind: DaemonSet, "
        "namespace: gpu-infra, name: nvidia-device-plugin}] (this trusts whoever may create or "
        "update DaemonSets in gpu-infra; its pods are exempt only as the DaemonSet controller "
        "creates them)"
    ) in message
    assert "If it is not one: remove spec.template.spec.containers[0].securityContext" in message
    assert "serviceAccounts" not in message and "exemptions.namespaces" not in message


def test_a_workload_keeps_the_remove_advice() -> None:
    spec = {
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        "containers": [container(securityContext={"privileged": True})],
    }
    for kind in ("Deployment", "DaemonSet"):
        message = _denial(daemonset(spec, kind=kind), "ml-team")
        assert "Fix: remove spec.template.spec.containers[0].securityContext.privileged" in message
        assert "exempt it in the rule set" not in message


def test_a_node_agent_that_can_reach_gpu_nodes_is_denied_not_silently_given_void() -> None:
    """`void` would leave a device plugin or monitor seeing no GPU, and nobody would know
    why: such a pod keeps its image's value and the denial names the exemption instead. Any
    other pod that can reach GPU nodes gets `void` as before."""
    gpu_taint = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    agent = daemonset(
        {
            "tolerations": gpu_taint,
            "containers": [container("exporter", "nvcr.io/nvidia/k8s/dcgm-exporter:3.3.5")],
        }
    )
    decision = evaluate(subject_for(agent, namespace="monitoring"), RULES, None)
    assert not decision.patch
    assert {f.rule for f in decision.denials} == {"visible-devices"}
    assert "exemptions.workloads: [{kind: DaemonSet, namespace: monitoring" in decision.message()

    plain = daemonset({"tolerations": gpu_taint, "containers": [container("log", "fluent:3")]})
    # A CSI node plugin registers through the kubelet's plugin directories too, but nothing
    # says GPU: it gets `void` like any pod that can reach GPU nodes.
    csi = daemonset(
        {
            "tolerations": [{"operator": "Exists"}],
            "containers": [container("registrar", "registry.k8s.io/sig-storage/csi-node:2")],
            "volumes": [host("reg", "/var/lib/kubelet/plugins_registry")],
        }
    )
    for obj in (plain, csi):
        decision = evaluate(subject_for(obj, namespace="monitoring"), RULES, None)
        assert decision.allowed, decision.message()
        assert [op["value"] for op in decision.patch] == [
            [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
        ]


# Where each component's own install docs or chart put it, under its own account or as its own
# DaemonSet (webhook/ruleset/components.py cites them): its privileged node agent runs there
# from the first day, never judged for GPU access.
OWN_PODS = [
    ("gpu-operator", "nvidia-device-plugin", ""),
    ("nvidia-gpu-operator", "nvidia-nvidia-driver-default-ubuntu22.04", ""),
    ("nvidia-device-plugin", "nvdp-nvidia-device-plugin-service-account", ""),
    ("gpu-feature-discovery", "nvdp-nvidia-device-plugin-service-account", ""),
    ("dra-driver-nvidia-gpu", "dra-driver-nvidia-gpu-service-account-kubeletplugin", ""),
    ("nvidia-dra-driver-gpu", "nvidia-dra-driver-gpu-service-account-kubeletplugin", ""),
    ("network-operator", "ofed-driver", ""),
    ("node-feature-discovery", "nfd-node-feature-discovery-worker", ""),
    ("openshift-amd-gpu", "amd-gpu-operator-kmm-device-plugin", ""),
    ("inteldeviceplugins-system", "", "intel-gpu-plugin-gpudeviceplugin-sample"),
    ("habana-system", "", "habanalabs-device-plugin-daemonset"),
    ("kai-resource-reservation", "kai-resource-reservation", ""),
    ("kai-scale-adjust", "scaling-pod", ""),
    ("runai-reservation", "runai-reservation", ""),
]
PLUGIN = {
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
    "containers": [
        container(
            securityContext={"privileged": True},
            env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
        )
    ],
    "volumes": [host("dp", "/var/lib/kubelet/device-plugins"), host("dev", "/dev")],
}


@pytest.mark.parametrize("namespace,account,daemonset_name", OWN_PODS)
def test_a_gpu_component_in_its_documented_namespace_runs_untouched(
    namespace: str, account: str, daemonset_name: str
) -> None:
    spec = {**PLUGIN, "serviceAccountName": account} if account else PLUGIN
    obj = named(daemonset(spec), daemonset_name or "agent")
    decision = evaluate(subject_for(obj, namespace=namespace), RULES, None)
    assert decision.allowed and not decision.patch and not decision.judged


@pytest.mark.parametrize("namespace,account,daemonset_name", OWN_PODS)
def test_another_pod_in_a_component_namespace_is_judged(
    namespace: str, account: str, daemonset_name: str
) -> None:
    """The namespace's name alone exempts nothing: a tenant may have created it."""
    obj = named(daemonset({**PLUGIN, "serviceAccountName": "tenant"}), "mine")
    decision = evaluate(subject_for(obj, namespace=namespace), RULES, None)
    assert not decision.allowed
    assert {f.rule for f in decision.denials} >= {"privileged-gpu", "host-gpu-devices"}


def test_a_component_applied_into_default_is_denied_naming_its_daemonset() -> None:
    """Static GPU feature discovery, dcgm-exporter and Intel's GPU plugin land in the current
    namespace under its `default` account; neither `default` nor its accounts are exempt."""
    message = _denial(named(daemonset(PLUGIN), "gpu-feature-discovery"), "default")
    assert "exemptions.workloads: [{kind: DaemonSet, namespace: default, name: " in message
    assert "serviceAccounts" not in message
