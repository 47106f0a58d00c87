"""Cluster facts the cluster-aware rules read, behind one read-only interface.

Three sources implement it: the static YAML snapshot here (offline audit, tests, `make run`),
the watch-fed live cache in the webhook, and a one-shot list for the live audit. Rules see
only `ClusterFacts`, never a client. Pods are kept as compact GPU summaries, not objects.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from webhook.quantity import QuantityError, parse_quantity

__all__ = [
    "GPU_PRODUCT_LABEL",
    "ClusterFacts",
    "Node",
    "PodGpus",
    "PriorityClass",
    "Quota",
    "Reservations",
    "ReservingFacts",
    "SnapshotError",
    "StaticSnapshot",
    "Usage",
    "load_snapshot",
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
    """GPUs held by a namespace's non-terminated pods: by resource, and by (resource, product)."""

    by_resource: dict[str, Fraction] = field(default_factory=lambda: defaultdict(Fraction))
    by_product: dict[tuple[str, str], Fraction] = field(
        default_factory=lambda: defaultdict(Fraction)
    )

    def add(self, pod: PodGpus, sign: int = 1) -> None:
        for name, amount in pod.gpus.items():
            self.by_resource[name] += sign * amount
            if pod.product:
                self.by_product[(name, pod.product)] += sign * amount


class ClusterFacts(Protocol):
    """Read-only cluster facts. Implementations must be safe to read while being updated."""

    def namespace_labels(self, namespace: str) -> dict[str, str] | None: ...
    def quotas(self, namespace: str) -> list[Quota]: ...
    def priority_class(self, name: str) -> PriorityClass | None: ...
    def priority_classes(self) -> list[PriorityClass]: ...
    def nodes(self) -> Sequence[Node]:
        """The same object until the nodes change, so callers may memoize on its identity."""
        ...

    def usage(self, namespace: str) -> Usage: ...
    def age_seconds(self) -> float | None: ...


class Reservations:
    """Short-lived holds on GPUs for pods this replica admitted but the watch hasn't shown yet.

    Without them, two creates racing for the last GPUs of a budget both pass. A hold ends when
    the watch reports a matching pod (`release_for`) or after `ttl` seconds. Never taken for
    dryRun requests. Holds live in one replica: see the README for the race across replicas.
    """

    def __init__(self, ttl: float = 30.0) -> None:
        self.ttl = ttl
        self._held: dict[str, list[tuple[float, PodGpus]]] = defaultdict(list)

    def hold(self, pod: PodGpus, *, now: float | None = None) -> None:
        until = (time.monotonic() if now is None else now) + self.ttl
        self._held[pod.namespace].append((until, pod))

    def release_for(self, seen: PodGpus) -> None:
        """The watch showed `seen`: drop the oldest hold it accounts for.

        Admission may see a pod before it has a name (generateName), so a hold matches by
        exact name or by name prefix, and by the same GPUs.
        """
        holds = self._held.get(seen.namespace, [])
        for i, (_, pod) in enumerate(holds):
            if pod.gpus == seen.gpus and (
                pod.name == seen.name or (pod.name.endswith("-") and seen.name.startswith(pod.name))
            ):
                del holds[i]
                return

    def held(self, namespace: str, now: float | None = None) -> list[PodGpus]:
        now = time.monotonic() if now is None else now
        live = [(until, pod) for until, pod in self._held.get(namespace, []) if until > now]
        self._held[namespace] = live
        return [pod for _, pod in live]


class ReservingFacts:
    """Cluster facts with this replica's reservations added to each namespace's usage."""

    def __init__(self, base: ClusterFacts, reservations: Reservations) -> None:
        self.base = base
        self.reservations = reservations

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        return self.base.namespace_labels(namespace)

    def quotas(self, namespace: str) -> list[Quota]:
        return self.base.quotas(namespace)

    def priority_class(self, name: str) -> PriorityClass | None:
        return self.base.priority_class(name)

    def priority_classes(self) -> list[PriorityClass]:
        return self.base.priority_classes()

    def nodes(self) -> Sequence[Node]:
        return self.base.nodes()

    def usage(self, namespace: str) -> Usage:
        held = self.reservations.held(namespace)
        if not held:
            return self.base.usage(namespace)
        base = self.base.usage(namespace)
        total = Usage()
        total.by_resource.update(base.by_resource)
        total.by_product.update(base.by_product)
        for pod in held:
            total.add(pod)
        return total

    def age_seconds(self) -> float | None:
        return self.base.age_seconds()


# ---- the static snapshot file -------------------------------------------------------------


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, alias_generator=to_camel)


class _NamespaceDoc(_Model):
    labels: dict[str, str] = Field(default_factory=dict)


class _NodeDoc(_Model):
    name: str
    labels: dict[str, str] = Field(default_factory=dict)
    allocatable: dict[str, int | str] = Field(default_factory=dict)
    count: int = Field(default=1, ge=1)  # N identical nodes: name-0 .. name-(N-1)
    unschedulable: bool = False


class _QuotaDoc(_Model):
    namespace: str
    name: str
    hard: dict[str, int | str] = Field(default_factory=dict)
    used: dict[str, int | str] = Field(default_factory=dict)


