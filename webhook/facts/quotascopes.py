"""ResourceQuota scopes: which pods a scoped quota counts, as the apiserver decides it.

A quota with `scopes` or a `scopeSelector` counts, and refuses, only the pods every one of its
scope terms matches (the quota evaluator's `podMatchesScopeFunc`, k8s.io/kubernetes
pkg/quota/v1/evaluator/core/pods.go):

- `Terminating` / `NotTerminating`: `spec.activeDeadlineSeconds` set to 0 or more, or not;
- `BestEffort` / `NotBestEffort`: the pod's QoS class, which reads CPU and memory only (a pod
  asking GPUs and nothing else is BestEffort); pod-level `spec.resources`, when present,
  decides alone;
- `PriorityClass`: `Exists` is "names a class"; `In`, `NotIn`, `DoesNotExist` are a label
  selector over `{PriorityClass: <class>}`, no label at all when the pod names none (so
  `NotIn` matches a pod without a class). A pod that names none is judged with the global
  default class, which the Priority admission plugin sets before quota admission;
- `CrossNamespacePodAffinity`: a pod (anti-)affinity term, required or preferred, with
  `namespaces` or a `namespaceSelector`;
- any other scope matches no pod.

Read tolerantly from the API (stored quotas were validated there); the snapshot file checks
what the apiserver's validation would refuse (`problems`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from webhook.quantity import QuantityError, parse_quantity, positive

__all__ = [
    "OPERATORS",
    "POD_SCOPES",
    "ScopeTerm",
    "describe",
    "pod_matches",
    "problems",
    "scope_terms",
]

POD_SCOPES = (
    "Terminating",
    "NotTerminating",
    "BestEffort",
    "NotBestEffort",
    "PriorityClass",
    "CrossNamespacePodAffinity",
)
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")
# Every scope the API knows (VolumeAttributesClass is for storage: it counts no pod), those
# whose only operator is Exists, and pairs no quota may hold both of.
_KNOWN = (*POD_SCOPES, "VolumeAttributesClass")
_EXISTS_ONLY = frozenset(POD_SCOPES) - {"PriorityClass"}
_EXCLUSIVE = (("Terminating", "NotTerminating"), ("BestEffort", "NotBestEffort"))
_QOS = ("cpu", "memory")


@dataclass(frozen=True, slots=True)
class ScopeTerm:
    """One scope of a quota: `scopes: [X]` is (X, Exists); a `scopeSelector` expression is
    itself. A term read from a shape no API server stores is `?`, which matches no pod."""

    scope: str
    operator: str = "Exists"
    values: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.operator == "Exists" and self.scope != "PriorityClass":
            return self.scope
        if self.values:
            return f"{self.scope} {self.operator} ({', '.join(self.values)})"
        return f"{self.scope} {self.operator}"


def scope_terms(spec: Mapping[str, Any]) -> tuple[ScopeTerm, ...]:
    """The terms of a ResourceQuota's `spec`: its `scopes`, then its `scopeSelector`'s
    `matchExpressions`, all ANDed."""
    out: list[ScopeTerm] = []
    scopes = spec.get("scopes")
    if scopes is not None:
        if not isinstance(scopes, list):
            return (ScopeTerm("?"),)
        out += [ScopeTerm(s) if isinstance(s, str) else ScopeTerm("?") for s in scopes]
    selector = spec.get("scopeSelector")
    if selector is None:
        return tuple(out)
    expressions = selector.get("matchExpressions") if isinstance(selector, dict) else None
    if expressions is None and isinstance(selector, dict):
        return tuple(out)
    if not isinstance(expressions, list):
        return (*out, ScopeTerm("?"))
    for e in expressions:
        out.append(_term(e))
    return tuple(out)


def _term(expression: Any) -> ScopeTerm:
    if not isinstance(expression, dict):
        return ScopeTerm("?")
    scope, operator = expression.get("scopeName"), expression.get("operator")
    values = expression.get("values") or []
    if not isinstance(scope, str) or not isinstance(operator, str) or not isinstance(values, list):
        return ScopeTerm("?")
    if not all(isinstance(v, str) for v in values):
        return ScopeTerm("?")
    return ScopeTerm(scope, operator, tuple(values))


def describe(terms: Iterable[ScopeTerm]) -> str:
    """`PriorityClass In (high), Terminating`: the pods a scoped quota counts, in words."""
    return ", ".join(t.describe() for t in terms)


def problems(terms: Iterable[ScopeTerm]) -> list[str]:
    """What the apiserver's validation says of these terms (empty: it stores them)."""
    out = []
    seen = set()
    for t in terms:
        seen.add(t.scope)
        if t.scope not in _KNOWN:
            out.append(f"scope {t.scope!r} is not one of {', '.join(_KNOWN)}")
        elif t.operator not in OPERATORS:
            out.append(f"operator {t.operator!r} is not one of {', '.join(OPERATORS)}")
        elif t.scope in _EXISTS_ONLY and t.operator != "Exists":
            out.append(f"scope {t.scope} takes only Exists")
        elif t.operator in ("In", "NotIn") and not t.values:
            out.append(f"operator {t.operator} needs at least one value")
        elif t.operator in ("Exists", "DoesNotExist") and t.values:
            out.append(f"operator {t.operator} takes no values")
    for a, b in _EXCLUSIVE:
        if a in seen and b in seen:
            out.append(f"{a} and {b} together match no pod")
    return out


