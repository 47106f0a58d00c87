"""One store per kind of fact, all with the same small protocol, and the set a source holds.

Each store keeps one kind (or a family of kinds: DRA's, the queues', the autoscalers') as the
compact values its reducer makes of the API objects (`webhook.facts.watched.WATCHED` names the
reducer and the store of every watched kind), and answers four calls:

- `replace(kind, items)`: a whole list, as (namespace, name, value): what was there is gone;
- `put(kind, namespace, name, value)`: one watch event, the value as it is now or None
  (deleted, or nothing the rules read);
- `not_served(kind, status)`: whether a failed list is the answer rather than an error (404:
  the API is not served, known empty; 403: not allowed, unknown), warned in the kind's words;
- `facts_for(namespace)`: the part of one namespace's `Facts` the store holds.

Writers hold the source's lock (the live cache's, or the snapshot loader alone) and replace
the values they change rather than edit them, so a `Facts` handed to a review never changes
under it. `Stores` is the whole set, and builds one `Facts` per review: the live cache and the
snapshot read through the same stores, so they say the same of the same objects.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, Protocol

from webhook.facts.dra import DraCache
from webhook.facts.model import (
    EMPTY_USAGE,
    GPU_PRODUCT_LABEL,
    TERMINATED,
    Facts,
    Node,
    NodeIndex,
    PodGpus,
    PriorityClass,
    Provisioned,
    Quota,
    Usage,
)
from webhook.facts.provisioning import listed_shapes
from webhook.facts.queues import QueueStore
from webhook.facts.servingruntimes import RuntimeStore
from webhook.facts.usages import NamespaceUsages
from webhook.facts.webhookconfigs import WebhookTimeouts
from webhook.podrequest import memory_of
from webhook.quantity import Amount

__all__ = [
    "UNTOLD",
    "ClassStore",
    "ConfigMapStore",
    "Holds",
    "Item",
    "NamespaceStore",
    "NodeStore",
    "PodStore",
    "ProvisioningStore",
    "QuotaStore",
    "Store",
    "Stores",
]

log = logging.getLogger("gpu-admission.cache")

# One object as a store keeps it: (namespace, name, reduced value); "" for cluster-scoped.
Item = tuple[str, str, Any]

_NO_KEYS: Mapping[str, Mapping[str, str]] = MappingProxyType({})
_NO_CLAIMS: Mapping[str, Mapping[str, Amount]] = MappingProxyType({})


class Store(Protocol):
    """What every store answers (the reader's `facts_for` returns each store's own part)."""

    def replace(self, kind: str, items: Iterable[Item]) -> None: ...

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None: ...

    def not_served(self, kind: str, status: int) -> bool: ...

    def facts_for(self, namespace: str) -> object: ...


class Holds(Protocol):
    """This replica's GPU holds (`webhook.facts.reservations.Reservations`): a pod that shows
    up in the watch ends its hold."""

    def release_for(self, seen: PodGpus) -> None: ...

    def release_listed(self, pods: Iterable[PodGpus]) -> None: ...


class PodStore:
    """GPU pods (non-GPU pods are never kept) and each namespace's usage, kept incrementally
    so a review's usage is one lookup at any cluster size."""

    def __init__(self, holds: Holds | None = None) -> None:
        self.holds = holds
        self._pods: dict[tuple[str, str], PodGpus] = {}
        self._usage: dict[str, Usage] = {}

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        pods: dict[tuple[str, str], PodGpus] = {}
        usage: dict[str, Usage] = {}
        for namespace, name, pod in items:
            pods[(namespace, name)] = pod
            if pod.phase not in TERMINATED:
                total = usage.get(namespace)
                if total is None:
                    total = usage[namespace] = Usage()
                total.add(pod)
        self._pods, self._usage = pods, usage
        if self.holds is not None:
            self.holds.release_listed(pods.values())

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        key = (namespace, name)
        old = self._pods.pop(key, None)
        if old is not None and old.phase not in TERMINATED:
            self._count(old, -1)
        if value is None:
            return
        self._pods[key] = value
        if value.phase not in TERMINATED:
            self._count(value, 1)
        if old is None and self.holds is not None:
            self.holds.release_for(value)

    def _count(self, pod: PodGpus, sign: int) -> None:
        """A new usage total for the pod's namespace; readers may hold the old one."""
        self._usage[pod.namespace] = self._usage.get(pod.namespace, EMPTY_USAGE).plus([pod], sign)

    def not_served(self, kind: str, status: int) -> bool:
        return False  # every cluster serves pods: a failure is an error to retry

    def facts_for(self, namespace: str) -> Usage:
        return self._usage.get(namespace, EMPTY_USAGE)

    def usage_table(self) -> Mapping[str, Usage]:
        """Every namespace's usage (read at the moment it is asked: a relist replaces it)."""
        return self._usage

    def count(self) -> int:
        return len(self._pods)


