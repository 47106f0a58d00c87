"""Where a batch queue reads a workload's queue name: data, so the context can carry it
without importing the gpu-queue check (`checks.queue`) that reads it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["QueueMeta", "made_by_controller", "queue_metadata"]


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False, unsafe_hash=True)
class QueueMeta:
    """The metadata a queue reads a workload's queue name from: its JSON pointer, and its
    value (None: the object has none there yet)."""

    pointer: str
    value: Mapping[str, Any] | None

    def __init__(self, pointer: str, value: Mapping[str, Any] | None) -> None:
        self.pointer = pointer
        self.value = value

    @property
    def field(self) -> str:
        return self.pointer.strip("/").replace("/", ".")


# Kinds no batch queue takes: templates and per-node agents.
_NOT_QUEUED = frozenset({("", "PodTemplate"), ("apps", "DaemonSet")})


def queue_metadata(group: str, kind: str, obj: Any, runtime: bool) -> QueueMeta | None:
    """Where a queue reads the object's queue name from: its own metadata, or a CronJob's job
    template's (the Jobs it makes carry those labels). None for what no queue takes as such:
    a runtime other objects are merged into, a PodTemplate, a DaemonSet, and a pod or Job a
    controller made (that controller carries the queue, and was judged for it)."""
    if runtime or (group, kind) in _NOT_QUEUED or not isinstance(obj, dict):
        return None
    own = obj.get("metadata")
    if made_by_controller(own if isinstance(own, dict) else None):
        return None
    if (group, kind) != ("batch", "CronJob"):
        return QueueMeta("/metadata", own if isinstance(own, dict) else None)
    spec = obj.get("spec")
    template = spec.get("jobTemplate") if isinstance(spec, dict) else None
    if not isinstance(template, dict):
        return None
    meta = template.get("metadata")
    return QueueMeta("/spec/jobTemplate/metadata", meta if isinstance(meta, dict) else None)


def made_by_controller(meta: Mapping[str, Any] | None) -> bool:
    """A pod or Job a controller made: its controller carries (and was judged for) the queue."""
    refs = (meta or {}).get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(r, dict) and r.get("controller") is True for r in refs
    )
