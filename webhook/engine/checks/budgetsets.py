"""Budgets over several namespaces: what the whole set holds at once, and how to say it.

A budget over `[ml-team, ml-team-*]` or a namespace selector caps the set, not each member:
with ml-team at 16 of 16, a pod in ml-team-b gets nothing. So the usage a pod is judged
against is the sum over every namespace the budget selects (its names and patterns, its
selector on each namespace's labels, and, for a budget an override sets, only where that
override applies), each with its pods, its ResourceClaims' devices and this replica's holds.
A ResourceQuota caps one namespace, never the set, so every hold counts here.

A denial shows the sum: the namespaces that hold the most by name, the pod's own, the rest as
one figure.
"""

from __future__ import annotations

from collections.abc import Iterable

from webhook.engine.context import Context
from webhook.facts.model import Facts, Usage
from webhook.namepatterns import NamePatterns, is_pattern
from webhook.quantity import Amount, show
from webhook.ruleset.models import QuotaBudget

__all__ = ["SetUsage", "describe_set", "set_usage", "spans_several"]

_NAMED = 5  # namespaces a message names before it sums the rest


def spans_several(budget: QuotaBudget) -> bool:
    """Whether the budget may select more than one namespace (a pattern, several names, or a
    selector alone); one exact name, with or without a selector, is a set of one."""
    names = budget.namespaces
    return len(names) != 1 or is_pattern(names[0])


class SetUsage:
    """What a budget's set holds: the total, and each member that holds anything (the pod's
    own namespace always among them)."""

    __slots__ = ("namespace", "parts", "total")

    def __init__(self, namespace: str, parts: list[tuple[str, Usage]]) -> None:
        self.namespace = namespace  # the pod's
        self.parts = parts
        total = Usage()
        for _, usage in parts:
            for name, amount in usage.by_resource.items():
                total.by_resource[name] += amount
            for pair, amount in usage.by_product.items():
                total.by_product[pair] += amount
        self.total = total

    def arithmetic(self, name: str, product: str = "") -> str:
        """The sum for one resource (on one product): `ml-team 16 + ml-team-b 0`; the biggest
        holders and the pod's own namespace by name, any others as one figure."""
        ranked = self._ranked(name, product)
        own = next(pair for pair in ranked if pair[1] == self.namespace)
        others = [pair for pair in ranked if pair[0] and pair is not own]
        named = sorted([*others[:_NAMED], own], key=_order)
        terms = [f"{ns} {show(a)}" for a, ns in named]
        rest = others[_NAMED:]
        if rest:
            terms.append(f"{len(rest)} more namespaces {show(sum(a for a, _ in rest))}")
        return " + ".join(terms)

    def holders(self, name: str, product: str = "") -> str:
        """Where GPUs would have to be freed: the members holding the most of this one."""
        names = [ns for a, ns in self._ranked(name, product) if a]
        if not names:
            return self.namespace
        more = f" and {len(names) - _NAMED} more" if len(names) > _NAMED else ""
        return ", ".join(names[:_NAMED]) + more

    def _ranked(self, name: str, product: str) -> list[tuple[Amount, str]]:
        """(amount, namespace) of each member, the most first, then by name."""
        return sorted(((_amount(u, name, product), ns) for ns, u in self.parts), key=_order)


def _order(pair: tuple[Amount, str]) -> tuple[Amount, str]:
    return (-pair[0], pair[1])


def _amount(usage: Usage, name: str, product: str) -> Amount:
    if product:
        return usage.by_product.get((name, product), 0)
    return usage.by_resource.get(name, 0)


def describe_set(budget: QuotaBudget) -> str:
    """The set in words: `namespaces ml-team, ml-team-*`, `namespaces labelled team=ml`."""
    names = budget.namespaces
    text = "namespaces " + ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")
    selector = budget.namespace_selector
    if selector is None:
        return text
    labelled = f"labelled {selector.describe()}"
    return f"{text} {labelled}" if names else f"namespaces {labelled}"


def _candidates(budget: QuotaBudget, facts: Facts) -> Iterable[str]:
    """Namespaces that may be members: the exact names when there is no pattern, else every
    namespace holding anything."""
    names = budget.namespaces
    if names and not any(is_pattern(n) for n in names):
        return names
    return facts.usages.namespaces() if facts.usages is not None else ()


def set_usage(
    budget: QuotaBudget, names: NamePatterns | None, ctx: Context, facts: Facts, own: Usage
) -> SetUsage:
    """What the budget's whole set holds, `own` (everything the pod's namespace holds,
    every hold included) for the pod's namespace. A source that knows one namespace at a
    time (no `Facts.usages`) gives the pod's namespace alone."""
    parts = [(ctx.namespace, own)]
    usages = facts.usages
    if usages is None:
        return SetUsage(ctx.namespace, parts)
    selector = budget.namespace_selector
    for namespace in _candidates(budget, facts):
        if namespace == ctx.namespace or (names is not None and not names.matches(namespace)):
            continue
        labels = usages.labels(namespace)
        if selector is not None and (labels is None or not selector.matches(labels)):
            continue
        if not ctx.rules.budget_in(budget, namespace, labels):
            continue
        usage = usages.usage(namespace)
        if any(usage.by_resource.values()) or any(usage.by_product.values()):
            parts.append((namespace, usage))
    return SetUsage(ctx.namespace, parts)
