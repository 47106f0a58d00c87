"""The static cluster snapshot: a cluster's GPU facts as one YAML file, and its reader.

Used by the offline audit, the tests and `make run`; the format is documented in
`examples/cluster-snapshot.yaml`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic.alias_generators import to_camel

from webhook.facts.model import (
    EMPTY_USAGE,
    GPU_PRODUCT_LABEL,
    TERMINATED,
    Facts,
    Node,
    NodeIndex,
    PodGpus,
    PriorityClass,
    Quota,
    Usage,
)
from webhook.quantity import QuantityError, parse_quantity

__all__ = ["SnapshotError", "SnapshotFile", "StaticSnapshot", "load_snapshot", "snapshot_from_doc"]


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
        self._nodes = NodeIndex(nodes)
        grouped: dict[str, list[Quota]] = defaultdict(list)
        for q in quotas:
            grouped[q.namespace].append(q)
        self._quotas = {ns: tuple(qs) for ns, qs in grouped.items()}
        self._classes = {pc.name: pc for pc in priority_classes}
        self._usage: dict[str, Usage] = defaultdict(Usage)
        for pod in pods:
            if pod.phase not in TERMINATED:
                self._usage[pod.namespace].add(pod)
        self._usage = dict(self._usage)

    def facts_for(self, namespace: str) -> Facts:
        return Facts(
            namespace=namespace,
            namespace_labels=self._namespaces.get(namespace),
            quotas=self._quotas.get(namespace, ()),
            usage=self._usage.get(namespace, EMPTY_USAGE),
            priority_classes=self._classes,
            nodes=self._nodes,
        )


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
