"""Cluster facts as values: what the cluster-aware rules read, and the interface of a source.

Three sources implement `FactsSource`: the static snapshot file (offline audit, tests,
`make run`), the watch-fed live cache in the webhook, and a one-shot list for the live audit.
The engine never sees a source: a driver takes one immutable `Facts` per request from it, so
a rule reads one consistent state even while the watch threads keep updating the source.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Protocol

__all__ = [
    "GPU_PRODUCT_LABEL",
    "TERMINATED",
    "Facts",
    "FactsSource",
    "Node",
    "NodeIndex",
    "PodGpus",
    "PriorityClass",
    "Quota",
    "Usage",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
TERMINATED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str]
    gpus: Mapping[str, Fraction]  # allocatable GPU resources only
    unschedulable: bool = False


@dataclass(frozen=True, slots=True)
class Quota:
    """A native ResourceQuota, reduced to what GPU rules read."""

    namespace: str
    name: str
    hard: Mapping[str, Fraction]
    used: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False


@dataclass(frozen=True, slots=True)
class PodGpus:
    """What the cache keeps of a pod: enough for quota and usage, ~200 bytes, not the object."""

    namespace: str
    name: str
    phase: str
    gpus: Mapping[str, Fraction]
    node: str = ""
    product: str = ""  # the node's GPU product once scheduled, else the pod's selector
    priority_class: str = ""


@dataclass
class Usage:
    """GPUs held by a namespace's non-terminated pods: by resource, and by (resource, product).

    A source builds one with `add` while it is private; once handed out it is never changed
    again (`plus` makes the next one), so a request holding it reads a consistent total.
    """

    by_resource: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    by_product: dict[tuple[str, str], Fraction] = field(
        default_factory=lambda: defaultdict(Fraction)
    )

    def add(self, pod: PodGpus, sign: int = 1) -> None:
        for name, amount in pod.gpus.items():
            self.by_resource[name] += sign * amount
            if pod.product:
                self.by_product[(name, pod.product)] += sign * amount

    def plus(self, pods: Iterable[PodGpus], sign: int = 1) -> Usage:
        """A new total with `pods` added (or taken away); this one stays as it was."""
        out = Usage()
        out.by_resource.update(self.by_resource)
        out.by_product.update(self.by_product)
        for pod in pods:
            out.add(pod, sign)
        return out


# Plain dicts, not defaultdicts: a read that misses must not add a key to the shared value.
EMPTY_USAGE = Usage(by_resource={}, by_product={})


def _is_gpu_label(key: str, prefixes: tuple[str, ...]) -> bool:
    return key.startswith(prefixes)


class NodeIndex:
    """The cluster's nodes, replaced whole when one changes, with their GPU pools.

    A cluster has thousands of nodes but a handful of GPU pools, and schedulability only reads
    GPU labels and GPU capacity: pools are worked out once per node set (and per set of GPU
    label prefixes, which a rule set fixes), not once per request.
    """

    __slots__ = ("_pools", "nodes")

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self._pools: dict[tuple[str, ...], tuple[Node, ...]] = {}

    def pools(self, prefixes: tuple[str, ...]) -> tuple[Node, ...]:
        """Schedulable nodes grouped by their GPU labels, each with its largest allocatable."""
        found = self._pools.get(prefixes)
        if found is None:
            if len(self._pools) >= 8:  # a new rule set with other prefixes: forget the old
                self._pools.clear()
            found = self._pools[prefixes] = self._group(prefixes)
        return found

    def _group(self, prefixes: tuple[str, ...]) -> tuple[Node, ...]:
        grouped: dict[tuple[tuple[str, str], ...], dict[str, Fraction]] = {}
        for n in self.nodes:
            if n.unschedulable:
                continue
            labels = tuple(
                sorted((k, v) for k, v in n.labels.items() if _is_gpu_label(k, prefixes))
            )
            most = grouped.setdefault(labels, {})
            for name, amount in n.gpus.items():
                most[name] = max(most.get(name, Fraction(0)), amount)
        return tuple(Node("pool", dict(labels), gpus) for labels, gpus in grouped.items())


@dataclass(frozen=True, slots=True)
class Facts:
    """What the rules may know of the cluster while judging one object in one namespace.

    Taken once per request from a source, with this replica's GPU holds already in `usage`;
    every value in it is immutable or never changed after it was handed out.
    """

    namespace: str
    namespace_labels: Mapping[str, str] | None
    quotas: tuple[Quota, ...]
    usage: Usage
    priority_classes: Mapping[str, PriorityClass]
    nodes: NodeIndex
    # Seconds since the source last heard from the API server; None for a snapshot file.
    age_seconds: float | None = None

    def priority_class(self, name: str) -> PriorityClass | None:
        return self.priority_classes.get(name)


class FactsSource(Protocol):
    """Anything that can hand out the facts for one namespace: a snapshot, a cache, a list."""

    def facts_for(self, namespace: str) -> Facts: ...
