"""The built-in defaults that are lists of names, kept apart from the models that use them:
the GPU resource names, the exempt namespaces (where GPU operators and device plugins
install) and the host paths that hold GPU device nodes."""

from __future__ import annotations

__all__ = ["DEFAULT_DEVICE_PATHS", "DEFAULT_EXEMPT_NAMESPACES", "DEFAULT_GPU_RESOURCES"]

# Host paths holding GPU device nodes; directories above them (/, /dev, /dev/char) count too.
# /proc/<pid>/root links to the host's / (and so to its /dev).
DEFAULT_DEVICE_PATHS = ["/dev/nvidia*", "/dev/dri*", "/dev/kfd", "/dev/char/*", "/proc", "/proc/*"]

DEFAULT_GPU_RESOURCES = [
    "nvidia.com/gpu",
    "nvidia.com/mig-*",
    "amd.com/gpu",
    "gpu.intel.com/*",
    "nvidia.com/gpumem",
    "nvidia.com/gpucores",
    "*.shared",
]

DEFAULT_EXEMPT_NAMESPACES = [
    "kube-system",
    "kube-public",
    "kube-node-lease",
    # Where GPU operators and device plugins install by default: they mount /dev, run
    # privileged and set NVIDIA_VISIBLE_DEVICES=all by design.
    "gpu-operator",  # NVIDIA GPU Operator
    "nvidia-gpu-operator",  # NVIDIA GPU Operator on OpenShift
    "nvidia-network-operator",  # NVIDIA Network Operator (GPUDirect RDMA)
    "node-feature-discovery",  # NFD, which labels GPU nodes
    "openshift-nfd",  # NFD on OpenShift
    "kube-amd-gpu",  # AMD GPU Operator
    "inteldeviceplugins-system",  # Intel device plugins operator
    "gpu-admission",
]