class _PriorityClassDoc(_Model):
    name: str
    value: int
    preemption_policy: Literal["PreemptLowerPriority", "Never"] = "PreemptLowerPriority"
    global_default: bool = False


class _PodDoc(_Model):
    namespace: str
    name: str
    phase: str = "Running"
    gpus: dict[str, int | str]
    node: str = ""
    product: str = ""
    priority_class: str = ""


class SnapshotFile(_Model):
    """`gpu-admission.io/v1` ClusterSnapshot: a cluster's GPU facts as one YAML file."""

    api_version: Literal["gpu-admission.io/v1"]
    kind: Literal["ClusterSnapshot"]
    namespaces: dict[str, _NamespaceDoc] = Field(default_factory=dict)
    nodes: list[_NodeDoc] = Field(default_factory=list)
    resource_quotas: list[_QuotaDoc] = Field(default_factory=list)
    priority_classes: list[_PriorityClassDoc] = Field(default_factory=list)
    pods: list[_PodDoc] = Field(default_factory=list)


class SnapshotError(ValueError):
    """The snapshot file cannot be read; the message names the file and the field."""


def _amounts(values: Mapping[str, int | str], where: str) -> dict[str, Fraction]:
    out = {}
    for name, value in values.items():
        try:
            out[name] = parse_quantity(value)
        except QuantityError as exc:
            raise SnapshotError(f"{where}.{name}: {exc}") from None
    return out


class StaticSnapshot:
    """Cluster facts frozen in a file. Never stale: `age_seconds` is None."""

    def __init__(
        self,
        *,
        namespaces: Mapping[str, Mapping[str, str]],
        nodes: Iterable[Node],
        quotas: Iterable[Quota],
        priority_classes: Iterable[PriorityClass],
        pods: Iterable[PodGpus],
    ) -> None:
        self._namespaces = {k: dict(v) for k, v in namespaces.items()}
        self._nodes = tuple(nodes)
        self._quotas: dict[str, list[Quota]] = defaultdict(list)
        for q in quotas:
            self._quotas[q.namespace].append(q)
        self._classes = {pc.name: pc for pc in priority_classes}
        self._usage: dict[str, Usage] = defaultdict(Usage)
        for pod in pods:
            if pod.phase not in TERMINATED:
                self._usage[pod.namespace].add(pod)

    def namespace_labels(self, namespace: str) -> dict[str, str] | None:
        return self._namespaces.get(namespace)

    def quotas(self, namespace: str) -> list[Quota]:
        return list(self._quotas.get(namespace, []))

    def priority_class(self, name: str) -> PriorityClass | None:
        return self._classes.get(name)

    def priority_classes(self) -> list[PriorityClass]:
        return list(self._classes.values())

    def nodes(self) -> Sequence[Node]:
        return self._nodes

    def usage(self, namespace: str) -> Usage:
        return self._usage.get(namespace) or Usage()

    def age_seconds(self) -> float | None:
        return None


def snapshot_from_doc(doc: SnapshotFile) -> StaticSnapshot:
    nodes = []
    for i, n in enumerate(doc.nodes):
        gpus = _amounts(n.allocatable, f"nodes[{i}].allocatable")
        names = [n.name] if n.count == 1 else [f"{n.name}-{k}" for k in range(n.count)]
        nodes += [Node(name, n.labels, gpus, n.unschedulable) for name in names]
    quotas = [
        Quota(
            q.namespace,
            q.name,
            _amounts(q.hard, f"resourceQuotas[{i}].hard"),
            _amounts(q.used, f"resourceQuotas[{i}].used"),
        )
        for i, q in enumerate(doc.resource_quotas)
    ]
    classes = [
        PriorityClass(p.name, p.value, p.preemption_policy, p.global_default)
        for p in doc.priority_classes
    ]
    node_product = {n.name: n.labels.get(GPU_PRODUCT_LABEL, "") for n in nodes}
    pods = [
        PodGpus(
            p.namespace,
            p.name,
            p.phase,
            _amounts(p.gpus, f"pods[{i}].gpus"),
            p.node,
            p.product or node_product.get(p.node, ""),
            p.priority_class,
        )
        for i, p in enumerate(doc.pods)
    ]
    return StaticSnapshot(
        namespaces={k: v.labels for k, v in doc.namespaces.items()},
        nodes=nodes,
        quotas=quotas,
        priority_classes=classes,
        pods=pods,
    )


def load_snapshot(path: Path | str) -> StaticSnapshot:
    path = Path(path)
    try:
        data: Any = yaml.safe_load(path.read_text())
        return snapshot_from_doc(SnapshotFile.model_validate(data))
    except (OSError, yaml.YAMLError) as exc:
        raise SnapshotError(f"{path}: {exc}") from None
    except ValidationError as exc:
        problems = "; ".join(
            ".".join(str(p) for p in e["loc"]) + ": " + e["msg"]
            for e in exc.errors(include_url=False)
        )
        raise SnapshotError(f"{path}: {problems}") from None
    except SnapshotError as exc:
        raise SnapshotError(f"{path}: {exc}") from None