class NamespaceStore:
    """Namespaces and their labels; a namespace not there is one the source does not know."""

    def __init__(self) -> None:
        self._labels: dict[str, dict[str, str]] = {}

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        self._labels = {name: labels for _, name, labels in items}

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        if value is None:
            self._labels.pop(name, None)
        else:
            self._labels[name] = value

    def not_served(self, kind: str, status: int) -> bool:
        return False

    def facts_for(self, namespace: str) -> Mapping[str, str] | None:
        return self._labels.get(namespace)

    def table(self) -> Mapping[str, Mapping[str, str]]:
        return self._labels


class NodeStore:
    """Nodes by name, and the `NodeIndex` reviews read, rebuilt when a node changes in a way
    the rules read (a status heartbeat changes nothing)."""

    def __init__(self) -> None:
        self._nodes: dict[str, Node] = {}
        self._index = NodeIndex()

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        listed = [node for _, _, node in items]
        self._nodes = {node.name: node for node in listed}
        self._index = NodeIndex(listed)

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        if self._nodes.get(name) == value:
            return  # a status heartbeat: nothing the rules read has changed
        if value is None:
            self._nodes.pop(name, None)
        else:
            self._nodes[name] = value
        self._index = NodeIndex(self._nodes.values())

    def not_served(self, kind: str, status: int) -> bool:
        return False

    def facts_for(self, namespace: str) -> NodeIndex:
        return self._index

    def product(self, name: str) -> str:
        """The GPU product of a node (a pod bound there runs on it), "" when unknown."""
        node = self._nodes.get(name)
        return node.labels.get(GPU_PRODUCT_LABEL, "") if node is not None else ""

    def memory(self, name: str) -> int | None:
        """The GPU memory a node's labels state, for sharing schedulers' memory shares."""
        node = self._nodes.get(name)
        return memory_of(node.labels) if node is not None else None


class QuotaStore:
    """ResourceQuotas by namespace, each namespace's also as the tuple a review reads."""

    def __init__(self) -> None:
        self._by_name: dict[str, dict[str, Quota]] = {}
        self._tuples: dict[str, tuple[Quota, ...]] = {}

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        by_name: dict[str, dict[str, Quota]] = {}
        listed: dict[str, list[Quota]] = {}
        for namespace, name, quota in items:
            by_name.setdefault(namespace, {})[name] = quota
            listed.setdefault(namespace, []).append(quota)
        self._by_name = by_name
        self._tuples = {namespace: tuple(quotas) for namespace, quotas in listed.items()}

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        quotas = dict(self._by_name.get(namespace, {}))
        if value is None:
            quotas.pop(name, None)
        else:
            quotas[name] = value
        self._by_name[namespace] = quotas
        self._tuples[namespace] = tuple(quotas.values())

    def not_served(self, kind: str, status: int) -> bool:
        return False

    def facts_for(self, namespace: str) -> tuple[Quota, ...]:
        return self._tuples.get(namespace, ())