def pod_matches(
    terms: Iterable[ScopeTerm], spec: Mapping[str, Any], default_class: str = ""
) -> bool:
    """Whether a quota with these terms counts a pod with this spec (no terms: every pod).

    `default_class`: the global default PriorityClass, which a pod naming none gets."""
    return all(_matches(t, spec, default_class) for t in terms)


def _matches(t: ScopeTerm, spec: Mapping[str, Any], default_class: str) -> bool:
    scope = t.scope
    if scope in ("Terminating", "NotTerminating"):
        deadline = spec.get("activeDeadlineSeconds")
        terminating = isinstance(deadline, int) and not isinstance(deadline, bool) and deadline >= 0
        return terminating is (scope == "Terminating")
    if scope in ("BestEffort", "NotBestEffort"):
        return _best_effort(spec) is (scope == "BestEffort")
    if scope == "PriorityClass":
        name = spec.get("priorityClassName")
        name = name if isinstance(name, str) and name else default_class
        if t.operator == "Exists":
            return bool(name)
        if t.operator == "DoesNotExist":
            return not name
        if t.operator == "In":
            return bool(name) and name in t.values
        if t.operator == "NotIn":
            return not name or name not in t.values
        return False  # an operator no selector has: the apiserver errs and counts nothing
    if scope == "CrossNamespacePodAffinity":
        return _cross_namespace(spec.get("affinity"))
    return False


def _best_effort(spec: Mapping[str, Any]) -> bool:
    """QoS BestEffort: no positive CPU or memory request or limit, on the pod-level
    `resources` when the pod has them, else on any container or init container."""
    pod_level = spec.get("resources")
    if isinstance(pod_level, dict):
        return not _sized(pod_level)
    for key in ("containers", "initContainers"):
        containers = spec.get(key)
        if not isinstance(containers, list):
            continue
        for c in containers:
            if (
                isinstance(c, dict)
                and isinstance(c.get("resources"), dict)
                and _sized(c["resources"])
            ):
                return False
    return True


def _sized(resources: Mapping[str, Any]) -> bool:
    for part in ("requests", "limits"):
        amounts = resources.get(part)
        if not isinstance(amounts, dict):
            continue
        for name in _QOS:
            if name not in amounts:
                continue
            try:
                if positive(parse_quantity(amounts[name])):
                    return True
            except QuantityError:
                continue
    return False


def _cross_namespace(affinity: Any) -> bool:
    if not isinstance(affinity, dict):
        return False
    for kind in ("podAffinity", "podAntiAffinity"):
        part = affinity.get(kind)
        if not isinstance(part, dict):
            continue
        for term in _list(part.get("requiredDuringSchedulingIgnoredDuringExecution")):
            if _names_namespaces(term):
                return True
        for weighted in _list(part.get("preferredDuringSchedulingIgnoredDuringExecution")):
            if isinstance(weighted, dict) and _names_namespaces(weighted.get("podAffinityTerm")):
                return True
    return False


def _names_namespaces(term: Any) -> bool:
    """`len(term.Namespaces) != 0 || term.NamespaceSelector != nil`."""
    if not isinstance(term, dict):
        return False
    namespaces = term.get("namespaces")
    return bool(namespaces) or term.get("namespaceSelector") is not None


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
