"""The manifest audit: the webhook's engine over objects read from files, not requests.

Each object is evaluated exactly as the webhook would on CREATE (same rules, same modes, the
mutations first and the validations on the mutated object), so an audit verdict is a promise
about what `kubectl apply` will do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.cluster import ClusterFacts
from webhook.config import RuleSet
from webhook.engine import Judged, Subject, evaluate
from webhook.manifests import Document, InputError
from webhook.podviews import UnreadableObject, group_of, holds_pods

__all__ = ["VERDICTS", "AuditResult", "Skipped", "Summary", "audit"]

VERDICTS = {"enforce": "deny", "warn": "warn", "audit": "audit"}


@dataclass(slots=True)
class AuditResult:
    source: str
    kind: str
    api_version: str
    namespace: str
    name: str
    original: dict[str, Any]
    mutated: Any = None
    patch: list[dict[str, Any]] = field(default_factory=list)
    judged: list[Judged] = field(default_factory=list)
    unreadable: str = ""  # the denial the webhook gives an object it cannot read

    @property
    def allowed(self) -> bool:
        return not self.unreadable and not any(j.mode == "enforce" for j in self.judged)

    @property
    def warned(self) -> bool:
        return any(j.mode == "warn" for j in self.judged)

    def findings(self) -> list[dict[str, str]]:
        """The documented JSON shape of each finding."""
        out = [
            {
                "rule": j.finding.rule,
                "mode": j.mode,
                "verdict": VERDICTS[j.mode],
                "path": j.finding.field,
                "message": j.finding.message(),
            }
            for j in self.judged
        ]
        if self.unreadable:
            out.insert(
                0,
                {
                    "rule": "unreadable-object",
                    "mode": "enforce",
                    "verdict": "deny",
                    "path": "",
                    "message": self.unreadable,
                },
            )
        return out


@dataclass(frozen=True, slots=True)
class Skipped:
    source: str
    kind: str


@dataclass(slots=True)
class Summary:
    objects: int = 0
    allowed: int = 0
    denied: int = 0
    warned: int = 0
    mutated: int = 0
    skipped: int = 0
    errors: int = 0

    def add(self, item: AuditResult | Skipped | InputError) -> None:
        if isinstance(item, Skipped):
            self.skipped += 1
        elif isinstance(item, InputError):
            self.errors += 1
        else:
            self.objects += 1
            self.allowed += item.allowed
            self.denied += not item.allowed
            self.warned += item.warned
            self.mutated += bool(item.patch)


def _audit_one(
    doc: Document, rules: RuleSet, namespace: str, cluster: ClusterFacts | None
) -> AuditResult | Skipped:
    obj = doc.obj
    kind = str(obj.get("kind", ""))
    api_version = str(obj.get("apiVersion", ""))
    group = group_of(api_version)
    if not holds_pods(group, kind):
        return Skipped(doc.source, kind or "(no kind)")
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    ns = meta.get("namespace") if isinstance(meta.get("namespace"), str) else namespace
    name = str(meta.get("name") or meta.get("generateName") or "")
    result = AuditResult(doc.source, kind, api_version, ns, name, obj)
    try:
        outcome = evaluate(Subject(obj, group, kind, ns), rules, cluster=cluster)
    except UnreadableObject as exc:
        result.unreadable = f"cannot read the {kind}: {exc.path}: {exc.problem}"
        return result
    result.mutated, result.patch, result.judged = outcome.mutated, outcome.patch, outcome.judged
    return result


def audit(
    items: Iterable[Document | InputError],
    rules: RuleSet,
    *,
    namespace: str = "default",
    cluster: ClusterFacts | None = None,
) -> Iterator[AuditResult | Skipped | InputError]:
    """Evaluate each document as the webhook would on CREATE; input errors pass through.

    Without cluster facts the cluster-aware rules do not run; the reports list them as not
    checked rather than passed.
    """
    for item in items:
        if isinstance(item, InputError):
            yield item
        else:
            yield _audit_one(item, rules, namespace, cluster)
