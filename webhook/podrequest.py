"""A pod's effective request, by Kubernetes' own formula (KEP-753, sidecar containers), and
what GPU-sharing schedulers add to it for budgets (KAI/Run:ai shares, HAMi's per-GPU units).

Regular containers run together; ordinary init containers run one at a time, each beside the
sidecars (init containers with `restartPolicy: Always`) started before it; sidecars keep
running beside the regular containers. The scheduler, ResourceQuota and the kubelet all count
this way, so every place that counts a pod's GPUs (admission, the live cache) uses this one
function.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from fractions import Fraction
from typing import Any

from webhook.quantity import Amount, QuantityError, parse_quantity

__all__ = [
    "FRACTION_DEVICES",
    "GPU_FRACTION",
    "GPU_MEMORY",
    "GPU_MEMORY_LABEL",
    "PER_GPU_UNITS",
    "effective_request",
    "is_sidecar",
    "memory_of",
    "per_gpu_scaled",
    "shared_gpus",
]


def is_sidecar(container: Mapping[str, object]) -> bool:
    """An init container that keeps running beside the regular ones."""
    return container.get("restartPolicy") == "Always"


def effective_request(
    regular: Iterable[Mapping[str, Amount]],
    init: Iterable[tuple[Mapping[str, Amount], bool]],
) -> dict[str, Amount]:
    """max(sum(regular) + sum(sidecars), the peak while init containers run), per resource.

    `init` is every init container in order, with whether it is a sidecar.
    """
    running: dict[str, Amount] = {}  # sidecars started so far
    peak: dict[str, Amount] = {}
    for asks, sidecar in init:
        if sidecar:
            for name, amount in asks.items():
                running[name] = running[name] + amount if name in running else amount
            step = running
        else:
            step = dict(running)
            for name, amount in asks.items():
                step[name] = step[name] + amount if name in step else amount
        for name, amount in step.items():
            if name not in peak or amount > peak[name]:
                peak[name] = amount
    total = dict(running)
    for asks in regular:
        for name, amount in asks.items():
            total[name] = total[name] + amount if name in total else amount
    for name, amount in peak.items():
        if name not in total or amount > total[name]:
            total[name] = amount
    # The numerator's sign, not `v > 0`: a Fraction compares in pure Python (quantity.positive).
    return {n: v for n, v in total.items() if v.numerator > 0}


# HAMi's units are per GPU: `nvidia.com/gpumem: 4000` with `nvidia.com/gpu: 2` holds 8000 MiB
# (HAMi gives a container that names no count one GPU).
PER_GPU_UNITS = ("nvidia.com/gpumem", "nvidia.com/gpucores")
HAMI_COUNT = "nvidia.com/gpu"

# KAI Scheduler / Run:ai: part of a GPU asked through pod annotations (their `constants`
# package): a portion of a device, or MiB of its memory, on `gpu-fraction-num-devices` devices.
GPU_FRACTION = "gpu-fraction"
GPU_MEMORY = "gpu-memory"
FRACTION_DEVICES = "gpu-fraction-num-devices"
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"  # MiB per GPU, by GPU feature discovery


def per_gpu_scaled(asks: Mapping[str, Amount]) -> Mapping[str, Amount]:
    """One container's asks with HAMi's per-GPU units multiplied by its GPU count: what a
    budget in those units counts. The same mapping when there is nothing to scale."""
    if not any(name in asks for name in PER_GPU_UNITS):
        return asks
    count = asks.get(HAMI_COUNT, 1)
    if count == 1:
        return asks
    return {n: v * count if n in PER_GPU_UNITS else v for n, v in asks.items()}


def _whole(text: str) -> int | None:
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else None


def shared_gpus(annotations: Mapping[str, Any], memory_mib: int | None) -> Amount | None:
    """The GPUs a KAI/Run:ai sharing pod takes, as a number of GPUs: `gpu-fraction` times its
    devices, or `gpu-memory` over `memory_mib` (the MiB of the smallest GPU it could get;
    None: not known) times its devices, at most one GPU per device. None when the pod asks
    no share, or a share that cannot be read (KAI's own webhook refuses those)."""
    devices = 1
    count = annotations.get(FRACTION_DEVICES)
    if isinstance(count, str) and count:
        parsed = _whole(count)
        if parsed is None or parsed < 1:
            return None
        devices = parsed
    fraction = annotations.get(GPU_FRACTION)
    if isinstance(fraction, str) and fraction:
        try:
            share = parse_quantity(fraction)
        except QuantityError:
            return None
        if not 0 < share <= 1:
            return None
        return share * devices
    memory = annotations.get(GPU_MEMORY)
    if isinstance(memory, str) and memory:
        mib = _whole(memory.strip())
        if mib is None or mib < 1 or not memory_mib:
            return None
        return min(Fraction(mib, memory_mib), Fraction(1)) * devices
    return None


def memory_of(labels: Mapping[str, str]) -> int | None:
    """A node's GPU memory in MiB from its `nvidia.com/gpu.memory` label; None: no such label."""
    value = labels.get(GPU_MEMORY_LABEL)
    mib = _whole(value) if isinstance(value, str) else None
    return mib if mib else None
