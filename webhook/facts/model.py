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
from typing import Any, Protocol

from webhook.facts.dra import DraFacts
from webhook.facts.queues import QueueFacts
from webhook.facts.quotascopes import ScopeTerm, pod_matches
from webhook.namepatterns import NamePatterns
from webhook.quantity import Amount

__all__ = [
    "GPU_PRODUCT_LABEL",
    "TERMINATED",
    "Facts",
    "FactsSource",
    "HeldIn",
    "ModelFormat",
    "Node",
    "NodeIndex",
    "PodGpus",
    "PriorityClass",
    "Provisioned",
    "Quota",
    "ServingRuntime",
    "ServingRuntimes",
    "Usage",
    "Usages",
]

GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
TERMINATED = frozenset({"Succeeded", "Failed"})


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str]
    gpus: Mapping[str, Amount]  # allocatable GPU resources only
    unschedulable: bool = False
    # (key, value, effect) of each NoSchedule/NoExecute taint; PreferNoSchedule keeps no pod off.
    taints: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Quota:
    """A native ResourceQuota, reduced to what GPU rules read. A quota with `scopes` counts
    only the pods they match (`webhook.facts.quotascopes`); none: every pod."""

    namespace: str
    name: str
    hard: Mapping[str, Amount]
    used: Mapping[str, Amount]
    scopes: tuple[ScopeTerm, ...] = ()

    def counts(self, spec: Mapping[str, Any], default_class: str = "") -> bool:
        """Whether this quota counts (and may refuse) a pod with this spec."""
        return not self.scopes or pod_matches(self.scopes, spec, default_class)


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int
    preemption_policy: str = "PreemptLowerPriority"
    global_default: bool = False


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
class PodGpus:
    """What the cache keeps of a pod: enough for quota and usage, ~200 bytes, not the object."""

    namespace: str
    name: str
    phase: str
    gpus: Mapping[str, Amount]
    node: str = ""
    product: str = ""  # the node's GPU product once scheduled, else the pod's selector
    priority_class: str = ""
    # A pending pod that could land on several products (an admitted pod's hold) is charged
    # to each of them: it may land on any. Empty: `product` alone. Shared tuples, kept last
    # so positional construction stays as it was.
    reach: tuple[str, ...] = ()

    def __init__(
        self,
        namespace: str,
        name: str,
        phase: str,
        gpus: Mapping[str, Amount],
        node: str = "",
        product: str = "",
        priority_class: str = "",
        reach: tuple[str, ...] = (),
    ) -> None:
        self.namespace = namespace
        self.name = name
        self.phase = phase
        self.gpus = gpus
        self.node = node
        self.product = product
        self.priority_class = priority_class
        self.reach = reach

    @property
    def products(self) -> tuple[str, ...]:
        """The products this pod's GPUs count against."""
        if self.reach:
            return self.reach
        return (self.product,) if self.product else ()


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(init=False)
class Usage:
    """GPUs held by a namespace's non-terminated pods: by resource, and by (resource, product).

    A pod counts once per resource but under every product it may hold (`PodGpus.products`):
    a pending pod that could land on two budgeted products must not slip past either cap.

    A source builds one with `add` while it is private; once handed out it is never changed
    again (`plus` makes the next one), so a request holding it reads a consistent total.
    """

    by_resource: dict[str, Amount] = field(default_factory=lambda: defaultdict(int))
    by_product: dict[tuple[str, str], Amount] = field(default_factory=lambda: defaultdict(int))

    def __init__(
        self,
        by_resource: dict[str, Amount] | None = None,
        by_product: dict[tuple[str, str], Amount] | None = None,
    ) -> None:
        self.by_resource = defaultdict(int) if by_resource is None else by_resource
        self.by_product = defaultdict(int) if by_product is None else by_product

    def add(self, pod: PodGpus, sign: int = 1) -> None:
        products = pod.products
        for name, amount in pod.gpus.items():
            self.by_resource[name] += sign * amount
            for product in products:
                self.by_product[(name, product)] += sign * amount

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


class HeldIn(Protocol):
    """This replica's holds (`webhook.facts.reservations.Reservations`), by namespace."""

    def namespaces(self) -> list[str]: ...

    def usage(self, namespace: str) -> Usage | None: ...


class Usages(Protocol):
    """What every namespace holds (`webhook.facts.usages.NamespaceUsages`): what a budget over
    several namespaces reads of the namespaces besides the pod's own."""

    def namespaces(self) -> list[str]:
        """Every namespace that holds any GPU, device or hold."""
        ...

    def labels(self, namespace: str) -> Mapping[str, str] | None: ...

    def usage(self, namespace: str) -> Usage:
        """Its pods, claims and this replica's holds, every one of them."""
        ...

    def with_holds(self, holds: HeldIn) -> Usages:
        """The same, counting this replica's holds too."""
        ...


def _is_gpu_label(key: str, prefixes: tuple[str, ...]) -> bool:
    return key.startswith(prefixes)


