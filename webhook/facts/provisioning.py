"""What the cluster could create: autoscaler objects read into node shapes (pure, no I/O).

GPU pools often sit at zero: the GPU node a pod needs is created for it. `gpu-schedulable`
may call a pod impossible only when no existing node *and* no shape the autoscalers can
create would run it. Two sources are read here, both as the API server returns them:

- Cluster API node groups scaled from zero (`MachineSet`, `MachineDeployment`,
  `MachinePool`), read as
  cluster-autoscaler reads them: the node-group max-size annotation says whether the group
  may grow, the `capacity.cluster-autoscaler.kubernetes.io/*` annotations say what its
  nodes carry (GPU count and resource name, labels, taints).
- Karpenter `NodePool`s (`karpenter.sh/v1`). A NodePool names requirements, not instance
  types, so its GPU count is only known where a requirement states it; otherwise the shape
  offers an unbounded count (`ANY_COUNT`) of the resources it may offer.

Every function answers None for "cannot tell" (an object too open to be written as a few
node shapes): the caller then treats provisioning as unknown, which never denies. A wrong
"known" would deny pods that would have run; a wrong "unknown" only warns.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.facts.model import Node
from webhook.namepatterns import NamePatterns
from webhook.quantity import Amount, QuantityError, parse_quantity

__all__ = [
    "ANY_COUNT",
    "Provisioning",
    "by_namespace",
    "listed",
    "machine_group_shapes",
    "node_pool_shapes",
    "provisionable_shapes",
    "provisioning",
]

# ---- Cluster API (cluster-autoscaler's clusterapi provider) --------------------------------

CAPACITY = "capacity.cluster-autoscaler.kubernetes.io/"
GPU_COUNT = CAPACITY + "gpu-count"
GPU_TYPE = CAPACITY + "gpu-type"  # the resource name, e.g. nvidia.com/gpu
LABELS = CAPACITY + "labels"  # "k1=v1,k2=v2"
TAINTS = CAPACITY + "taints"  # "k1=v1:NoSchedule,k2:NoExecute"
CPU, MEMORY = CAPACITY + "cpu", CAPACITY + "memory"
MAX_SIZE = (
    "cluster.x-k8s.io/cluster-api-autoscaler-node-group-max-size",
    "cluster.k8s.io/cluster-api-autoscaler-node-group-max-size",  # the deprecated group
)
# Template labels Cluster API copies onto its nodes (and cluster-autoscaler reads likewise).
_PROPAGATED = (
    "node-role.kubernetes.io/",
    "node-restriction.kubernetes.io/",
    "node.cluster.x-k8s.io/",
)

# Taint effects that keep a pod off a node; PreferNoSchedule only steers the scheduler.
_KEEPING_OFF = frozenset({"NoSchedule", "NoExecute"})


def _meta(obj: Mapping[str, Any], *path: str) -> Any:
    """obj[path[0]][path[1]]... or None, whatever the object holds on the way."""
    cur: Any = obj
    for key in path:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(key)
    return cur


def _strings(raw: Any) -> dict[str, str]:
    if not isinstance(raw, Mapping):
        return {}
    return {str(k): str(v) for k, v in raw.items() if isinstance(v, str | int | float)}


def _spec_taints(raw: Any) -> list[tuple[str, str, str]]:
    if not isinstance(raw, list):
        return []
    return [
        (str(t.get("key") or ""), str(t.get("value") or ""), str(t["effect"]))
        for t in raw
        if isinstance(t, Mapping) and t.get("effect") in _KEEPING_OFF
    ]


def _annotation_taints(text: str) -> list[tuple[str, str, str]]:
    """`key=value:Effect` or `key:Effect`, comma-separated, as cluster-autoscaler parses it."""
    out = []
    for item in text.split(","):
        head, sep, effect = item.strip().rpartition(":")
        if not sep or effect not in _KEEPING_OFF:
            continue
        key, _, value = head.partition("=")
        if key:
            out.append((key, value, effect))
    return out


def machine_group_shapes(obj: Mapping[str, Any]) -> tuple[Node, ...] | None:
    """The GPU node a MachineSet, MachineDeployment or MachinePool can add, if cluster-autoscaler
    may grow it (the same annotations on all three).

    () when it cannot add a GPU node: no max size (not an autoscaled group) or a max of 0, or
    capacity annotations that state no GPU. None when it may grow but states no capacity at
    all: cluster-autoscaler may then read the capacity from the infrastructure template,
    which is not read here.
    """
    notes = _strings(_meta(obj, "metadata", "annotations"))
    most = next((notes[k] for k in MAX_SIZE if k in notes), "")
    try:
        if int(most) <= 0:
            return ()
    except ValueError:
        return ()  # missing or unreadable: cluster-autoscaler does not manage this group
    try:
        count = int(notes.get(GPU_COUNT, "0") or "0")
    except ValueError:
        return None
    resource = notes.get(GPU_TYPE, "").strip()
    if count <= 0 or not resource:
        # cluster-autoscaler adds a GPU only with both; with cpu/memory stated and no GPU the
        # group states its nodes have none. With nothing stated the capacity is elsewhere.
        return () if (CPU in notes and MEMORY in notes) else None
    labels = {
        k: v
        for k, v in _strings(_meta(obj, "spec", "template", "metadata", "labels")).items()
        if k.startswith(_PROPAGATED)
    }
    for pair in notes.get(LABELS, "").split(","):
        key, sep, value = pair.strip().partition("=")
        if sep and key:
            labels[key] = value
    taints = {
        (k, e): (k, v, e)
        for k, v, e in _spec_taints(_meta(obj, "spec", "template", "spec", "taints"))
    }
    for k, v, e in _annotation_taints(notes.get(TAINTS, "")):
        taints[(k, e)] = (k, v, e)  # an annotation taint replaces the spec's of key and effect
    name = str(_meta(obj, "metadata", "name") or "")
    kind = str(obj.get("kind") or "MachineSet")
    return (
        Node(
            f"{kind} {name}",
            labels,
            {resource: count},
            taints=tuple(taints.values()),
        ),
    )


# ---- Karpenter ------------------------------------------------------------------------------

# Stands for "as many as a pod may ask": the NodePool does not state its nodes' GPU count
# (Karpenter picks an instance type at launch), so no GPU count can be called too large for
# it. A number rather than a flag keeps the shape a plain `Node` the rule already compares.
ANY_COUNT = 1_000_000

# The GPU resources Karpenter's providers put on instance types. A NodePool that does not
# name its accelerators may offer any of them; a resource outside this list (a MIG profile,
# a renamed time-sliced resource) is never one Karpenter launches a node for.
KARPENTER_GPUS = (
    "nvidia.com/gpu",
    "amd.com/gpu",
    "habana.ai/gaudi",
    "aws.amazon.com/neuron",
    "aws.amazon.com/neuroncore",
    "aws.amazon.com/neurondevice",
)
_BY_MANUFACTURER = {
    "nvidia": ("nvidia.com/gpu",),
    "amd": ("amd.com/gpu",),
    "habana": ("habana.ai/gaudi",),
}
GPU_COUNT_KEYS = ("karpenter.k8s.aws/instance-gpu-count", "karpenter.azure.com/sku-gpu-count")
MANUFACTURER_KEYS = (
    "karpenter.k8s.aws/instance-gpu-manufacturer",
    "karpenter.azure.com/sku-gpu-manufacturer",
)
# AWS instance categories and families (their leading letters) that carry accelerators.
_ACCELERATED = frozenset({"g", "p", "inf", "trn", "dl", "gr"})
_CATEGORY_KEYS = ("karpenter.k8s.aws/instance-category", "karpenter.k8s.aws/instance-family")

# GPU label keys a pod's selector may name (gpu-schedulable's default gpuLabelPrefixes): an
# In of several values becomes one shape per value, so `nodeSelector: {nvidia.com/gpu.product:
# X}` matches the shape with X, and an open value (Exists, NotIn, Gt, Lt) cannot be a shape.
JUDGED = (
    "nvidia.com/",
    "amd.com/",
    "gpu.intel.com/",
    "cloud.google.com/gke-accelerator",
    "k8s.amazonaws.com/accelerator",
)
# Karpenter's own GPU keys are enumerated too (a pod may select `instance-gpu-name`), but an
# open value on them is only left out. Any other key keeps a single In value as a label and
# is otherwise left out: gpu-schedulable does not judge it.
ENUMERATED = (*JUDGED, "karpenter.k8s.aws/instance-gpu", "karpenter.azure.com/sku-gpu")
# Shapes one NodePool may become; a pool more open than this is "cannot tell".
MAX_SHAPES = 16


def _requirements(raw: Any) -> list[tuple[str, str, list[str]]] | None:
    if raw is None:
        return []
    if not isinstance(raw, list):
        return None
    out = []
    for r in raw:
        if not isinstance(r, Mapping) or not isinstance(r.get("key"), str):
            return None
        values = r.get("values") or []
        if not isinstance(values, list):
            return None
        out.append((r["key"], str(r.get("operator") or ""), [str(v) for v in values]))
    return out


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


def _gpu_count(reqs: list[tuple[str, str, list[str]]]) -> Amount | None:
    """The most GPUs a node of the pool may have per its count requirements; ANY_COUNT when
    unstated, 0 when the requirements exclude GPUs, None when unreadable."""
    most = ANY_COUNT
    for key, op, values in reqs:
        if key not in GPU_COUNT_KEYS:
            continue
        if op == "DoesNotExist":
            return 0  # only accelerated instance types carry the label
        if op == "In":
            counts = [_int(v) for v in values]
            if any(c is None for c in counts) or not counts:
                return None
            most = min(most, max(c for c in counts if c is not None))
        elif op == "Lt":
            bound = _int(values[0]) if values else None
            if bound is None:
                return None
            most = min(most, max(bound - 1, 0))
        # Gt, NotIn, Exists: no upper bound
    return most


def _accelerated(reqs: list[tuple[str, str, list[str]]]) -> bool:
    """False when an AWS category or family requirement allows only instances without
    accelerators (e.g. `instance-category In [c, m, r]`)."""
    for key, op, values in reqs:
        if key in _CATEGORY_KEYS and op == "In":
            letters = {m.group(0) for v in values if (m := re.match(r"[a-z]+", v.lower()))}
            if not letters & _ACCELERATED:
                return False
    return True


def _resources(reqs: list[tuple[str, str, list[str]]]) -> tuple[str, ...]:
    for key, op, values in reqs:
        if key in MANUFACTURER_KEYS and op == "In":
            named = [_BY_MANUFACTURER.get(v.lower()) for v in values]
            if all(named):
                return tuple(dict.fromkeys(r for rs in named if rs for r in rs))
    return KARPENTER_GPUS  # unstated, or a manufacturer this list does not know


def _limits(raw: Any) -> dict[str, Amount] | None:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        return None
    out = {}
    for name, value in raw.items():
        try:
            out[str(name)] = parse_quantity(value)
        except QuantityError:
            return None
    return out


def node_pool_shapes(obj: Mapping[str, Any]) -> tuple[Node, ...] | None:
    """The GPU node shapes a Karpenter NodePool can launch: () for none, None for cannot tell.

    Labels are the template's labels plus each requirement's single `In` value; an `In` of
    several values on a GPU label key (ENUMERATED) becomes one shape per value. Any other
    operator on such a key leaves the node's value open, which a shape cannot say: None.
    Karpenter does not launch a node for a pod selecting a label the pool does not define
    (GPU Feature Discovery's labels come only after launch), so leaving it out is right.
    """
    template = _meta(obj, "spec", "template") or {}
    reqs = _requirements(_meta(template, "spec", "requirements"))
    limits = _limits(_meta(obj, "spec", "limits"))
    if reqs is None or limits is None or not isinstance(template, Mapping):
        return None
    count = _gpu_count(reqs)
    if count is None:
        return None
    if limits.get("cpu") == 0 or limits.get("memory") == 0:
        return ()  # a pool limited to nothing launches no node at all
    gpus: dict[str, Amount] = {}
    if count > 0 and _accelerated(reqs):
        for resource in _resources(reqs):
            # A limit caps the pool's total, so also what one node may carry; 0 allows none.
            cap = min(count, limits.get(resource, ANY_COUNT))
            if cap > 0:
                gpus[resource] = cap
    if not gpus:
        return ()
    name = str(_meta(obj, "metadata", "name") or "")
    labels = {"karpenter.sh/nodepool": name, **_strings(_meta(template, "metadata", "labels"))}
    choices: list[tuple[str, list[str]]] = []
    for key, op, values in reqs:
        if key in labels and (op == "Exists" or (op == "In" and labels[key] in values)):
            continue  # the template label already says which
        if op == "In" and len(values) == 1:
            labels[key] = values[0]
        elif op == "In" and values and key.startswith(ENUMERATED):
            choices.append((key, list(dict.fromkeys(values))))
        elif op != "DoesNotExist" and key.startswith(JUDGED):
            return None  # Exists, NotIn, Gt, Lt on a judged GPU label: an open value
    combos = 1
    for _, values in choices:
        combos *= len(values)
    if combos > MAX_SHAPES:
        return None
    taints = tuple(_spec_taints(_meta(template, "spec", "taints")))
    shapes = []
    for picked in itertools.product(*(values for _, values in choices)):
        these = {**labels, **{key: v for (key, _), v in zip(choices, picked, strict=True)}}
        shapes.append(Node(f"NodePool {name}", these, gpus, taints=taints))
    return tuple(shapes)


def provisionable_shapes(
    node_pools: Iterable[Mapping[str, Any]] | None,
    machine_sets: Iterable[Mapping[str, Any]] | None,
    machine_deployments: Iterable[Mapping[str, Any]] | None,
    machine_pools: Iterable[Mapping[str, Any]] | None = None,
) -> tuple[Node, ...] | None:
    """Every shape the listed autoscaler objects can create; None when none was read (each
    argument None: that kind is not known or not installed) or when one object cannot be
    told (see the parsers). A tuple, even empty, means the cluster's autoscaling was read."""
    groups = (machine_sets, machine_deployments, machine_pools)
    if node_pools is None and all(g is None for g in groups):
        return None
    out: list[Node] = []
    for objects, parse in (
        (node_pools, node_pool_shapes),
        (machine_sets, machine_group_shapes),
        (machine_deployments, machine_group_shapes),
        (machine_pools, machine_group_shapes),
    ):
        for obj in objects or ():
            shapes = parse(obj) if isinstance(obj, Mapping) else None
            if shapes is None:
                return None
            out += shapes
    return tuple(out)


# ---- where the objects are --------------------------------------------------------------


class Provisioning:
    """The shapes the autoscalers' objects offer, by the namespace each object is in ("" for
    a cluster-scoped one: Karpenter's NodePools).

    What the cluster can create is a cluster-wide fact, and anyone who may create a Cluster API
    object in some namespace could make one up: the rules read the shapes only from the
    namespaces they trust (`shapes`), and an object elsewhere shapes nothing. Built whole by a
    source, never changed after; `shapes` remembers its answer per set of trusted namespaces.
    """

    __slots__ = ("_answers", "by_namespace")

    def __init__(self, by_namespace: Mapping[str, tuple[Node, ...] | None]) -> None:
        # None for a namespace holding an object that cannot be told (see the parsers).
        self.by_namespace: Mapping[str, tuple[Node, ...] | None] = by_namespace
        self._answers: dict[tuple[frozenset[str], str], tuple[Node, ...] | None] = {}

    def shapes(self, trusted: NamePatterns) -> tuple[Node, ...] | None:
        """Every shape of the cluster-scoped objects and of those in `trusted` namespaces;
        None when one of them cannot be told."""
        key = (trusted.exact, trusted.loose.pattern if trusted.loose is not None else "")
        if key in self._answers:
            return self._answers[key]
        out: list[Node] = []
        found: tuple[Node, ...] | None = None
        for namespace, shapes in self.by_namespace.items():
            if namespace and not trusted.matches(namespace):
                continue
            if shapes is None:
                break
            out += shapes
        else:
            found = tuple(out)
        if len(self._answers) >= 8:  # a new rule set with other namespaces: forget the old
            self._answers.clear()
        self._answers[key] = found
        return found

    def ignored(self, trusted: NamePatterns) -> list[str]:
        """The namespaces holding objects the rules do not read (for `rules check`)."""
        return sorted(n for n in self.by_namespace if n and not trusted.matches(n))


def provisioning(
    node_pools: Iterable[Mapping[str, Any]] | None,
    machine_sets: Iterable[Mapping[str, Any]] | None,
    machine_deployments: Iterable[Mapping[str, Any]] | None,
    machine_pools: Iterable[Mapping[str, Any]] | None = None,
) -> Provisioning | None:
    """The listed autoscaler objects' shapes by namespace; None when none was read (each
    argument None: that kind is not known or not installed)."""
    groups = (machine_sets, machine_deployments, machine_pools)
    if node_pools is None and all(g is None for g in groups):
        return None
    items: list[tuple[str, tuple[Node, ...] | None]] = []
    for obj in node_pools or ():
        items.append(("", node_pool_shapes(obj) if isinstance(obj, Mapping) else None))
    for objects in groups:
        for obj in objects or ():
            if not isinstance(obj, Mapping):
                items.append(("", None))
                continue
            namespace = str(_meta(obj, "metadata", "namespace") or "")
            items.append((namespace, machine_group_shapes(obj)))
    return by_namespace(items)


def by_namespace(items: Iterable[tuple[str, tuple[Node, ...] | None]]) -> Provisioning:
    """(namespace, the shapes of one object, None: cannot be told) as a `Provisioning`."""
    found: dict[str, list[Node] | None] = {}
    for namespace, shapes in items:
        these = found.setdefault(namespace, [])
        if shapes is None or these is None:
            found[namespace] = None
        else:
            these += shapes
    return Provisioning({n: None if s is None else tuple(s) for n, s in found.items()})


def listed(
    kinds: Iterable[str],
    shapes_by_kind: Mapping[str, Mapping[tuple[str, str], tuple[Node, ...] | None]],
    absent: Iterable[str],
) -> Provisioning | None:
    """Every listed autoscaler kind's shapes by namespace; None while one is unknown or none
    is installed (nothing was read: a pool at zero may be behind an autoscaler we cannot
    see). An object that cannot be told makes its namespace's shapes unknown."""
    items: list[tuple[str, tuple[Node, ...] | None]] = []
    gone = set(absent)
    names = list(kinds)
    for kind in names:
        if kind in gone:
            continue
        shapes = shapes_by_kind.get(kind)
        if shapes is None:
            return None
        items += [(namespace, one) for (namespace, _), one in shapes.items()]
    if all(kind in gone for kind in names):
        return None
    return by_namespace(items)
