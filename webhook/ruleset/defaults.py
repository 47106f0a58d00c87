"""The built-in defaults that are lists of names, kept apart from the models that use them:
the GPU resource names and the exempt namespaces (where GPU operators and device plugins
install). The host paths that reach GPUs are in `hostpaths`."""

from __future__ import annotations

__all__ = ["DEFAULT_EXEMPT_NAMESPACES", "DEFAULT_GPU_RESOURCES", "DEFAULT_PROVISIONING_NAMESPACES"]

DEFAULT_GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/*",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "*.shared",
]

# Where GPU components install by their own docs or charts: they mount /dev, run privileged and
# set NVIDIA_VISIBLE_DEVICES=all by design, or (reservation pods) hold whole GPUs on purpose.
# Components whose plain manifests land in the current namespace (static GPU feature discovery,
# dcgm-exporter, NVIDIA's MIG manager example, Intel's GPU plugin kustomize: usually `default`)
# are not here: a namespace every user shares is never exempt; their denial names the
# service-account exemption to add instead.
DEFAULT_EXEMPT_NAMESPACES = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    # NVIDIA GPU Operator (Helm) and on OpenShift (OLM).
    "gpu-operator",
    "nvidia-gpu-operator",
    # NVIDIA device plugin Helm chart: `helm upgrade -i nvdp nvdp/nvidia-device-plugin
    # --namespace nvidia-device-plugin --create-namespace` (NVIDIA/k8s-device-plugin, README.md).
    "nvidia-device-plugin",
    # Standalone GPU feature discovery, Helm: `--namespace gpu-feature-discovery`
    # (NVIDIA/k8s-device-plugin README.md; NVIDIA/gpu-feature-discovery README.md).
    "gpu-feature-discovery",
    # NVIDIA DRA driver for GPUs: `--namespace dra-driver-nvidia-gpu` since its move to
    # kubernetes-sigs (docs/install.md); installs from before keep `nvidia-dra-driver-gpu`
    # (docs/upgrade.md).
    "dra-driver-nvidia-gpu",
    "nvidia-dra-driver-gpu",
    # NVIDIA Network Operator (GPUDirect RDMA): Helm `-n network-operator`
    # (Mellanox/network-operator, deployment/network-operator/README.md); OLM's suggested
    # namespace `nvidia-network-operator` (its ClusterServiceVersion).
    "network-operator",
    "nvidia-network-operator",
    # Node Feature Discovery, which labels GPU nodes, and on OpenShift.
    "node-feature-discovery",
    "openshift-nfd",
    # AMD GPU Operator: Helm `--namespace kube-amd-gpu` (ROCm/gpu-operator, README.md); OLM's
    # suggested namespace `openshift-amd-gpu` (its ClusterServiceVersion).
    "kube-amd-gpu",
    "openshift-amd-gpu",
    # Intel device plugins operator.
    "inteldeviceplugins-system",
    # Intel Gaudi: the device plugin's manifest uses `habana-system`, the Intel Gaudi Base
    # Operator `habana-ai-operator` (Helm and OLM; docs.habana.ai, Kubernetes and OpenShift
    # installation guides).
    "habana-system",
    "habana-ai-operator",
    # KAI Scheduler's GPU reservation pods and its scale adjuster (NVIDIA/KAI-Scheduler,
    # deployments/kai-scheduler/values.yaml), and Run:ai's reservation namespace from before
    # KAI 0.6 (docs/migrationguides/v0.6.0): they hold whole GPUs for shared pods by design.
    "kai-resource-reservation",
    "kai-scale-adjust",
    "runai-reservation",
    "gpu-admission",
]

# Where Cluster API node groups (MachineSets, MachineDeployments, MachinePools) are read from:
# what the cluster can create is a cluster-wide fact, so it comes only from namespaces tenants
# cannot write. `default` is where `clusterctl` puts a cluster's objects unless told otherwise
# (and where they stay after `clusterctl move` into the cluster itself); kube-system is never a
# tenant's. Exact names, no patterns: a tenant could create a namespace a pattern matches.
# Karpenter's NodePools are cluster-scoped, read always.
DEFAULT_PROVISIONING_NAMESPACES = ["default", "kube-system"]
