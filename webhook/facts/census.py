"""Which namespaces exist and which pods run in them, as far as a source knows: what
`rules check --cluster-snapshot` and the start-up log compare the built-in exemptions with
(`webhook.ruleset.components.unattended`). Not read by any rule."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Census"]


@dataclass(frozen=True)
class Census:
    """Namespaces that exist, and each namespace's pods as (service account, pod name)."""

    namespaces: frozenset[str]
    pods: Mapping[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)

    @classmethod
    def of(cls, namespaces: Iterable[str], pods: Iterable[tuple[str, str, str]]) -> Census:
        """From the namespaces and (namespace, service account, pod name) of each pod."""
        found: dict[str, list[tuple[str, str]]] = {}
        for namespace, account, name in pods:
            found.setdefault(namespace, []).append((account or "default", name))
        return cls(frozenset(namespaces), {n: tuple(p) for n, p in found.items()})
