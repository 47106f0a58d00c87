"""The built-in exemptions: the GPU components whose own pods need GPU access by design.

Device plugins, drivers, GPU monitors and the like mount /dev, run privileged and set
NVIDIA_VISIBLE_DEVICES=all. Each component below is exempted from the GPU-access rules only
for its own pods, in the namespaces its install docs or charts use: those running under the
service accounts its charts create, or (for components whose pods run under `default`) those
its DaemonSets' controller creates. A namespace's name alone exempts nothing: where tenants
may create namespaces, anyone can make one of these names. Budgets, ResourceQuotas, priority
and schedulability are judged for them as for any pod.

Names are patterns where a chart derives them from its release name; each entry cites where
the names come from. Where a component's accounts could not be established from its charts,
none is listed: the safe side, its pods are judged until the rule set exempts them.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from webhook.namepatterns import NamePatterns

__all__ = ["CLUSTER_NAMESPACES", "COMPONENTS", "Component", "unattended"]

# Namespaces every cluster has from the start: no tenant can create them, and the webhook's
# configuration never sends kube-system at all. Exempt whole, as before.
CLUSTER_NAMESPACES: tuple[str, ...] = ("kube-system", "kube-public", "kube-node-lease")


@dataclass(frozen=True)
class Component:
    """A GPU component, where it installs, and how its own pods are told apart."""

    name: str
    namespaces: tuple[str, ...]
    # Service accounts of its pods (patterns where a chart derives them from the release).
    accounts: tuple[str, ...] = ()
    # DaemonSets whose pods run under `default`: their controller's pods are its own.
    daemonsets: tuple[str, ...] = ()


# The GPU Operator's operands (NVIDIA/gpu-operator, assets/state-*/0100_service_account.yaml,
# manifests/state-*; the driver's per-NVIDIADriver accounts nvidia-<type>-driver-<cr>-<os>
# from internal/state/driver.go; its node-feature-discovery subchart's accounts from
# deployments/gpu-operator/values.yaml). Helm installs it in gpu-operator, OLM in
# nvidia-gpu-operator.
_GPU_OPERATOR = (
    "gpu-operator",
    "nvidia-driver",
    "nvidia-*-driver-*",
    "nvidia-vgpu-manager",
    "nvidia-vgpu-manager-*",
    "nvidia-container-toolkit",
    "nvidia-device-plugin",
    "nvidia-device-plugin-mps-control-daemon",
    "nvidia-gpu-feature-discovery",
    "nvidia-dcgm",
    "nvidia-dcgm-exporter",
    "nvidia-dcgm-dra",
    "nvidia-dcgm-exporter-dra",
    "nvidia-mig-manager",
    "nvidia-node-status-exporter",
    "nvidia-operator-validator",
    "nvidia-dra-validator",
    "nvidia-dra-driver-kubeletplugin",
    "nvidia-sandbox-device-plugin",
    "nvidia-sandbox-validator",
    "nvidia-kata-sandbox-device-plugin",
    "nvidia-kata-manager",
    "nvidia-cc-manager",
    "nvidia-vfio-manager",
    "nvidia-vgpu-device-manager",
    "node-feature-discovery",
)

COMPONENTS: tuple[Component, ...] = (
    Component("NVIDIA GPU Operator", ("gpu-operator", "nvidia-gpu-operator"), _GPU_OPERATOR),
    # NVIDIA device plugin chart (NVIDIA/k8s-device-plugin, deployments/helm): one account,
    # `<fullname>-service-account` (`helm upgrade -i nvdp ... --namespace nvidia-device-plugin`
    # makes nvdp-nvidia-device-plugin-service-account), for the plugin, GPU feature discovery
    # and the MPS daemon; the same chart installs standalone GFD in gpu-feature-discovery. Its
    # node-feature-discovery subchart: master `node-feature-discovery`, worker
    # `<release>-node-feature-discovery-worker`.
    Component(
        "NVIDIA device plugin",
        ("nvidia-device-plugin", "gpu-feature-discovery"),
        (
            "*nvidia-device-plugin-service-account",
            "node-feature-discovery",
            "*node-feature-discovery-worker",
        ),
    ),
    # NVIDIA DRA driver for GPUs (deployments/helm/dra-driver-nvidia-gpu, templates/_helpers.tpl):
    # `<fullname>-service-account-kubeletplugin` and `-controller`; before its move the chart
    # was nvidia-dra-driver-gpu, installed in the namespace of that name. ComputeDomain daemons
    # run as compute-domain-daemon-service-account (templates/compute-domain-daemon.tmpl.yaml).
    Component(
        "NVIDIA DRA driver",
        ("dra-driver-nvidia-gpu", "nvidia-dra-driver-gpu"),
        (
            "*dra-driver-nvidia-gpu-service-account-*",
            "*nvidia-dra-driver-gpu-service-account-*",
            "compute-domain-daemon-service-account",
        ),
    ),
    # NVIDIA Network Operator (Mellanox/network-operator, manifests/state-*; Helm
    # `-n network-operator`, OLM `nvidia-network-operator`): its node agents' accounts, its
    # node-feature-discovery subchart's, and the two DaemonSets that run under `default`. The
    # accounts of its SR-IOV network operator subchart could not be established: not here.
    Component(
        "NVIDIA Network Operator",
        ("network-operator", "nvidia-network-operator"),
        (
            "ofed-driver",
            "rdma-shared",
            "network-operator-sriov-device-plugin",
            "multus",
            "ipoib-cni",
            "nic-feature-discovery",
            "nic-configuration-operator",
            "nv-ipam-node",
            "spectrum-x-operator",
            "node-feature-discovery",
        ),
        ("cni-plugins-ds", "doca-telemetry-service"),
    ),
    # Node Feature Discovery (kubernetes-sigs/node-feature-discovery): kustomize nfd-worker and
    # nfd-topology-updater; Helm `<release>-node-feature-discovery-worker` and
    # `-topology-updater`. OpenShift's NFD operator (openshift-nfd) uses nfd-worker too.
    Component(
        "Node Feature Discovery",
        ("node-feature-discovery", "openshift-nfd"),
        (
            "nfd-worker",
            "nfd-topology-updater",
            "*node-feature-discovery-worker",
            "*node-feature-discovery-topology-updater",
        ),
    ),
    # AMD GPU Operator (ROCm/gpu-operator, helm-charts-k8s/templates/serviceaccount.yaml and
    # the OLM bundle): fixed names; Helm installs it in kube-amd-gpu, OLM in openshift-amd-gpu.
    Component(
        "AMD GPU Operator",
        ("kube-amd-gpu", "openshift-amd-gpu"),
        (
            "amd-gpu-operator-kmm-device-plugin",
            "amd-gpu-operator-kmm-module-loader",
            "amd-gpu-operator-dra-driver",
            "amd-gpu-operator-node-labeller",
            "amd-gpu-operator-metrics-exporter",
            "amd-gpu-operator-metrics-exporter-rbac-proxy",
            "amd-gpu-operator-test-runner",
            "amd-gpu-operator-config-manager",
            "amd-gpu-operator-utils-container",
        ),
    ),
    # Intel device plugins operator (intel/intel-device-plugins-for-kubernetes): its GPU
    # plugin DaemonSet, `intel-gpu-plugin-<GpuDevicePlugin name>` (pkg/controllers/gpu), runs
    # under `default`.
    Component(
        "Intel device plugins operator",
        ("inteldeviceplugins-system",),
        daemonsets=("intel-gpu-plugin", "intel-gpu-plugin-*"),
    ),
    # Intel Gaudi device plugin (HabanaAI/habanalabs-k8s-device-plugin,
    # habana-k8s-device-plugin.yaml): a DaemonSet under `default` in habana-system.
    Component(
        "Intel Gaudi device plugin",
        ("habana-system",),
        daemonsets=("habanalabs-device-plugin-daemonset",),
    ),
    # The Intel Gaudi Base Operator (habana-ai-operator, Helm and OLM): the accounts and
    # DaemonSets of its operands could not be established from anything published, so none of
    # its pods is exempt (the safe side); exempt them by name in exemptions.workloads. Listed
    # so that rule files removing the namespace still load.
    Component("Intel Gaudi Base Operator", ("habana-ai-operator",)),
    # KAI Scheduler (NVIDIA/KAI-Scheduler): reservation pods run as kai-resource-reservation
    # (deployments/kai-scheduler/values.yaml), scaling pods as kai-scale-adjust (the operator's
    # default) or scaling-pod (the node scale adjuster's own flag default); Run:ai before KAI
    # 0.6 kept reservation pods in runai-reservation as runai-reservation
    # (docs/migrationguides/v0.6.0/values.yaml).
    Component(
        "KAI Scheduler reservations", ("kai-resource-reservation",), ("kai-resource-reservation",)
    ),
    Component(
        "KAI Scheduler scale adjuster", ("kai-scale-adjust",), ("kai-scale-adjust", "scaling-pod")
    ),
    Component("Run:ai reservations", ("runai-reservation",), ("runai-reservation",)),
    # This webhook (manifests/base): the apiserver never sends its namespace.
    Component("gpu-admission", ("gpu-admission",), ("gpu-admission",)),
)


def unattended(
    components: Iterable[Component],
    namespaces: Collection[str],
    pods: Mapping[str, Iterable[tuple[str, str]]],
) -> list[str]:
    """One line for each built-in exempt namespace that exists (`namespaces`) but runs no pod of
    its component (`pods`: namespace -> (service account, pod name) of its pods). A tenant may
    have created it: its own pods under the component's account names would then reach GPUs.
    A DaemonSet's pods are named after it (`<name>-<suffix>`)."""
    out = []
    for c in components:
        accounts = NamePatterns(c.accounts)
        made = NamePatterns(f"{d}-*" for d in c.daemonsets)
        for namespace in c.namespaces:
            if namespace not in namespaces:
                continue
            running = pods.get(namespace, ())
            if any(accounts.matches(a) or made.matches(p) for a, p in running):
                continue
            out.append(
                f"built-in exempt namespace {namespace} exists but runs no pod of {c.name}: if "
                "a tenant created it, its pods under the component's account names skip the "
                "GPU-access rules; take the exemption away (exemptions.remove.namespaces: "
                f"[{namespace}], or exemptions.builtIn: false)"
            )
    return out
