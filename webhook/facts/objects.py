"""What the cache keeps of each API object: pure functions, no client.

Each one reads an object as the API server sends it (JSON: a pod, node, ResourceQuota,
PriorityClass or ConfigMap) and returns the compact value `webhook.facts.live` holds; kept
apart from the list+watch machinery so they stay free of I/O and are tested on their own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from webhook.facts.devicekeys import visible_devices_keys
from webhook.facts.model import (
    GPU_PRODUCT_LABEL,
    Node,
    PodGpus,
    PriorityClass,
    Quota,
)
from webhook.facts.quotascopes import scope_terms
from webhook.podrequest import (
    GPU_FRACTION,
    GPU_MEMORY,
    effective_request,
    is_sidecar,
    per_gpu_scaled,
    shared_gpus,
)
from webhook.quantity import Amount, QuantityError, parse_quantity

__all__ = [
    "config_map_keys",
    "node",
    "pod_summary",
    "priority_class",
    "quota",
]


def _extended(amounts: Any) -> dict[str, Amount]:
    """Extended resources only (nvidia.com/gpu, rdma/...): cpu and memory are not ours."""
    out: dict[str, Amount] = {}
    if not isinstance(amounts, dict):
        return out
    for name, value in amounts.items():
        if "/" not in name or name.startswith(("hugepages-", "requests.", "limits.")):
            continue
        try:
            amount = parse_quantity(value)
        except QuantityError:
            continue
        if amount > 0:
            out[name] = amount
    return out


def _asks(container: Any) -> dict[str, Amount]:
    """One container's extended resources; requests win over limits (they must be equal)."""
    if not isinstance(container, dict):
        return {}
    res = container.get("resources") or {}
    if not isinstance(res, dict):
        return {}
    return {**_extended(res.get("limits")), **_extended(res.get("requests"))}


def pod_summary(
    pod: dict[str, Any],
    node_product: Callable[[str], str],
    node_memory: Callable[[str], int | None] | None = None,
) -> PodGpus | None:
    """A pod as the quota rules need it, or None when it holds no extended resources.

    Counted as the scheduler and ResourceQuota count it (`effective_request`): sidecars add
    to the regular containers, ordinary init containers take the maximum. What budgets count
    besides: HAMi's per-GPU units times the container's GPUs, and the share of a GPU a
    sharing scheduler gives through annotations (`shared_gpus`; a `gpu-memory` share once the
    pod is bound, from its node's GPU memory `node_memory` knows). A relist hands it only the
    fields `podpages.py` decodes: a field read here must be declared there too.
    """
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    regular = [per_gpu_scaled(_asks(c)) for c in spec.get("containers") or []]
    init = [
        (per_gpu_scaled(_asks(c)), isinstance(c, dict) and is_sidecar(c))
        for c in spec.get("initContainers") or []
    ]
    node = spec.get("nodeName") or ""
    share = _share(meta, spec, node, node_memory)
    if not any(regular) and not any(asks for asks, _ in init) and share is None:
        return None  # most pods of a cluster: skip the arithmetic
    gpus = effective_request(regular, init)
    if share is not None:
        gpus[SHARED_RESOURCE] = gpus.get(SHARED_RESOURCE, 0) + share
    if not gpus:
        return None
    selector = spec.get("nodeSelector") or {}
    product = (node_product(node) if node else "") or str(selector.get(GPU_PRODUCT_LABEL, ""))
    return PodGpus(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        phase=(pod.get("status") or {}).get("phase", "Pending"),
        gpus=gpus,
        node=node,
        product=product,
        priority_class=spec.get("priorityClassName") or "",
    )


# What a sharing scheduler's share is a part of (`GpuSharing.resource`'s default).
SHARED_RESOURCE = "nvidia.com/gpu"


def _share(
    meta: Any, spec: Any, node: str, node_memory: Callable[[str], int | None] | None
) -> Amount | None:
    """The share of a GPU a pod's annotations ask of a sharing scheduler (KAI, Run:ai): only
    for a pod some other scheduler than the default one places (the default one ignores the
    annotations and gives nothing)."""
    notes = meta.get("annotations") if isinstance(meta, dict) else None
    if not isinstance(notes, dict) or not (GPU_FRACTION in notes or GPU_MEMORY in notes):
        return None
    scheduler = spec.get("schedulerName") if isinstance(spec, dict) else None
    if not isinstance(scheduler, str) or scheduler in ("", "default-scheduler"):
        return None
    memory = node_memory(node) if node and node_memory is not None else None
    share = shared_gpus(notes, memory)
    return share if share is not None and share > 0 else None


def node(obj: dict[str, Any]) -> Node:
    meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
    return Node(
        meta.get("name", ""),
        dict(meta.get("labels") or {}),
        _extended(status.get("allocatable")),
        bool(spec.get("unschedulable")),
        _taints(spec.get("taints")),
    )


# Taint effects that keep a pod off a node; PreferNoSchedule only steers the scheduler.
_KEEPING_OFF = frozenset({"NoSchedule", "NoExecute"})


def _taints(raw: Any) -> tuple[tuple[str, str, str], ...]:
    """(key, value, effect) of each taint that keeps pods off the node."""
    if not isinstance(raw, list):
        return ()
    return tuple(
        (str(t.get("key") or ""), str(t.get("value") or ""), t["effect"])
        for t in raw
        if isinstance(t, dict) and t.get("effect") in _KEEPING_OFF
    )


# Longer values are cut: anyone who may create ConfigMaps could otherwise make the cache hold
# 1 MiB per ConfigMap. A cut value ends in "…", so it never equals an allowed value (void,
# none) and is judged as the whole value would be; 256 characters still show 6 GPU UUIDs.
_MAX_VALUE = 256


def config_map_keys(obj: dict[str, Any]) -> dict[str, str]:
    """The keys of a ConfigMap that `envFrom` could load as NVIDIA_VISIBLE_DEVICES.

    Only `data`: the kubelet never turns `binaryData` into environment variables.
    """
    data = obj.get("data")
    if not isinstance(data, dict):
        return {}
    return {
        k: v if len(v) <= _MAX_VALUE else v[:_MAX_VALUE] + "…"
        for k, v in visible_devices_keys(data).items()
    }


def quota(obj: dict[str, Any]) -> Quota:
    """A ResourceQuota's GPU keys, and the scopes that say which pods it counts."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    spec = obj.get("spec")
    spec = spec if isinstance(spec, dict) else {}
    hard = status.get("hard") or spec.get("hard") or {}
    return Quota(
        meta.get("namespace", ""),
        meta.get("name", ""),
        _quota_amounts(hard),
        _quota_amounts(status.get("used")),
        scope_terms(spec),
    )


def priority_class(obj: dict[str, Any]) -> PriorityClass:
    return PriorityClass(
        (obj.get("metadata") or {}).get("name", ""),
        int(obj.get("value") or 0),
        obj.get("preemptionPolicy") or "PreemptLowerPriority",
        bool(obj.get("globalDefault")),
    )


def _quota_amounts(values: Any) -> dict[str, Amount]:
    out: dict[str, Amount] = {}
    for key, value in (values or {}).items():
        if "/" not in key:  # only extended resources (requests.nvidia.com/gpu, ...)
            continue
        try:
            out[key] = parse_quantity(value)
        except QuantityError:
            continue
    return out
