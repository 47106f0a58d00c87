"""The names that lead to a container's GPUs: the NVIDIA_VISIBLE_DEVICES variable and its
kin, and the keys of a GPU-sharing scheduler's ConfigMap. Only these keys of a ConfigMap or
Secret are kept as facts (`visible_devices_keys`)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = [
    "DEVICE_ENV",
    "SHARING_KEYS",
    "VISIBLE_DEVICES",
    "could_become_visible_devices",
    "visible_devices_keys",
]

VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
# The keys of a GPU-sharing scheduler's ConfigMap that its webhook points a shared container's
# NVIDIA_VISIBLE_DEVICES at (valueFrom.configMapKeyRef), and its binder fills at bind time. KAI
# Scheduler v0.7.4 and later write NVIDIA_VISIBLE_DEVICES; earlier releases, and the v0.4, v0.5
# and v0.6 lines still released, write RUNAI-VISIBLE-DEVICES (pkg/binder/common/gpu_access.go),
# which the later binders still fill where a pod names it.
SHARING_KEYS: tuple[str, ...] = ("NVIDIA_VISIBLE_DEVICES", "RUNAI-VISIBLE-DEVICES")
# Variables that name a container's GPUs: the NVIDIA toolkit's (which hands them over), and the
# CUDA, HIP and ROCm runtimes' (which pick among those the container already sees). A pod that
# sets one expects GPUs: the webhook is sent it, so a GPU node it reaches untolerated shows.
DEVICE_ENV: tuple[str, ...] = (
    VISIBLE_DEVICES,
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
)


def could_become_visible_devices(key: str) -> bool:
    """Whether `envFrom` with some prefix could turn this key into NVIDIA_VISIBLE_DEVICES."""
    return bool(key) and VISIBLE_DEVICES.endswith(key)


def visible_devices_keys(data: Mapping[str, object]) -> dict[str, str]:
    """The only keys of a ConfigMap or Secret the rules need (those `envFrom` could turn into
    NVIDIA_VISIBLE_DEVICES, and a sharing scheduler's device keys); the rest is never kept."""
    return {
        k: v
        for k, v in data.items()
        if isinstance(v, str) and (could_become_visible_devices(k) or k in SHARING_KEYS)
    }
