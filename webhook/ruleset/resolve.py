"""Which overrides apply to a namespace, and the settings they add up to.

Precedence, most specific last (it wins): a namespace selector alone < name patterns < exact
names; with both names and a selector, both must match and the selector breaks ties within
its name rank. Two overrides of equal rank that set the same setting differently for the same
namespace are a conflict: `rules check` reports it, and the later one in file order wins.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from webhook.ruleset.models import Override, RuleSet, RuleSettings
from webhook.selectors import LabelSelector, NamePatterns

__all__ = ["OverrideMatcher", "Resolved", "applicable", "matchers", "merge", "resolve"]


@dataclass(frozen=True, slots=True)
class OverrideMatcher:
    """An override's namespace test, compiled."""

    names: NamePatterns | None
    selector: LabelSelector | None

    def applies(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        if self.names is not None and not self.names.matches(namespace):
            return False
        if self.selector is not None:
            return labels is not None and self.selector.matches(labels)
        return True


def matchers(ruleset: RuleSet) -> tuple[OverrideMatcher, ...]:
    return tuple(
        OverrideMatcher(o.name_patterns(), o.namespace_selector) for o in ruleset.overrides
    )


def applicable(
    ruleset: RuleSet,
    compiled: Sequence[OverrideMatcher],
    namespace: str,
    labels: Mapping[str, str] | None,
) -> tuple[int, ...]:
    """Indexes of the overrides that apply, least specific first: the namespace's *shape*.

    Namespaces with the same shape get the same effective settings.
    """
    found = [i for i, m in enumerate(compiled) if m.applies(namespace, labels)]
    return tuple(sorted(found, key=lambda i: ruleset.overrides[i].rank))


@dataclass(frozen=True)
class Resolved:
    """The effective rule set for one namespace, and which override set each setting."""

    rules: RuleSet
    origin: dict[tuple[str, str], str]
    conflicts: tuple[str, ...]


def merge(ruleset: RuleSet, shape: tuple[int, ...], namespace: str = "") -> Resolved:
    """The base settings with the overrides of `shape` layered on, in order."""
    if not shape:
        return Resolved(ruleset.model_copy(update={"overrides": []}), {}, ())
    merged = ruleset.rules.model_dump(by_alias=True)
    origin: dict[tuple[str, str], str] = {}
    rank_of: dict[tuple[str, str], tuple[int, int]] = {}
    conflicts: list[str] = []
    for override in (ruleset.overrides[i] for i in shape):
        _layer(override, merged, origin, rank_of, conflicts, namespace)
    rules = ruleset.model_copy(
        update={"rules": RuleSettings.model_validate(merged), "overrides": []}
    )
    return Resolved(rules, origin, tuple(conflicts))


def _layer(
    override: Override,
    merged: dict[str, dict[str, object]],
    origin: dict[tuple[str, str], str],
    rank_of: dict[tuple[str, str], tuple[int, int]],
    conflicts: list[str],
    namespace: str,
) -> None:
    for rule_id, settings in override.rules.items():
        for setting, value in settings.items():
            where = (rule_id, setting)
            if rank_of.get(where) == override.rank and merged[rule_id][setting] != value:
                conflicts.append(
                    f"{rule_id}.{setting}: overrides {origin[where]!r} and "
                    f"{override.name!r} are equally specific for namespace {namespace}"
                )
            merged[rule_id][setting] = value
            origin[where] = override.name
            rank_of[where] = override.rank


def resolve(ruleset: RuleSet, namespace: str, labels: Mapping[str, str] | None = None) -> Resolved:
    """The rules in force in `namespace` (with these namespace labels, when known)."""
    if not ruleset.overrides:
        return Resolved(ruleset, {}, ())
    shape = applicable(ruleset, matchers(ruleset), namespace, labels)
    return merge(ruleset, shape, namespace)
