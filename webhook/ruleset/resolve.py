"""Which overrides apply to a namespace, and the settings they add up to.

Precedence, most specific last (it wins): a namespace selector alone < name patterns < exact
names; with both names and a selector, both must match and the selector breaks ties within
its name rank. Two overrides of equal rank that set the same setting differently for the same
namespace are a conflict: `rules check` reports it, and the later one in file order wins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from webhook.namepatterns import NamePatterns, is_pattern
from webhook.quantity import parse_quantity
from webhook.ruleset.models import Override, RuleSet, RuleSettings
from webhook.selectors import LabelSelector

__all__ = [
    "Crossing",
    "Matchers",
    "OverrideMatcher",
    "Resolved",
    "applicable",
    "matchers",
    "merge",
    "resolve",
]


class OverrideMatcher:
    """An override's namespace test, compiled on first use: with the index in `Matchers`
    most overrides of a big rule set are never tested, so a reload need not compile a
    regex for each of them."""

    __slots__ = ("_names", "namespaces", "selector")

    def __init__(self, namespaces: Sequence[str], selector: LabelSelector | None) -> None:
        self.namespaces = tuple(namespaces)
        self.selector = selector
        self._names: NamePatterns | None = None

    @property
    def names(self) -> NamePatterns | None:
        if self._names is None and self.namespaces:
            self._names = NamePatterns(self.namespaces)  # a benign race: same value either way
        return self._names

    def applies(self, namespace: str, labels: Mapping[str, str] | None) -> bool:
        names = self.names
        if names is not None and not names.matches(namespace):
            return False
        if self.selector is not None:
            return labels is not None and self.selector.matches(labels)
        return True


class Matchers(tuple[OverrideMatcher, ...]):
    """The overrides' namespace tests in file order, indexed so that finding the ones that
    apply to a namespace costs a few lookups rather than a walk over thousands of overrides.

    Exact names index by name, name patterns by their literal prefix (`team-*` under
    `team-`: a namespace's candidates are under its own prefixes), selector-only overrides
    by one of their matchLabels. Only what no index covers (`*-gpu`, a selector of
    expressions alone) is tested for every namespace.
    """

    by_name: dict[str, list[int]]
    by_prefix: dict[str, list[int]]
    by_label: dict[tuple[str, str], list[int]]
    scanned: tuple[int, ...]
    ranks: tuple[tuple[int, int], ...]

    def candidates(self, namespace: str, labels: Mapping[str, str] | None) -> set[int]:
        found = set(self.scanned)
        found.update(self.by_name.get(namespace, ()))
        for end in range(len(namespace) + 1):
            found.update(self.by_prefix.get(namespace[:end], ()))
        for item in (labels or {}).items():
            found.update(self.by_label.get(item, ()))
        return found


def _literal_prefix(pattern: str) -> str:
    cut = min((i for i, ch in enumerate(pattern) if ch in "*?["), default=len(pattern))
    return pattern[:cut]


def matchers(ruleset: RuleSet) -> Matchers:
    compiled = Matchers(
        OverrideMatcher(o.namespaces, o.namespace_selector) for o in ruleset.overrides
    )
    compiled.by_name, compiled.by_prefix, compiled.by_label = {}, {}, {}
    scanned: list[int] = []
    for i, o in enumerate(ruleset.overrides):
        if o.namespaces:
            for name in dict.fromkeys(o.namespaces):
                if is_pattern(name):
                    compiled.by_prefix.setdefault(_literal_prefix(name), []).append(i)
                else:
                    compiled.by_name.setdefault(name, []).append(i)
        elif o.namespace_selector is not None and o.namespace_selector.match_labels:
            label = next(iter(o.namespace_selector.match_labels.items()))
            compiled.by_label.setdefault(label, []).append(i)
        else:
            scanned.append(i)
    compiled.scanned = tuple(scanned)
    compiled.ranks = tuple(o.rank for o in ruleset.overrides)
    return compiled


def applicable(
    ruleset: RuleSet,
    compiled: Sequence[OverrideMatcher],
    namespace: str,
    labels: Mapping[str, str] | None,
) -> tuple[int, ...]:
    """Indexes of the overrides that apply, least specific first: the namespace's *shape*.

    Namespaces with the same shape get the same effective settings. Within a rank, file
    order (the later one wins a tie).
    """
    if isinstance(compiled, Matchers):
        candidates: Iterable[int] = compiled.candidates(namespace, labels)
        ranks: Sequence[tuple[int, int]] = compiled.ranks
    else:
        candidates = range(len(compiled))
        ranks = [o.rank for o in ruleset.overrides]
    found = sorted(i for i in candidates if compiled[i].applies(namespace, labels))
    return tuple(sorted(found, key=ranks.__getitem__))


@dataclass(frozen=True)
class Crossing:
    """Two settings of one rule that cannot hold together once the overrides of a namespace
    are laid on each other (each override fits the base rules on its own): the rule, the
    settings, and the sentence `rules explain` and `rules check` say."""

    rule: str
    settings: tuple[str, ...]
    text: str


@dataclass(frozen=True)
class Resolved:
    """The effective rule set for one namespace, and which override set each setting.
    `conflicts` holds every conflict's sentence, `crossings` those of settings that cross."""

    rules: RuleSet
    origin: dict[tuple[str, str], str]
    conflicts: tuple[str, ...]
    crossings: tuple[Crossing, ...] = ()


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
    crossings = [
        c
        for c in (_cap_shm(merged, origin, namespace), _default_allowed(merged, origin, namespace))
        if c
    ]
    conflicts += [c.text for c in crossings]
    rules = ruleset.model_copy(
        update={"rules": RuleSettings.model_validate(merged), "overrides": []}
    )
    return Resolved(rules, origin, tuple(conflicts), tuple(crossings))


def _said(origin: dict[tuple[str, str], str], rule: str, key: str) -> str:
    name = origin.get((rule, key))
    return f"override {name!r}" if name else "the base rules"


def _cap_shm(
    merged: dict[str, dict[str, object]], origin: dict[tuple[str, str], str], namespace: str
) -> Crossing | None:
    """Each override is checked against the base rules at load, but two that both apply here
    may still cross: one raises minSize above the maxSize the other sets. The cap holds
    (minSize comes down to maxSize), and it is a conflict `rules explain` shows and `rules
    check` refuses where it can see the namespace, never a review that fails."""
    shm = merged["gpu-shm"]
    low, high = str(shm["minSize"]), str(shm["maxSize"])
    if parse_quantity(low) <= parse_quantity(high):
        return None
    shm["minSize"] = high
    return Crossing(
        "gpu-shm",
        ("minSize", "maxSize"),
        f"gpu-shm.minSize {low} ({_said(origin, 'gpu-shm', 'minSize')}) is above gpu-shm.maxSize "
        f"{high} ({_said(origin, 'gpu-shm', 'maxSize')}) for namespace {namespace}; maxSize holds",
    )


def _default_allowed(
    merged: dict[str, dict[str, object]], origin: dict[tuple[str, str], str], namespace: str
) -> Crossing | None:
    """One override's defaultClass outside another's allowedClasses: the default would be
    injected and then denied. It is not injected (a pod that names no class is told which
    classes are allowed), and it is a conflict, as for gpu-shm."""
    rule = "gpu-priority-class"
    cfg = merged[rule]
    default, allowed = cfg["defaultClass"], cfg["allowedClasses"]
    if not default or not isinstance(allowed, list) or not allowed or default in allowed:
        return None
    cfg["defaultClass"] = ""
    return Crossing(
        rule,
        ("defaultClass", "allowedClasses"),
        f"{rule}.defaultClass {default!r} ({_said(origin, rule, 'defaultClass')}) is not in "
        f"{rule}.allowedClasses ({', '.join(map(str, allowed))}; "
        f"{_said(origin, rule, 'allowedClasses')}) for namespace {namespace}; no default is "
        "injected",
    )


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
