"""Pods given part of a GPU by a GPU-sharing scheduler (KAI Scheduler, Run:ai).

Such a pod asks for no GPU resource: its `gpu-fraction` or `gpu-memory` annotation is the ask,
its `schedulerName` the scheduler that honours it, and that scheduler's own webhook points the
shared container's NVIDIA_VISIBLE_DEVICES at a ConfigMap its binder fills at bind time. Left
alone, the rules would see a pod that asks for no GPU yet tolerates GPU taints and sets the
variable through valueFrom, and refuse it. Marked here, once, before any rule runs: the shared
container asks for a GPU (so tolerations, /dev/shm, probes and priority apply as to any GPU
pod), and `shared_gpu` lets visible-devices admit the ConfigMap reference.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from webhook.engine.context import Context
from webhook.engine.podviews import ContainerView, PodView
from webhook.facts.devicekeys import SHARING_KEYS
from webhook.ruleset.models import GpuSharing

__all__ = [
    "SharingSchedulers",
    "config_map_name",
    "mark_shared",
    "scheduler_config_map_ref",
    "written_before",
]


class SharingSchedulers:
    """The rule set's GPU-sharing settings, ready for a per-review test."""

    def __init__(self, settings: GpuSharing) -> None:
        self.schedulers = frozenset(settings.schedulers)
        self.annotations = tuple(settings.annotations)
        self.container_annotation = settings.container_annotation
        self.resource = settings.resource
        self.config_map_annotation = settings.config_map_annotation
        self.writers = frozenset(settings.config_map_writers)

    def target(self, pod: PodView) -> ContainerView | None:
        """The container a sharing scheduler gives part of a GPU to, or None."""
        scheduler = pod.spec.get("schedulerName")
        if not isinstance(scheduler, str) or scheduler not in self.schedulers:
            return None
        if pod.spec.get("nodeName"):
            return None  # placed by hand: no sharing scheduler binds it, nor hands it a part
        notes = pod.annotations
        if not any(isinstance(notes.get(a), str) and notes.get(a) for a in self.annotations):
            return None
        named = notes.get(self.container_annotation)
        candidates = [c for c in pod.containers if not c.ephemeral]
        if isinstance(named, str) and named:
            return next((c for c in candidates if c.name == named), None)
        return next((c for c in candidates if not c.init), None)


def mark_shared(views: list[PodView], sharing: SharingSchedulers) -> list[PodView]:
    """The views with each sharing pod's shared container marked (new views; others as they
    were)."""
    out = []
    for view in views:
        target = sharing.target(view)
        if target is None or target.shared_gpu:
            out.append(view)
            continue
        named = view.annotations.get(sharing.config_map_annotation)
        marked = dataclasses.replace(
            target,
            asks_gpu=True,
            shared_gpu=sharing.resource,
            shared_config_map=named if isinstance(named, str) else "",
        )
        containers = tuple(marked if c is target else c for c in view.containers)
        out.append(dataclasses.replace(view, containers=containers))
    return out


def config_map_name(c: ContainerView) -> str:
    """The ConfigMap the sharing scheduler's webhook names for this container: `<prefix>-<n>`
    for containers[n], `<prefix>-i<n>` for initContainers[n] (KAI Scheduler's
    gpusharingconfigmap.SetGpuCapabilitiesConfigMapName), `prefix` from the pod's annotation;
    "" when it has none or the container sits elsewhere."""
    prefix = c.shared_config_map
    if not prefix or len(c.slot) != 2 or not isinstance(c.slot[1], int):
        return ""
    where = {"containers": "", "initContainers": "i"}.get(str(c.slot[0]))
    return "" if where is None else f"{prefix}-{where}{c.slot[1]}"


def scheduler_config_map_ref(env: Mapping[str, Any], c: ContainerView) -> str:
    """The ConfigMap's name when this env entry is one the sharing scheduler's binder fills: a
    device key (SHARING_KEYS: each KAI release writes one of them) of the ConfigMap its
    webhook named for this container (`config_map_name`), not optional; else ""."""
    source = env.get("valueFrom")
    name = config_map_name(c)
    if not name or not isinstance(source, dict) or set(source) != {"configMapKeyRef"}:
        return ""
    ref = source["configMapKeyRef"]
    if not isinstance(ref, dict) or ref.get("key") not in SHARING_KEYS:
        return ""
    if ref.get("name") != name or ref.get("optional") is True:
        return ""
    return name


def written_before(name: str, ctx: Context) -> bool:
    """Whether the facts show the scheduler's ConfigMap already there, with a device key, as
    the pod is created. Its binder writes it only at bind time, after the pod exists, owned by
    the pod (UpsertJobConfigMap): one that exists at the pod's creation was written by someone
    else (who may have put `all` in it), or is a deleted namesake's, which the garbage
    collector removes. Unknown ConfigMaps say no: the ConfigMap webhook guards their writes."""
    facts = ctx.facts
    if ctx.kind != "Pod" or ctx.operation != "CREATE" or facts is None:
        return False
    known = facts.config_maps
    if known is None:
        return False
    keys = known.get(name) or {}
    return any(k in keys for k in SHARING_KEYS)
