"""The workload table in force: shipped kinds, replaced or extended by the rule set's.

Compiled once per rule set (`CompiledRuleSet.workloads`); the pod views, the webhook's
routing, the audits and the generated webhook configuration all read this one table.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from webhook.ruleset.shipped_workloads import BUILTIN_WORKLOADS
from webhook.ruleset.workloads import ReplicaFactor, WorkloadKind, parse_path

__all__ = ["DEFAULT_TABLE", "Factor", "Workload", "WorkloadTable", "read", "workload_table"]


@dataclass(frozen=True, slots=True)
class Factor:
    """One replica factor, its paths parsed (see `ruleset.workloads.ReplicaFactor`)."""

    paths: tuple[tuple[str, ...], ...]
    default: int
    minus: int
    minus_if: tuple[str, ...] | None


def _factor(f: ReplicaFactor) -> Factor:
    return Factor(
        paths=tuple(parse_path(p) for p in f.paths),
        default=f.default,
        minus=f.minus,
        minus_if=parse_path(f.minus_if) if f.minus_if else None,
    )


@dataclass(frozen=True, slots=True)
class Workload:
    """One kind, with its paths parsed."""

    declared: WorkloadKind
    spec_paths: tuple[tuple[str, ...], ...]
    # (path to the container-like object, key of its ResourceRequirements)
    container_paths: tuple[tuple[tuple[str, ...], str], ...]
    inline: tuple[str, ...]
    replicas: tuple[str, ...] | None
    # For each of `spec_paths`: its own replica factors, or None (the kind's `replicas`).
    spec_replicas: tuple[tuple[Factor, ...] | None, ...]
    # For each of `spec_paths`: which containers take traffic ("" none, "ports", "main"),
    # and the path whose object makes it a worker template (`PodTemplatePath.workers_if`).
    spec_serving: tuple[tuple[str, tuple[str, ...] | None], ...]
    # For each of `container_paths`: the path of the name its controller gives the
    # container, or None, and the suffix after it (`ContainerPath.name`).
    container_names: tuple[tuple[tuple[str, ...] | None, str], ...]
    suspend: tuple[str, ...] | None = None  # the field that holds its pods back
    ttl: tuple[str, ...] | None = None  # its ttlSecondsAfterFinished
    deadline: tuple[str, ...] | None = None  # its activeDeadlineSeconds

    def suspended(self, obj: object) -> bool:
        """Whether the object's suspend field is true: its pods are held back."""
        return self.suspend is not None and read(obj, self.suspend) is True

    @property
    def group(self) -> str:
        return self.declared.group

    @property
    def kind(self) -> str:
        return self.declared.kind

    @property
    def mutate(self) -> bool:
        return self.declared.mutate

    @property
    def shm(self) -> bool:
        return self.declared.shm

    @property
    def runtime(self) -> bool:
        return self.declared.runtime

    @property
    def gang(self) -> bool:
        return self.declared.gang

    @property
    def cluster_scoped(self) -> bool:
        return self.declared.scope == "Cluster"


def read(obj: object, path: tuple[str, ...]) -> object:
    """The value at a plain path of fields (None where any step is missing)."""
    node = obj
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def _compile(kind: WorkloadKind) -> Workload:
    return Workload(
        declared=kind,
        spec_paths=kind.spec_paths(),
        container_paths=tuple((parse_path(c.path), c.resources) for c in kind.containers),
        inline=tuple(kind.inline_containers),
        replicas=parse_path(kind.replicas) if kind.replicas else None,
        spec_replicas=tuple(
            None if fs is None else tuple(_factor(f) for f in fs) for fs in kind.spec_replicas()
        ),
        spec_serving=tuple(
            (mode, parse_path(workers) if workers else None)
            for mode, workers in kind.spec_serving()
        ),
        container_names=tuple(
            (parse_path(c.name) if c.name else None, c.name_suffix) for c in kind.containers
        ),
        suspend=parse_path(kind.suspend) if kind.suspend else None,
        ttl=parse_path(kind.ttl) if kind.ttl else None,
        deadline=parse_path(kind.deadline) if kind.deadline else None,
    )


class WorkloadTable:
    """(group, kind) -> where its pods are. A lookup per request, nothing more."""

    __slots__ = ("_by_key", "kinds")

    def __init__(self, kinds: Iterable[WorkloadKind]) -> None:
        self.kinds: tuple[Workload, ...] = tuple(_compile(k) for k in kinds)
        self._by_key = {(w.group, w.kind): w for w in self.kinds}

    def get(self, group: str, kind: str) -> Workload | None:
        return self._by_key.get((group, kind))

    def holds_pods(self, group: str, kind: str) -> bool:
        """Whether objects of this group and kind contain pod specs the table locates."""
        return (group, kind) in self._by_key

    def api_resources(self) -> dict[tuple[str, tuple[str, ...], str], list[str]]:
        """(group, versions, scope) -> the resources of every kind but Pod, in table order:
        the rules an admission configuration or policy matches them by."""
        groups: dict[tuple[str, tuple[str, ...], str], list[str]] = {}
        for w in self.kinds:
            if (w.group, w.kind) == ("", "Pod"):
                continue
            d = w.declared
            groups.setdefault((d.group, tuple(d.versions), d.scope), []).append(d.resource)
        return groups


def workload_table(declared: Iterable[WorkloadKind] = ()) -> WorkloadTable:
    """The shipped kinds, each replaced by a declaration of the same group and kind, then the
    rule set's new kinds in the order declared."""
    own = {k.key: k for k in declared}
    shipped = [own.pop(k.key, k) for k in BUILTIN_WORKLOADS]
    return WorkloadTable([*shipped, *own.values()])


DEFAULT_TABLE = workload_table()