class NodeIndex:
    """The cluster's nodes, replaced whole when one changes, with their GPU pools.

    A cluster has thousands of nodes but a handful of GPU pools, and schedulability only reads
    GPU labels and GPU capacity: pools are worked out once per node set (and per set of GPU
    label prefixes, which a rule set fixes), not once per request.
    """

    __slots__ = ("_by_name", "_pools", "nodes")

    def __init__(self, nodes: Iterable[Node] = ()) -> None:
        self.nodes: tuple[Node, ...] = tuple(nodes)
        self._pools: dict[tuple[str, ...], tuple[Node, ...]] = {}
        self._by_name: dict[str, Node] | None = None

    def node(self, name: str) -> Node | None:
        """The node a pod is bound to (`spec.nodeName`): a dict lookup, built once per index."""
        by_name = self._by_name
        if by_name is None:  # two threads may both build it: same value, last one kept
            by_name = self._by_name = {n.name: n for n in self.nodes}
        return by_name.get(name)

    def pools(self, prefixes: tuple[str, ...]) -> tuple[Node, ...]:
        """Schedulable nodes grouped by their GPU labels, each with its largest allocatable."""
        found = self._pools.get(prefixes)
        if found is None:
            if len(self._pools) >= 8:  # a new rule set with other prefixes: forget the old
                self._pools.clear()
            found = self._pools[prefixes] = self._group(prefixes)
        return found

    def _group(self, prefixes: tuple[str, ...]) -> tuple[Node, ...]:
        grouped: dict[tuple[tuple[str, str], ...], dict[str, Amount]] = {}
        for n in self.nodes:
            if n.unschedulable:
                continue
            labels = tuple(
                sorted((k, v) for k, v in n.labels.items() if _is_gpu_label(k, prefixes))
            )
            most = grouped.setdefault(labels, {})
            for name, amount in n.gpus.items():
                most[name] = max(most.get(name, 0), amount)
        return tuple(Node("pool", dict(labels), gpus) for labels, gpus in grouped.items())


@dataclass(frozen=True, slots=True)
class ModelFormat:
    """One entry of a runtime's `supportedModelFormats`: what KServe's selection reads."""

    name: str
    version: str | None = None
    auto_select: bool = False
    priority: int | None = None


@dataclass(frozen=True, slots=True)
class ServingRuntime:
    """A KServe ServingRuntime or ClusterServingRuntime, reduced to what selecting it and
    knowing its /dev/shm take (`webhook.facts.servingruntimes` reads one)."""

    name: str
    cluster: bool = False  # a ClusterServingRuntime
    formats: tuple[ModelFormat, ...] = ()
    protocols: tuple[str, ...] = ()  # protocolVersions; empty: any
    disabled: bool = False
    multi_model: bool = False  # ModelMesh: never chosen for a single-model predictor
    multi_node: bool = False  # has a workerSpec: chosen only for predictors with one
    # Names of its containers that mount something at /dev/shm (KServe merges the predictor's
    # model container over `kserve-container`), and of its pod volumes (merged by name).
    shm_containers: frozenset[str] = frozenset()
    volumes: frozenset[str] = frozenset()
    # The same for its workerSpec, which a predictor's workerSpec is merged over.
    worker_shm_containers: frozenset[str] = frozenset()
    worker_volumes: frozenset[str] = frozenset()

    def priority(self, model_format: str) -> int | None:
        """The priority KServe sorts by: that of the first entry with the format's name."""
        return next((f.priority for f in self.formats if f.name == model_format), None)


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
class ServingRuntimes:
    """The runtimes a predictor in one namespace may use: its namespace's, then the cluster's."""

    namespaced: Mapping[str, ServingRuntime]
    cluster: Mapping[str, ServingRuntime]

    def __init__(
        self, namespaced: Mapping[str, ServingRuntime], cluster: Mapping[str, ServingRuntime]
    ) -> None:
        self.namespaced = namespaced
        self.cluster = cluster


