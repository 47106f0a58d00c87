"""Every namespace's GPU usage, for budgets over several namespaces.

A budget over `[ml-team, ml-team-*]` or a label selector caps what the whole set holds at
once, so judging a pod in one namespace reads what the others hold too: their pods, their
ResourceClaims' devices, and this replica's holds there. A source hands out one
`NamespaceUsages` with each `Facts`; the engine reads it only when a budget spans several
namespaces, so a review under single-namespace budgets pays nothing for it.

It reads the source's tables through getters, at the moment it is asked: a relist replaces a
table whole, and a reader must see the new one. Each value it returns is a copy or a value its
writer never edits again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from webhook.facts.model import EMPTY_USAGE, HeldIn, Usage
from webhook.quantity import Amount

__all__ = ["NamespaceUsages"]

_NO_TABLE: Mapping[str, Mapping[str, Amount]] = MappingProxyType({})


def _no_claims() -> Mapping[str, Mapping[str, Amount]]:
    return _NO_TABLE


class NamespaceUsages:
    """What each namespace holds: its non-terminated pods' GPUs, the devices of its
    ResourceClaims (by `<class>.deviceclass.resource.k8s.io/devices`), and this replica's
    holds there, every one of them (a ResourceQuota caps one namespace, never a set: the
    set's total is the webhook's to keep)."""

    __slots__ = ("_claims", "_holds", "_labels", "_usage")

    def __init__(
        self,
        usage: Callable[[], Mapping[str, Usage]],
        labels: Callable[[], Mapping[str, Mapping[str, str]]],
        claims: Callable[[], Mapping[str, Mapping[str, Amount]]] = _no_claims,
        holds: HeldIn | None = None,
    ) -> None:
        self._usage = usage
        self._labels = labels
        self._claims = claims
        self._holds = holds

    def with_holds(self, holds: HeldIn) -> NamespaceUsages:
        """The same tables with `holds` counted in each namespace."""
        return NamespaceUsages(self._usage, self._labels, self._claims, holds)

    def namespaces(self) -> list[str]:
        """Every namespace that holds anything (GPU pods, claims or holds), in no order.

        Copied at once: a watch thread may add a namespace while a review reads."""
        found = set(list(self._usage()))
        found.update(list(self._claims()))
        if self._holds is not None:
            found.update(self._holds.namespaces())
        return list(found)

    def labels(self, namespace: str) -> Mapping[str, str] | None:
        """The namespace's labels; None when the source does not know the namespace."""
        return self._labels().get(namespace)

    def usage(self, namespace: str) -> Usage:
        """All the namespace holds: a new value, or one nobody edits (never changed by the
        caller)."""
        pods = self._usage().get(namespace, EMPTY_USAGE)
        devices = self._claims().get(namespace)
        held = self._holds.usage(namespace) if self._holds is not None else None
        if not devices and held is None:
            return pods
        out = Usage()
        out.by_resource.update(pods.by_resource)
        out.by_product.update(pods.by_product)
        for key, amount in (devices or {}).items():
            out.by_resource[key] += amount
        if held is not None:
            for name, amount in held.by_resource.items():
                out.by_resource[name] += amount
            for pair, amount in held.by_product.items():
                out.by_product[pair] += amount
        return out
