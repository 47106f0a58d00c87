"""GPU quantities: requests equal to limits, whole devices, no MIG/full-GPU mix, memory limits."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import ContainerView, PodView
from webhook.quantity import positive, show

__all__ = [
    "copy_requests_to_limits",
    "init_container_gpu",
    "memory_limit",
    "mig_not_mixed",
    "requests_equal_limits",
    "whole_quantities",
]

FULL_GPU = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"


def copy_requests_to_limits(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    """A GPU only in requests is the usual slip; limits are what the device plugin reads."""
    changed = False
    for c in pod.containers:
        missing = {n: v for n, v in c.raw_gpu_requests.items() if n not in c.raw_gpu_limits}
        if not missing:
            continue
        container = c.locate(spec)
        # New maps, never the shared ones: the working copy shares `resources` (patch.py).
        resources = dict(container.get("resources") or {})
        resources["limits"] = {**(resources.get("limits") or {}), **missing}
        container["resources"] = resources
        changed = True
    return changed


def requests_equal_limits(pod: PodView, ctx: Context) -> Iterator[Finding]:
    fixing = ctx.settings.gpu_requests_limits.fix
    for c in pod.containers:
        for name, requested in c.gpu_requests.items():
            field = f'{c.resources_path}.limits["{name}"]'
            limit = c.gpu_limits.get(name)
            if limit is None and fixing and not pod.mutable:
                continue  # never patched here (TrainJob): its pods get the limit when created
            if limit is None:
                yield Finding(
                    rule="gpu-requests-limits",
                    summary=(
                        f"gpu-requests-limits: {c.label()} requests {show(requested)} {name} "
                        f"but sets no limit"
                    ),
                    fix=(
                        f"set {field} to {show(requested)}; GPUs cannot be overcommitted, so "
                        "the apiserver refuses a GPU request without an equal limit"
                        + ("" if fixing else " (the automatic fix is switched off in the rules)")
                    ),
                    field=field,
                )
            elif limit != requested:
                yield Finding(
                    rule="gpu-requests-limits",
                    summary=(
                        f"gpu-requests-limits: {c.label()} requests {show(requested)} {name} "
                        f"but limits {show(limit)}"
                    ),
                    fix=(
                        f"make {c.resources_path}.requests and .limits equal for {name} "
                        f"(or drop the request: it defaults to the limit)"
                    ),
                    field=field,
                )


def whole_quantities(pod: PodView, ctx: Context) -> Iterator[Finding]:
    for c in pod.containers:
        for section, amounts, raw in (
            ("limits", c.gpu_limits, c.raw_gpu_limits),
            ("requests", c.gpu_requests, c.raw_gpu_requests),
        ):
            for name, value in amounts.items():
                if value.denominator == 1 and value >= 0:
                    continue
                field = f'{c.resources_path}.{section}["{name}"]'
                yield Finding(
                    rule="gpu-whole-quantity",
                    summary=(
                        f"gpu-whole-quantity: {c.label()} asks {raw[name]!s} {name} in "
                        f"{section}; expected a whole number of devices"
                    ),
                    fix=(
                        f"set {field} to a whole number such as 1. For part of a GPU ask for a "
                        "MIG profile (e.g. nvidia.com/mig-1g.10gb: 1) or a time-sliced resource "
                        "(e.g. nvidia.com/gpu.shared: 1) that your cluster offers"
                    ),
                    field=field,
                )


def mig_not_mixed(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """A container gets MIG slices or whole GPUs, never both: the device plugin can't mix them."""
    for c in pod.containers:
        asks = {n for n, v in {**c.gpu_requests, **c.gpu_limits}.items() if positive(v)}
        migs = sorted(n for n in asks if n.startswith(MIG_PREFIX))
        if FULL_GPU in asks and migs:
            yield Finding(
                rule="gpu-mig-mixed",
                summary=(
                    f"gpu-mig-mixed: {c.label()} asks for both {FULL_GPU} and {', '.join(migs)}; "
                    "expected one or the other"
                ),
                fix=(
                    f"in {c.resources_path} keep either {FULL_GPU} or the MIG profile, or "
                    "split the work into two containers"
                ),
                field=f"{c.resources_path}",
            )


def memory_limit(pod: PodView, ctx: Context) -> Iterator[Finding]:
    for c in pod.main_containers:
        if not c.asks_gpu:
            continue
        limits = c.resources.get("limits") or {}
        if "memory" not in limits:
            yield Finding(
                rule="gpu-memory-limit",
                summary=f"gpu-memory-limit: {c.label()} asks for a GPU but sets no memory limit",
                fix=(
                    f"set {c.resources_path}.limits.memory, so a runaway process can't "
                    "starve the other GPU pods on the node"
                ),
                field=f"{c.resources_path}.limits.memory",
            )


def init_container_gpu(pod: PodView, ctx: Context) -> Iterator[Finding]:
    for c in pod.containers:
        if c.init and not c.sidecar and c.asks_gpu:
            yield Finding(
                rule="gpu-init-container",
                summary=f"gpu-init-container: {c.label()} asks for a GPU",
                fix=(
                    f"remove the GPU from {c.resources_path} unless the init step needs it; "
                    "the pod holds the device while it initialises"
                ),
                field=f"{c.resources_path}",
            )


def gpu_containers(pod: PodView) -> list[ContainerView]:
    """Regular and sidecar containers that ask for a GPU: they get /dev/shm and probe changes."""
    return [c for c in pod.main_containers if c.asks_gpu]
