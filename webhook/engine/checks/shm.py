"""A memory-backed /dev/shm for GPU containers: the runtime default of 64Mi breaks NCCL."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from webhook.engine.checks.resources import gpu_containers
from webhook.engine.context import Context
from webhook.engine.podviews import ContainerView, PodView, UnreadableObject
from webhook.quantity import QuantityError, format_bytes, parse_quantity

__all__ = ["SHM_PATH", "add_shm", "mounts_shm", "shm_size"]

SHM_PATH = "/dev/shm"


def mounts_shm(container: dict[str, Any]) -> bool:
    mounts = container.get("volumeMounts") or []
    return any(
        isinstance(m, dict)
        and isinstance(m.get("mountPath"), str)
        and m["mountPath"].rstrip("/") == SHM_PATH
        for m in mounts
    )


def _memory_limit(c: ContainerView) -> Fraction | None:
    limits = c.resources.get("limits") or {}
    if "memory" not in limits:
        return None
    try:
        return parse_quantity(limits["memory"])
    except QuantityError as exc:
        raise UnreadableObject(
            f"{c.field_path}.resources.limits.memory",
            f"{exc}; expected a Kubernetes quantity such as 64Gi",
        ) from None


def shm_size(c: ContainerView, ctx: Context) -> int:
    """A share of the memory limit, clamped to [min, max] and never above the limit itself.

    A memory-backed emptyDir is charged to the pod's memory, so a size above the limit would
    let /dev/shm alone get the container OOM-killed.
    """
    share, low, high, default = ctx.rules.shm_sizes
    exact = _memory_limit(c)
    if exact is None:
        return default
    limit = int(exact)  # whole bytes; integer arithmetic is what the hot path can afford
    size = min(max(limit * share.numerator // share.denominator, low), high)
    # Whole mebibytes keep the emitted quantity readable (e.g. 1536Mi rather than a byte count).
    size = size // 2**20 * 2**20 or size
    return min(size, limit)


def _free_volume_name(spec: dict[str, Any], base: str) -> str:
    volumes = spec.get("volumes")
    # A forged review may carry any JSON here: only string names can clash with ours.
    taken = {
        v["name"]
        for v in (volumes if isinstance(volumes, list) else ())
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    }
    if base not in taken:
        return base
    n = 1
    while f"{base}-{n}" in taken:
        n += 1
    return f"{base}-{n}"


def add_shm(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    """One shared volume for every GPU container without a /dev/shm mount.

    Existing volumes and mounts are never changed: a container that mounts anything at
    /dev/shm already made its choice (the hygiene rule reports it when not memory-backed).
    A pod with `hostIPC: true` shares the host's /dev/shm on purpose: an emptyDir over it
    would undo that choice.
    """
    if spec.get("hostIPC") is True:
        return False
    needing = [c for c in gpu_containers(pod) if not mounts_shm(c.raw)]
    if not needing:
        return False
    name = _free_volume_name(spec, ctx.settings.gpu_shm.volume_name)
    size = min(shm_size(c, ctx) for c in needing)
    spec["volumes"] = [
        *(spec.get("volumes") or []),
        {"name": name, "emptyDir": {"medium": "Memory", "sizeLimit": format_bytes(size)}},
    ]
    for c in needing:
        container = c.locate(spec)
        container["volumeMounts"] = [
            *(container.get("volumeMounts") or []),
            {"name": name, "mountPath": SHM_PATH},
        ]
    return True
