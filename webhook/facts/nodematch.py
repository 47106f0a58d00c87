"""Which nodes a pod spec may land on: nodeName, nodeSelector, required node affinity.

Product budgets must follow the pod wherever it could go, not only where it names a product:
`NotIn`, `Exists`, instance-type labels and ORed affinity terms all steer a pod onto a GPU
product. This module answers "which GPU products could this pod land on" from the node facts.
It works on raw pod specs and lives beside the facts model so that the engine (admission,
holds) and a facts source (pending pods it watches) can share one answer.

Taints are not judged: a taint can be lifted and tolerations are easy to add, and a budget
that charges too many products is safer than one that can be dodged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.facts.model import GPU_PRODUCT_LABEL, NodeIndex

__all__ = ["Placement", "Term", "expr_matches", "reachable_products"]

Expr = Mapping[str, Any]
_NAME_FIELD = "metadata.name"  # the only field matchFields may name


def expr_matches(expr: Expr, labels: Mapping[str, str]) -> bool:
    """One node-selector requirement against a node's labels, as the scheduler judges it."""
    key, op = expr.get("key"), expr.get("operator")
    if not isinstance(key, str):
        return False
    raw = expr.get("values")
    values = [v for v in raw if isinstance(v, str)] if isinstance(raw, list) else []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and values and key in labels:
        try:
            have, want = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return have > want if op == "Gt" else have < want
    return False


def _dicts(raw: Any) -> tuple[Expr, ...]:
    return tuple(e for e in raw if isinstance(e, dict)) if isinstance(raw, list) else ()