# A compiled value: never edited once built ("Compiled values", docs/development.md).
@dataclass(slots=True, init=False)
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
    # ConfigMaps and Secrets of the namespace that pods may load with envFrom, each keyed by
    # name and holding only its keys that some prefix could turn into NVIDIA_VISIBLE_DEVICES
    # or a sharing scheduler's device keys (`visible_devices_keys`); a name that is absent has
    # no such key. None for a kind the
    # source does not know; the isolation rules then judge such a key as possibly "all".
    config_maps: Mapping[str, Mapping[str, str]] | None = None
    secrets: Mapping[str, Mapping[str, str]] | None = None
    # GPU node shapes the cluster's autoscalers can create (Karpenter NodePools, Cluster API
    # groups scaled from zero; `webhook.facts.provisioning.Provisioning`), read only from the
    # namespaces the rules trust. None: the source does not know, so a missing node may still
    # come. A value, even empty, means the source read the cluster's autoscaling objects.
    provisionable: Provisioned | None = None
    # KServe's ServingRuntimes of the namespace and the ClusterServingRuntimes: which runtime
    # an InferenceService predictor is merged over, and whether that one brings /dev/shm.
    # None: the source does not know them (empty maps: KServe is not installed).
    serving_runtimes: ServingRuntimes | None = None
    # DRA: DeviceClasses, and the namespace's ResourceClaimTemplates and ResourceClaims
    # (`webhook.facts.dra`). None: the source knows nothing of DRA.
    dra: DraFacts | None = None
    # This replica's holds on resources a ResourceQuota of the namespace caps, left out of
    # `usage` (the apiserver counts those exactly). A budget tighter than that quota is not
    # kept by it, so it adds these back. None: no such hold.
    unheld: Usage | None = None
    # What every other namespace holds, for budgets over several namespaces. None: the source
    # knows its namespaces one at a time only.
    usages: Usages | None = None
    # Kueue's and KAI's queues as this namespace sees them (`webhook.facts.queues`). None:
    # the source knows none of their kinds.
    queues: QueueFacts | None = None

    def __init__(
        self,
        namespace: str,
        namespace_labels: Mapping[str, str] | None,
        quotas: tuple[Quota, ...],
        usage: Usage,
        priority_classes: Mapping[str, PriorityClass],
        nodes: NodeIndex,
        age_seconds: float | None = None,
        config_maps: Mapping[str, Mapping[str, str]] | None = None,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        provisionable: Provisioned | None = None,
        serving_runtimes: ServingRuntimes | None = None,
        dra: DraFacts | None = None,
        unheld: Usage | None = None,
        usages: Usages | None = None,
        queues: QueueFacts | None = None,
    ) -> None:
        self.namespace = namespace
        self.namespace_labels = namespace_labels
        self.quotas = quotas
        self.usage = usage
        self.priority_classes = priority_classes
        self.nodes = nodes
        self.age_seconds = age_seconds
        self.config_maps = config_maps
        self.secrets = secrets
        self.provisionable = provisionable
        self.serving_runtimes = serving_runtimes
        self.dra = dra
        self.unheld = unheld
        self.usages = usages
        self.queues = queues

    @classmethod
    def taken(
        cls,
        namespace: str,
        *,
        namespace_labels: Mapping[str, str] | None,
        quotas: tuple[Quota, ...],
        usage: Usage,
        priority_classes: Mapping[str, PriorityClass],
        nodes: NodeIndex,
        age_seconds: float | None = None,
        config_maps: Mapping[str, Mapping[str, str]] | None = None,
        secrets: Mapping[str, Mapping[str, str]] | None = None,
        provisionable: Provisioned | None = None,
        serving_runtimes: ServingRuntimes | None = None,
        dra: DraFacts | None = None,
        unheld: Usage | None = None,
        usages: Usages | None = None,
        queues: QueueFacts | None = None,
    ) -> Facts:
        """The facts a source takes for one namespace, every field by name. For sources that
        run interpreted: called with keywords, this costs what the compiled constructor costs
        called positionally (which it then is, here), not what it costs with keywords."""
        return cls(
            namespace,
            namespace_labels,
            quotas,
            usage,
            priority_classes,
            nodes,
            age_seconds,
            config_maps,
            secrets,
            provisionable,
            serving_runtimes,
            dra,
            unheld,
            usages,
            queues,
        )

    def priority_class(self, name: str) -> PriorityClass | None:
        return self.priority_classes.get(name)

    def with_usage(
        self, usage: Usage, unheld: Usage | None = None, usages: Usages | None = None
    ) -> Facts:
        """The same facts with another usage (this replica's holds added), and `usages` when
        given (the other namespaces' with the holds too): a new value.

        Field by field rather than `dataclasses.replace`, which reads the fields' metadata on
        every call, several µs a review in a namespace with holds."""
        return Facts(
            self.namespace,
            self.namespace_labels,
            self.quotas,
            usage,
            self.priority_classes,
            self.nodes,
            self.age_seconds,
            self.config_maps,
            self.secrets,
            self.provisionable,
            self.serving_runtimes,
            self.dra,
            unheld,
            self.usages if usages is None else usages,
            self.queues,
        )

    def with_dra(self, dra: DraFacts | None) -> Facts:
        """The same facts with other DRA objects (an audit's files laid over the snapshot's):
        a new value."""
        return Facts(
            self.namespace,
            self.namespace_labels,
            self.quotas,
            self.usage,
            self.priority_classes,
            self.nodes,
            self.age_seconds,
            self.config_maps,
            self.secrets,
            self.provisionable,
            self.serving_runtimes,
            dra,
            self.unheld,
            self.usages,
            self.queues,
        )


class Provisioned(Protocol):
    """What the autoscalers can create (`webhook.facts.provisioning.Provisioning`)."""

    def shapes(self, trusted: NamePatterns) -> tuple[Node, ...] | None:
        """The shapes of cluster-scoped objects and of those in `trusted` namespaces; None
        when one of them cannot be told."""
        ...


class FactsSource(Protocol):
    """Anything that can hand out the facts for one namespace: a snapshot, a cache, a list."""

    def facts_for(self, namespace: str) -> Facts: ...

    def node_index(self) -> NodeIndex:
        """The nodes alone, with no per-namespace work: the fast path asks on every request."""
        ...

    def served_names(self) -> frozenset[str]:
        """Plain resource names DRA DeviceClasses serve (`extendedResourceName`), with no
        per-namespace work: the fast path must not pass a pod asking one of them."""
        ...
