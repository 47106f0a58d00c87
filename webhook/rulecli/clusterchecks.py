"""What `rules check --cluster-snapshot` refuses: settings that cannot hold in this cluster.

Allowed or default priority classes the cluster does not have (a pod naming an allowed class
is then denied for naming a class that does not exist; a default is never injected), and
overrides that cross in a namespace only the cluster's labels reveal (`contradictions`). Each
is a problem at its file:line:col with a Fix, as a typo is.
"""

from __future__ import annotations

from collections.abc import Iterator

from webhook.facts.model import FactsSource
from webhook.facts.static import StaticSnapshot
from webhook.modelerrors import Problem
from webhook.ruleset.contradictions import crossing_overrides
from webhook.ruleset.models import RuleSet

__all__ = ["cluster_problems"]

_RULE = "gpu-priority-class"


def _classes(
    settings: dict[str, object], at: tuple[str | int, ...]
) -> Iterator[tuple[tuple[str | int, ...], str, bool]]:
    """(field path, class, is the default) for each class a rule's settings name."""
    default = settings.get("defaultClass")
    if isinstance(default, str) and default:
        yield (*at, "defaultClass"), default, True
    allowed = settings.get("allowedClasses")
    for k, name in enumerate(allowed if isinstance(allowed, list) else []):
        if isinstance(name, str):
            yield (*at, "allowedClasses", k), name, False


def _missing_classes(rules: RuleSet, source: FactsSource) -> list[Problem]:
    existing = source.facts_for("default").priority_classes
    if not existing:
        return []  # a snapshot that lists no class at all says nothing about them
    base = rules.rules.gpu_priority_class.model_dump(by_alias=True)
    found = list(_classes(base, ("rules", _RULE)))
    for i, override in enumerate(rules.overrides):
        found += _classes(override.rules.get(_RULE, {}), ("overrides", i, "rules", _RULE))
    have = ", ".join(sorted(n for n in existing if not n.startswith("system-"))) or "none"
    out = []
    for loc, name, is_default in found:
        if name in existing:
            continue
        harm = (
            "it is never injected, so GPU pods that name no class get none (and are denied "
            "where allowedClasses is set)"
            if is_default
            else "GPU pods that name it are denied for naming a class that does not exist"
        )
        out.append(
            Problem(
                loc,
                f"PriorityClass {name!r} does not exist in the cluster: {harm}",
                f"create PriorityClass {name} (kubectl create priorityclass {name} --value=N), "
                f"or name a class that exists (the cluster has: {have})",
            )
        )
    return out


def cluster_problems(rules: RuleSet, source: FactsSource) -> list[Problem]:
    """Settings of a valid rule set that cannot hold in the cluster the facts describe."""
    found = _missing_classes(rules, source)
    if isinstance(source, StaticSnapshot):
        namespaces = source.namespace_labels().items()
        # The names the overrides write out were checked at load: report only what is new.
        seen = {p.loc for p in crossing_overrides(rules)}
        found += [p for p in crossing_overrides(rules, namespaces) if p.loc not in seen]
    return found