@dataclass(frozen=True, slots=True)
class Term:
    """One required node-affinity term: every expression must hold (terms are ORed)."""

    exprs: tuple[Expr, ...]  # matchExpressions, on node labels
    fields: tuple[Expr, ...] = ()  # matchFields, on the node's name

    def admits(self, labels: Mapping[str, str], name: str | None) -> bool:
        """`name` None: the node's name is unknown, so matchFields are taken to hold."""
        if not all(expr_matches(e, labels) for e in self.exprs):
            return False
        return name is None or all(expr_matches(f, {_NAME_FIELD: name}) for f in self.fields)

    def allows_product(self, product: str) -> bool:
        """Judged on the product label alone; expressions on other keys might hold."""
        labels = {GPU_PRODUCT_LABEL: product}
        return all(expr_matches(e, labels) for e in self.exprs if e.get("key") == GPU_PRODUCT_LABEL)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a pod spec asks to run. Empty `terms`: no required node affinity (also when
    every term is empty, which the API server refuses anyway: the side that dodges nothing)."""

    node_name: str
    selector: tuple[tuple[str, Any], ...]
    terms: tuple[Term, ...]

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> Placement:
        raw = spec.get("nodeSelector")
        selector = tuple(raw.items()) if isinstance(raw, dict) else ()
        terms: list[Term] = []
        affinity = spec.get("affinity")
        node = affinity.get("nodeAffinity") if isinstance(affinity, dict) else None
        required = (
            node.get("requiredDuringSchedulingIgnoredDuringExecution")
            if isinstance(node, dict)
            else None
        )
        raw_terms = required.get("nodeSelectorTerms") if isinstance(required, dict) else None
        for t in raw_terms if isinstance(raw_terms, list) else ():
            if not isinstance(t, dict):
                continue
            exprs, fields = _dicts(t.get("matchExpressions")), _dicts(t.get("matchFields"))
            if exprs or fields:  # an empty term matches no node: it adds nothing to the OR
                terms.append(Term(exprs, fields))
        name = spec.get("nodeName")
        return cls(name if isinstance(name, str) else "", selector, tuple(terms))

    def label_keys(self) -> tuple[str, ...]:
        """The node labels it reads, with the product label: all a node is judged on."""
        keys = {GPU_PRODUCT_LABEL}
        keys.update(k for k, _ in self.selector if isinstance(k, str))
        keys.update(e["key"] for t in self.terms for e in t.exprs if isinstance(e.get("key"), str))
        return tuple(sorted(keys))

    def admits(self, labels: Mapping[str, str], name: str | None = None) -> bool:
        """Whether a node with these labels (and name, when known) satisfies the pod."""
        if not all(labels.get(k) == v for k, v in self.selector):
            return False
        return not self.terms or any(t.admits(labels, name) for t in self.terms)

    def allows_product(self, product: str) -> bool:
        """Whether some node of `product` could satisfy the pod, knowing only its product:
        constraints on other labels are taken to hold (such a node may yet be created)."""
        if any(k == GPU_PRODUCT_LABEL and v != product for k, v in self.selector):
            return False
        return not self.terms or any(t.allows_product(product) for t in self.terms)


@dataclass(frozen=True, slots=True)
class _Pool:
    """Schedulable nodes alike on the labels one placement reads."""

    labels: Mapping[str, str]
    product: str
    offers: frozenset[str]  # GPU resources some node of the pool has (> 0)


# Pools per set of label keys, for the last node set only: node sets are replaced whole when a
# node changes, and pods use a handful of label-key sets, so a request reads a few pools
# instead of every node. Keys no node carries are dropped from the set first, so made-up keys
# cannot make every request group the nodes anew.
_MAX_KEY_SETS = 64


@dataclass(slots=True)
class _Cache:
    nodes: NodeIndex
    keys: frozenset[str]  # every label key some node carries
    pools: dict[tuple[str, ...], tuple[_Pool, ...]]


_last: _Cache | None = None


def _pools(nodes: NodeIndex, wanted: Iterable[str]) -> tuple[_Pool, ...]:
    global _last
    last = _last
    if last is None or last.nodes is not nodes:
        known = frozenset(k for n in nodes.nodes for k in n.labels)
        last = _last = _Cache(nodes, known, {})
    keys = tuple(sorted(k for k in wanted if k in last.keys))
    found = last.pools.get(keys)
    if found is None:
        grouped: dict[tuple[tuple[str, str], ...], set[str]] = {}
        for n in nodes.nodes:
            if n.unschedulable:
                continue
            labels = tuple((k, n.labels[k]) for k in keys if k in n.labels)
            grouped.setdefault(labels, set()).update(r for r, v in n.gpus.items() if v > 0)
        found = tuple(
            _Pool(dict(labels), dict(labels).get(GPU_PRODUCT_LABEL, ""), frozenset(offers))
            for labels, offers in grouped.items()
        )
        if len(last.pools) >= _MAX_KEY_SETS:
            last.pools.clear()
        last.pools[keys] = found
    return found


def reachable_products(
    spec: Mapping[str, Any],
    nodes: NodeIndex | None,
    asks: Iterable[str],
    candidates: Iterable[str] = (),
) -> frozenset[str]:
    """The GPU products (nvidia.com/gpu.product values) a pod spec could land on.

    - `nodeName` of a known node: that node's product only.
    - Otherwise the products of schedulable nodes offering every resource in `asks` whose
      labels satisfy the nodeSelector and the required affinity (any label, terms ORed).
    - No such node: the pod waits for a node that does not exist yet (an autoscaler may
      create one with any labels), so every known product its product constraints allow.
    - `candidates` (the budgeted products) that no schedulable node carries, e.g. a pool
      scaled to zero: reachable unless the constraints on the product label exclude them.
    """
    placement = Placement.of(spec)
    extra = [p for p in candidates if p]
    if nodes is None:
        return frozenset(p for p in extra if placement.allows_product(p))
    if placement.node_name:
        node = next((n for n in nodes.nodes if n.name == placement.node_name), None)
        if node is not None:  # an unknown node may be new: judge the selectors instead
            product = node.labels.get(GPU_PRODUCT_LABEL, "")
            return frozenset((product,) if product else ())
    wanted = frozenset(asks)
    pools = _pools(nodes, placement.label_keys())
    known = {p.product for p in pools if p.product}
    if any(t.fields for t in placement.terms):  # matchFields names nodes: judge each node
        matched = {
            n.labels.get(GPU_PRODUCT_LABEL, "")
            for n in nodes.nodes
            if not n.unschedulable
            and wanted <= {r for r, v in n.gpus.items() if v > 0}
            and placement.admits(n.labels, n.name)
        }
        found = bool(matched)
    else:
        admitted = [p for p in pools if wanted <= p.offers and placement.admits(p.labels)]
        matched = {p.product for p in admitted}
        found = bool(admitted)
    if found:
        reach = {p for p in matched if p}
    else:
        reach = {p for p in known if placement.allows_product(p)}
    reach.update(p for p in extra if p not in known and placement.allows_product(p))
    return frozenset(reach)
