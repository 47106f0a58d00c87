"""Settings of a valid rule set that cannot hold together, found before they deny anything.

Each file can be valid on its own, and each override valid over the base rules, while the
whole still contradicts itself: two budgets over the same namespaces capping one resource (the
webhook judges both, `export` writes a ResourceQuota for each), or two overrides that apply to
one namespace and cross there (one's gpu-shm minSize above the other's maxSize; one's
defaultClass outside the other's allowedClasses). The loader refuses such a set as it refuses
a typo, so `rules check` fails and a hot reload keeps the rules in service. What a single
rule's own settings must agree on (a defaultClass outside its own allowedClasses) is
checked here too, in the base rules and with each override laid over them.

Overrides cross in a namespace only where both apply: the names the overrides write out are
checked always, and, given the cluster's namespaces and their labels (`rules check
--cluster-snapshot`), every namespace of the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from webhook.modelerrors import Problem
from webhook.namepatterns import is_pattern
from webhook.ruleset.models import RuleSet
from webhook.ruleset.resolve import applicable, matchers, merge

__all__ = [
    "CROSSING_RULES",
    "contradictions",
    "crossing_overrides",
    "default_outside_allowed",
    "duplicate_budgets",
]

# Rules whose settings can cross when two overrides are laid on each other (`resolve.merge`).
CROSSING_RULES = frozenset({"gpu-shm", "gpu-priority-class"})
_PRIORITY = "gpu-priority-class"


def duplicate_budgets(rules: RuleSet) -> list[Problem]:
    """Budgets of the base rules that select the same namespaces (the same names, the same
    selector) and cap the same resource. A budget over several namespaces beside one over a
    single namespace of them is a nested cap, and fine; the same selection twice is one
    namespace's budget written twice."""
    found: list[Problem] = []
    seen: dict[tuple[str, str, str], int] = {}
    budgets = rules.rules.gpu_quota.budgets
    for j, budget in enumerate(budgets):
        selector = budget.namespace_selector
        names = json.dumps(sorted(set(budget.namespaces)))
        picked = json.dumps(selector.model_dump(), sort_keys=True) if selector else ""
        for resource in budget.limits:
            i = seen.setdefault((names, picked, resource), j)
            if i == j:
                continue
            first = budgets[i]
            where = _selection(budget.namespaces, bool(selector))
            found.append(
                Problem(
                    ("rules", "gpu-quota", "budgets", j, "limits", resource),
                    f"budgets {first.name!r} and {budget.name!r} both cap {resource} in "
                    f"{where}: the webhook judges both and `export` writes a ResourceQuota "
                    "for each",
                    f"keep one budget for {where}: merge {budget.name!r} into {first.name!r}, "
                    f"or remove {resource} from one of them",
                    on_key=True,
                )
            )
    return found


def _outside(default: object, allowed: object) -> bool:
    return bool(default) and isinstance(allowed, list) and bool(allowed) and default not in allowed


def default_outside_allowed(rules: RuleSet) -> list[Problem]:
    """A gpu-priority-class defaultClass outside its allowedClasses, in the base rules or
    once an override is laid over them: the default would be injected into every GPU pod
    that names no class, and then denied."""
    base = rules.rules.gpu_priority_class.model_dump(by_alias=True)
    found: list[tuple[tuple[str | int, ...], dict[str, Any]]] = []
    if _outside(base["defaultClass"], base["allowedClasses"]):
        found.append((("rules", _PRIORITY, "defaultClass"), base))
    for i, override in enumerate(rules.overrides):
        mine = override.rules.get(_PRIORITY, {})
        laid = {**base, **mine}
        if _outside(laid["defaultClass"], laid["allowedClasses"]):
            key = "defaultClass" if "defaultClass" in mine else "allowedClasses"
            if key in mine:
                found.append((("overrides", i, "rules", _PRIORITY, key), laid))
    return [
        Problem(
            loc,
            f"defaultClass {cfg['defaultClass']!r} is not in allowedClasses "
            f"({', '.join(cfg['allowedClasses'])}): every GPU pod that names no class would "
            "get it and then be denied",
            f"add {cfg['defaultClass']} to allowedClasses, or set defaultClass to one of: "
            + ", ".join(cfg["allowedClasses"]),
        )
        for loc, cfg in found
    ]


def _selection(namespaces: list[str], selector: bool) -> str:
    names = ", ".join(namespaces)
    if not names:
        return "the namespaces of one namespaceSelector"
    kind = "namespace" if len(namespaces) == 1 and not is_pattern(namespaces[0]) else "namespaces"
    return f"{kind} {names}" + (" (with one namespaceSelector)" if selector else "")


def crossing_overrides(
    rules: RuleSet, namespaces: Iterable[tuple[str, Mapping[str, str] | None]] = ()
) -> list[Problem]:
    """Overrides that cross in a namespace where they both apply: `resolve.merge` finds the
    crossing (as `rules explain` shows it), and it is reported at the later override's
    setting. Checked in the namespaces the overrides name exactly, and in `namespaces` (name,
    labels), the cluster's when known."""
    overrides = rules.overrides
    touching = [i for i, o in enumerate(overrides) if CROSSING_RULES.intersection(o.rules)]
    if len(touching) < 2:
        return []
    where: dict[str, Mapping[str, str] | None] = {}
    for i in touching:
        for name in overrides[i].namespaces:
            if not is_pattern(name):
                where.setdefault(name, None)
    for name, labels in namespaces:
        where[name] = labels
    compiled = matchers(rules)
    found: dict[tuple[int, str], Problem] = {}
    for namespace, labels in where.items():
        shape = applicable(rules, compiled, namespace, labels)
        if sum(1 for i in shape if CROSSING_RULES.intersection(overrides[i].rules)) < 2:
            continue
        for crossing in merge(rules, shape, namespace).crossings:
            setters = [
                i
                for i in shape
                if set(crossing.settings) & set(overrides[i].rules.get(crossing.rule, {}))
            ]
            if len(setters) < 2:
                continue  # an override crossing the base rules alone is the model's to refuse
            last = max(setters)
            key = next(k for k in crossing.settings if k in overrides[last].rules[crossing.rule])
            others = ", ".join(repr(overrides[i].name) for i in setters if i != last)
            found.setdefault(
                (last, crossing.rule),
                Problem(
                    ("overrides", last, "rules", crossing.rule, key),
                    crossing.text,
                    f"make {crossing.rule} agree between override {overrides[last].name!r} and "
                    f"{others} where both apply (change {' or '.join(crossing.settings)} in "
                    "one of them), or narrow one override's namespaces",
                ),
            )
    return list(found.values())


def contradictions(
    rules: RuleSet, namespaces: Iterable[tuple[str, Mapping[str, str] | None]] = ()
) -> list[Problem]:
    """Every contradiction the loader refuses, each with its place and its fix."""
    return [
        *default_outside_allowed(rules),
        *duplicate_budgets(rules),
        *crossing_overrides(rules, namespaces),
    ]