class ClassStore:
    """PriorityClasses by name: one map, replaced whole on every change."""

    def __init__(self) -> None:
        self._classes: dict[str, PriorityClass] = {}

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        self._classes = {name: value for _, name, value in items}

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        classes = dict(self._classes)
        if value is None:
            classes.pop(name, None)
        else:
            classes[name] = value
        self._classes = classes

    def not_served(self, kind: str, status: int) -> bool:
        return False

    def facts_for(self, namespace: str) -> Mapping[str, PriorityClass]:
        return self._classes


class ConfigMapStore:
    """The keys of ConfigMaps (or a snapshot's Secrets) that `envFrom` could turn into
    NVIDIA_VISIBLE_DEVICES, by namespace and name; an object with none is not kept (absent
    reads as "no such key", as it is). Unknown (None) until listed."""

    def __init__(self) -> None:
        self._maps: dict[str, dict[str, dict[str, str]]] = {}
        self._known = False

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        maps: dict[str, dict[str, dict[str, str]]] = {}
        for namespace, name, keys in items:
            if keys:
                maps.setdefault(namespace, {})[name] = keys
            elif name in maps.get(namespace, {}):  # a later entry of the same name replaces it
                del maps[namespace][name]
        self._maps, self._known = maps, True

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        """A new map for the namespace when its relevant keys changed, else nothing: most
        events (any edit of a ConfigMap without such a key) touch nothing."""
        current = self._maps.get(namespace, {})
        if current.get(name) == (value or None):
            return
        maps = dict(current)
        if value:
            maps[name] = value
        else:
            maps.pop(name, None)
        if maps:
            self._maps[namespace] = maps
        else:
            self._maps.pop(namespace, None)

    def not_served(self, kind: str, status: int) -> bool:
        """A 403 is an answer (the keys are unknown: `envFrom` of one is judged as possibly
        `all`); every cluster serves ConfigMaps, so anything else is an error."""
        if status != 403:
            return False
        log.warning("%s: not allowed to list them (403); envFrom is unknown", kind)
        return True

    def facts_for(self, namespace: str) -> Mapping[str, Mapping[str, str]] | None:
        if not self._known:
            return None
        return self._maps.get(namespace, _NO_KEYS)


# An autoscaler object whose shapes cannot be told (`provisioning`'s None): a value apart
# from None, which `put` reads as "deleted".
UNTOLD: tuple[Node, ...] = (Node("cannot be told", {}, {}),)


class ProvisioningStore:
    """The autoscalers' objects as the GPU node shapes they can create, per kind.

    A listed kind holds its objects' shapes; a kind found not installed (404) holds nothing;
    one in neither is unknown (not listed yet, or forbidden), and so is the whole answer
    (`listed_shapes`), rebuilt on each change. A snapshot's answer is given whole (`of`).
    """

    def __init__(self, kinds: tuple[str, ...] = ()) -> None:
        self._kinds = kinds
        self._listed: dict[str, dict[tuple[str, str], tuple[Node, ...] | None]] = {}
        self._absent: set[str] = set()
        self._facts: Provisioned | None = None

    @classmethod
    def of(cls, provisioned: Provisioned | None) -> ProvisioningStore:
        """A store that answers `provisioned` (a snapshot's, read from its sections)."""
        store = cls()
        store._facts = provisioned
        return store

    def replace(self, kind: str, items: Iterable[Item]) -> None:
        self._listed[kind] = {(ns, name): _told(shapes) for ns, name, shapes in items}
        self._absent.discard(kind)
        self._changed()

    def put(self, kind: str, namespace: str, name: str, value: Any) -> None:
        shapes = dict(self._listed.get(kind, {}))
        if value is None:
            shapes.pop((namespace, name), None)
        else:
            shapes[(namespace, name)] = _told(value)
        self._listed[kind] = shapes
        self._changed()

    def not_served(self, kind: str, status: int) -> bool:
        if status not in (404, 403):
            return False
        self._listed.pop(kind, None)
        if status == 404:
            self._absent.add(kind)
            log.info("%s: not installed (404)", kind)
        else:
            self._absent.discard(kind)
            log.warning(
                "%s: not allowed to list them (403); the GPU nodes the cluster can create are "
                "unknown, so a missing one is a warning",
                kind,
            )
        self._changed()
        return True

    def _changed(self) -> None:
        self._facts = listed_shapes(self._kinds, self._listed, self._absent)

    def facts_for(self, namespace: str) -> Provisioned | None:
        return self._facts


