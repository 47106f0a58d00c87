"""Batch queues as facts: where a namespace's GPUs are kept when a queue keeps them.

Kueue (`kueue.x-k8s.io`, v1beta2 and v1beta1): a LocalQueue in the namespace points to a
ClusterQueue, whose resource groups give each flavor a `nominalQuota` and, in a cohort, a
`borrowingLimit` per resource; a ResourceFlavor's `nodeLabels` say which nodes (which GPU
products) the flavor is. KAI Scheduler / Run:ai (`scheduling.run.ai/v2`): cluster-scoped Queues
in a hierarchy (`parentQueue`), each with a GPU `quota` and `limit`.

Each object is reduced to a small value (a few hundred bytes, never the object); `QueueStore`
holds them for the live cache (its writers hold the cache's lock; a reader takes whole values
never edited once handed out) and for a snapshot file. Every kind is optional: a 404 on a
list means the project is not installed (known, and none), a 403 that we may not read it
(unknown: the `gpu-queue` rule then follows its whenUnknown). Kueue's kinds are watched in
both served versions; the newer one is read when the cluster serves it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from webhook.quantity import Amount, QuantityError, parse_quantity

__all__ = [
    "KAI_KINDS",
    "KINDS",
    "KUEUE_KINDS",
    "ClusterQueue",
    "FlavorQuota",
    "KaiQueue",
    "QueueFacts",
    "QueueStore",
    "ResourceGroup",
    "reduce",
]

log = logging.getLogger("gpu-admission.cache")

KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # newest first: the first one served is read
KAI_GROUP = "scheduling.run.ai"
KAI_VERSION = "v2"

# The cache's kind names: `<plural>` for v1beta2, `<plural>.v1beta1` for the older version.
LOCAL, CLUSTER, FLAVOR, KAI = "localqueues", "clusterqueues", "resourceflavors", "queues"
KUEUE_PLURALS = (LOCAL, CLUSTER, FLAVOR)
KUEUE_KINDS = tuple(
    p if v == KUEUE_VERSIONS[0] else f"{p}.{v}" for v in KUEUE_VERSIONS for p in KUEUE_PLURALS
)
KAI_KINDS = (KAI,)
KINDS = KUEUE_KINDS + KAI_KINDS


def plural_of(kind: str) -> tuple[str, str]:
    """(plural, version) of a cache kind name."""
    if kind in KAI_KINDS:
        return kind, KAI_VERSION
    plural, _, version = kind.partition(".")
    return plural, version or KUEUE_VERSIONS[0]


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    """One flavor of a resource group: per resource, its nominal quota and borrowing limit
    (None: no limit, which in a cohort lets it borrow whatever the cohort lends)."""

    name: str
    nominal: Mapping[str, Amount]
    borrowing: Mapping[str, Amount | None]


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    covered: tuple[str, ...]
    flavors: tuple[FlavorQuota, ...]


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    name: str
    cohort: str
    # The raw metav1.LabelSelector; None: no namespace is eligible (Kueue's default).
    namespace_selector: Mapping[str, Any] | None
    groups: tuple[ResourceGroup, ...]

    def covers(self, resource: str) -> bool:
        return any(resource in g.covered for g in self.groups)

    def admits_namespace(self, labels: Mapping[str, str]) -> bool:
        sel = self.namespace_selector
        if sel is None:
            return False
        return _selector_matches(sel, labels)


@dataclass(frozen=True, slots=True)
class KaiQueue:
    """A KAI/Run:ai Queue: its parent, children and GPU quota and limit (-1: none)."""

    name: str
    parent: str
    gpu_quota: float | None
    gpu_limit: float | None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _amount(value: Any) -> Amount | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        return parse_quantity(value)
    except QuantityError:
        return None


def _selector_matches(sel: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    for key, value in _dict(sel.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for raw in _list(sel.get("matchExpressions")):
        expr = _dict(raw)
        name, op = expr.get("key"), expr.get("operator")
        values = [v for v in _list(expr.get("values")) if isinstance(v, str)]
        has = isinstance(name, str) and name in labels
        found = labels.get(name) if isinstance(name, str) else None
        if op == "In" and found not in values:
            return False
        if op == "NotIn" and has and found in values:
            return False
        if op == "Exists" and not has:
            return False
        if op == "DoesNotExist" and has:
            return False
    return True


def cluster_queue(obj: Mapping[str, Any]) -> ClusterQueue:
    """A ClusterQueue of either version; fields of a wrong type read as absent."""
    spec = _dict(obj.get("spec"))
    groups = []
    for g in _list(spec.get("resourceGroups")):
        g = _dict(g)
        flavors = []
        for f in _list(g.get("flavors")):
            f = _dict(f)
            nominal: dict[str, Amount] = {}
            borrowing: dict[str, Amount | None] = {}
            for r in _list(f.get("resources")):
                r = _dict(r)
                name = r.get("name")
                if not isinstance(name, str):
                    continue
                nominal[name] = _amount(r.get("nominalQuota")) or 0
                borrowing[name] = _amount(r.get("borrowingLimit"))
            flavors.append(FlavorQuota(str(f.get("name") or ""), nominal, borrowing))
        covered = tuple(c for c in _list(g.get("coveredResources")) if isinstance(c, str))
        groups.append(ResourceGroup(covered, tuple(flavors)))
    selector = spec.get("namespaceSelector")
    cohort = spec.get("cohortName", spec.get("cohort"))  # v1beta2 renamed it
    return ClusterQueue(
        name=str(_dict(obj.get("metadata")).get("name") or ""),
        cohort=cohort if isinstance(cohort, str) else "",
        namespace_selector=selector if isinstance(selector, dict) else None,
        groups=tuple(groups),
    )


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def kai_queue(obj: Mapping[str, Any]) -> KaiQueue:
    spec = _dict(obj.get("spec"))
    gpu = _dict(_dict(spec.get("resources")).get("gpu"))
    parent = spec.get("parentQueue")
    return KaiQueue(
        name=str(_dict(obj.get("metadata")).get("name") or ""),
        parent=parent if isinstance(parent, str) else "",
        gpu_quota=_float(gpu.get("quota")),
        gpu_limit=_float(gpu.get("limit")),
    )


def reduce(kind: str, obj: Mapping[str, Any]) -> tuple[str, str, Any]:
    """(namespace, name, value) of one object of a cache kind."""
    meta = _dict(obj.get("metadata"))
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    plural, _ = plural_of(kind)
    if plural == LOCAL:
        target = _dict(obj.get("spec")).get("clusterQueue")
        return namespace, name, target if isinstance(target, str) else ""
    if plural == CLUSTER:
        return "", name, cluster_queue(obj)
    if plural == FLAVOR:
        labels = _dict(_dict(obj.get("spec")).get("nodeLabels"))
        return "", name, {k: v for k, v in labels.items() if isinstance(v, str)}
    return "", name, kai_queue(obj)


_NO_LOCAL: Mapping[str, str] = MappingProxyType({})


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False, unsafe_hash=True)
class QueueFacts:
    """What one namespace may know of the queues. A None part is unknown (not readable)."""

    # Kueue: this namespace's LocalQueues (name -> its ClusterQueue), the ClusterQueues and
    # the ResourceFlavors' node labels.
    local_queues: Mapping[str, str] | None
    cluster_queues: Mapping[str, ClusterQueue] | None
    flavors: Mapping[str, Mapping[str, str]] | None
    # KAI/Run:ai Queues (cluster-scoped).
    kai_queues: Mapping[str, KaiQueue] | None

    def __init__(
        self,
        local_queues: Mapping[str, str] | None,
        cluster_queues: Mapping[str, ClusterQueue] | None,
        flavors: Mapping[str, Mapping[str, str]] | None,
        kai_queues: Mapping[str, KaiQueue] | None,
    ) -> None:
        self.local_queues = local_queues
        self.cluster_queues = cluster_queues
        self.flavors = flavors
        self.kai_queues = kai_queues

    def kai_leaves(self) -> list[str]:
        """The KAI queues a job may name: only leaf queues take jobs."""
        queues = self.kai_queues or {}
        parents = {q.parent for q in queues.values()}
        return sorted(n for n in queues if n not in parents)

    def kai_limits(self, name: str) -> list[tuple[str, float]]:
        """(queue, GPU limit) of the queue and each ancestor that sets one (> 0)."""
        queues = self.kai_queues or {}
        out, seen = [], set()
        while name in queues and name not in seen:
            seen.add(name)
            q = queues[name]
            if q.gpu_limit is not None and q.gpu_limit > 0:
                out.append((name, q.gpu_limit))
            name = q.parent
        return out


class QueueStore:
    """Each queue kind's objects by (namespace, name); a kind listed is known (a 404 makes
    it known and empty), one neither listed nor absent is unknown."""

    def __init__(self) -> None:
        self._items: dict[str, dict[tuple[str, str], Any]] = {}
        self._absent: set[str] = set()
        self._view: tuple[
            dict[str, dict[str, str]] | None,
            Mapping[str, ClusterQueue] | None,
            Mapping[str, Mapping[str, str]] | None,
            Mapping[str, KaiQueue] | None,
        ] = (None, None, None, None)

    @classmethod
    def from_objects(cls, sections: Mapping[str, Iterable[Mapping[str, Any]] | None]) -> QueueStore:
        """From a snapshot's sections (cache kind -> objects; None: the section left out)."""
        store = cls()
        for kind, objects in sections.items():
            if objects is not None:
                store.replace(kind, [reduce(kind, o) for o in objects])
        return store

    def replace(self, kind: str, items: Iterable[tuple[str, str, Any]]) -> None:
        self._items[kind] = {(ns, name): value for ns, name, value in items}
        self._absent.discard(kind)
        self._rebuild()

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        items = dict(self._items.get(kind, {}))
        if value is None:
            items.pop((namespace, name), None)
        else:
            items[(namespace, name)] = value
        self._items[kind] = items
        self._rebuild()

    def not_served(self, kind: str, status: int) -> bool:
        """Whether a failed list is the answer: 404 (not installed: known, none) or 403 (not
        readable: unknown). Anything else is an error to retry."""
        if status not in (404, 403):
            return False
        self._items.pop(kind, None)
        if status == 404:
            self._absent.add(kind)
        else:
            self._absent.discard(kind)
            log.warning("%s: not allowed to list them (403); queues are unknown", kind)
        self._rebuild()
        return True

    def _kind(self, plural: str) -> dict[tuple[str, str], Any] | None:
        """A Kueue kind's objects in the newest version served; None: unknown."""
        for version in KUEUE_VERSIONS:
            kind = plural if version == KUEUE_VERSIONS[0] else f"{plural}.{version}"
            if kind in self._items:
                return self._items[kind]
            if kind not in self._absent:
                return None  # neither listed nor known absent: unknown
        return {}  # no version served: Kueue is not installed

    def _rebuild(self) -> None:
        local = self._kind(LOCAL)
        by_namespace: dict[str, dict[str, str]] | None = None
        if local is not None:
            by_namespace = {}
            for (ns, name), target in local.items():
                by_namespace.setdefault(ns, {})[name] = target
        cluster = self._kind(CLUSTER)
        flavors = self._kind(FLAVOR)
        kai = self._items.get(KAI, {} if KAI in self._absent else None)
        self._view = (
            by_namespace,
            None if cluster is None else {n: v for (_, n), v in cluster.items()},
            None if flavors is None else {n: v for (_, n), v in flavors.items()},
            None if kai is None else {n: v for (_, n), v in kai.items()},
        )

    def facts_for(self, namespace: str) -> QueueFacts | None:
        """The queues as one namespace sees them; None while no queue kind is known at all."""
        local, cluster, flavors, kai = self._view
        if local is None and cluster is None and kai is None:
            return None
        return QueueFacts(
            None if local is None else local.get(namespace, _NO_LOCAL), cluster, flavors, kai
        )

    def count(self) -> int:
        return sum(len(v) for v in self._items.values())
