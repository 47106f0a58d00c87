"""A relist being built: objects of one kind read page by page into the same compact shapes
the live cache keeps, swapped in whole when the list is complete (never half a list)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from webhook.facts import dra, objects, queues, servingruntimes, webhookconfigs
from webhook.facts.model import (
    TERMINATED,
    Node,
    PodGpus,
    PriorityClass,
    Quota,
    ServingRuntime,
    Usage,
)
from webhook.facts.watched import SHAPES

__all__ = ["Fresh", "Shapes"]

# (namespace, name) -> the object's shapes, None for one that cannot be told.
Shapes = dict[tuple[str, str], tuple[Node, ...] | None]


class Fresh:
    """A relist being built: the same shapes as the cache's, filled page by page."""

    def __init__(
        self,
        node_product: Callable[[str], str],
        node_memory: Callable[[str], int | None] | None = None,
    ) -> None:
        self.node_product = node_product
        self.node_memory = node_memory
        self.pods: dict[tuple[str, str], PodGpus] = {}
        self.usage: dict[str, Usage] = defaultdict(Usage)
        self.namespaces: dict[str, dict[str, str]] = {}
        self.nodes: dict[str, Node] = {}
        self.quotas: dict[str, dict[str, Quota]] = defaultdict(dict)
        self.classes: dict[str, PriorityClass] = {}
        self.config_maps: dict[str, dict[str, dict[str, str]]] = {}
        self.autoscaling: Shapes = {}
        self.dra: list[tuple[str, str, Any]] = []  # one DRA kind's objects, `dra.reduce`d
        self.runtimes: list[tuple[str, ServingRuntime]] = []  # `servingruntimes.reduce`d
        self.webhooks: list[tuple[str, int | None]] = []  # `webhookconfigs.reduce`d
        self.queues: list[tuple[str, str, Any]] = []  # one queue kind's, `queues.reduce`d

    def add(self, kind: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = meta.get("name", "")
        if kind == "pods":
            pod = objects.pod_summary(obj, self.node_product, self.node_memory)
            if pod is not None:
                self.pods[(pod.namespace, pod.name)] = pod
                if pod.phase not in TERMINATED:
                    self.usage[pod.namespace].add(pod)
        elif kind == "namespaces":
            self.namespaces[name] = dict(meta.get("labels") or {})
        elif kind == "nodes":
            self.nodes[name] = objects.node(obj)
        elif kind == "resourcequotas":
            quota = objects.quota(obj)
            self.quotas[quota.namespace][quota.name] = quota
        elif kind == "priorityclasses":
            self.classes[name] = objects.priority_class(obj)
        elif kind == "configmaps":
            keys = objects.config_map_keys(obj)
            if keys:
                self.config_maps.setdefault(meta.get("namespace", ""), {})[name] = keys
        elif kind in SHAPES:
            self.autoscaling[(meta.get("namespace", ""), name)] = SHAPES[kind](obj)
        elif kind in dra.KINDS:
            self.dra.append(dra.reduce(kind, obj))
        elif kind in servingruntimes.KINDS:
            self.runtimes.append(servingruntimes.reduce(kind, obj))
        elif kind == webhookconfigs.KIND:
            self.webhooks.append(webhookconfigs.reduce(obj))
        elif kind in queues.KINDS:
            self.queues.append(queues.reduce(kind, obj))