def _told(shapes: tuple[Node, ...]) -> tuple[Node, ...] | None:
    return None if shapes is UNTOLD else shapes


def _no_claims() -> Mapping[str, Mapping[str, Amount]]:
    return _NO_CLAIMS


class Stores:
    """Every store a source holds, and the `Facts` of one namespace built from them.

    The optional families (DRA, serving runtimes, webhook configurations, queues) may be
    None: a snapshot without their sections knows nothing of them. `named` finds a store by
    the name `webhook.facts.watched.WATCHED` gives it.
    """

    def __init__(
        self,
        *,
        holds: Holds | None = None,
        provisioning: ProvisioningStore | None = None,
        dra: DraCache | None = None,
        runtimes: RuntimeStore | None = None,
        webhooks: WebhookTimeouts | None = None,
        queues: QueueStore | None = None,
    ) -> None:
        self.pods = PodStore(holds)
        self.namespaces = NamespaceStore()
        self.nodes = NodeStore()
        self.quotas = QuotaStore()
        self.classes = ClassStore()
        self.config_maps = ConfigMapStore()
        self.secrets = ConfigMapStore()  # never watched: only a snapshot may know them
        self.provisioning = provisioning if provisioning is not None else ProvisioningStore()
        self.dra = dra
        self.runtimes = runtimes
        self.webhooks = webhooks
        self.queues = queues
        claims: Callable[[], Mapping[str, Mapping[str, Amount]]] = _no_claims
        if dra is not None:
            claims = dra.claim_devices
        # What every namespace holds, for budgets over several namespaces.
        self.usages = NamespaceUsages(self.pods.usage_table, self.namespaces.table, claims)
        named: dict[str, Any] = {
            "pods": self.pods,
            "namespaces": self.namespaces,
            "nodes": self.nodes,
            "quotas": self.quotas,
            "classes": self.classes,
            "config_maps": self.config_maps,
            "provisioning": self.provisioning,
            "dra": dra,
            "runtimes": runtimes,
            "webhooks": webhooks,
            "queues": queues,
        }
        self.named: dict[str, Store] = {k: v for k, v in named.items() if v is not None}

    def facts_for(self, namespace: str, age_seconds: float | None) -> Facts:
        """One namespace's facts: every part a lookup (every review reads here)."""
        dra, runtimes, queues = self.dra, self.runtimes, self.queues
        return Facts.taken(
            namespace,
            namespace_labels=self.namespaces.facts_for(namespace),
            quotas=self.quotas.facts_for(namespace),
            usage=self.pods.facts_for(namespace),
            priority_classes=self.classes.facts_for(namespace),
            nodes=self.nodes.facts_for(namespace),
            age_seconds=age_seconds,
            config_maps=self.config_maps.facts_for(namespace),
            secrets=self.secrets.facts_for(namespace),
            provisionable=self.provisioning.facts_for(namespace),
            serving_runtimes=None if runtimes is None else runtimes.facts_for(namespace),
            dra=None if dra is None else dra.facts_for(namespace),
            usages=self.usages,  # every namespace's, for budgets over several
            queues=None if queues is None else queues.facts_for(namespace),
        )  # unheld: holds are ReservingFacts' to add

    def served_names(self) -> frozenset[str]:
        """The plain resource names DRA DeviceClasses serve (asked on every review)."""
        return frozenset() if self.dra is None else self.dra.served_names()

    def webhook_seconds(self) -> float | None:
        """The longest the validating webhooks on pods may take; None: unknown."""
        return None if self.webhooks is None else self.webhooks.longest()
