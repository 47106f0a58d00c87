"""The manifest audit: the webhook's engine over objects read from files, not requests.

Each object is evaluated exactly as the webhook would on CREATE (same rules, same modes, the
mutations first and the validations on the mutated object), so an audit verdict is a promise
about what `kubectl apply` will do.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from webhook.audit.manifests import Document, InputError
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision
from webhook.engine.pipeline import evaluate
from webhook.engine.subject import subject_for
from webhook.facts.model import FactsSource

__all__ = ["AuditResult", "Skipped", "Summary", "audit"]


@dataclass(frozen=True, slots=True)
class AuditResult:
    """One object and the engine's decision on it, as the webhook would make it on CREATE."""

    source: str
    kind: str
    api_version: str
    namespace: str
    name: str
    original: dict[str, Any]
    decision: Decision

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def warned(self) -> bool:
        return self.decision.warned

    @property
    def patch(self) -> list[dict[str, Any]]:
        return list(self.decision.patch)

    @property
    def mutated(self) -> Any:
        return self.decision.mutated

    def findings(self) -> list[dict[str, str]]:
        """The documented JSON shape of each finding."""
        out = [
            {
                "rule": j.finding.rule,
                "mode": str(j.mode),
                "verdict": str(j.verdict),
                "path": j.finding.field,
                "message": j.finding.message(),
            }
            for j in self.decision.judged
        ]
        if self.decision.unreadable is not None:
            out.insert(
                0,
                {
                    "rule": "unreadable-object",
                    "mode": "enforce",
                    "verdict": "deny",
                    "path": "",
                    "message": self.decision.unreadable.message(),
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
            self.mutated += bool(item.decision.patch)


def _audit_one(
    doc: Document, rules: CompiledRuleSet, namespace: str, source: FactsSource | None
) -> AuditResult | Skipped:
    subject = subject_for(doc.obj, fallback_namespace=namespace)
    workload = rules.workloads.get(subject.group, subject.kind)
    if workload is not None and workload.cluster_scoped:
        subject = dataclasses.replace(subject, namespace="")  # no namespace's rules or quota
    if not rules.workloads.holds_pods(subject.group, subject.kind):
        return Skipped(doc.source, subject.kind or "(no kind)")
    facts = source.facts_for(subject.namespace) if source is not None else None
    return AuditResult(
        doc.source,
        subject.kind,
        str(doc.obj.get("apiVersion", "")),
        subject.namespace,
        subject.name,
        doc.obj,
        evaluate(subject, rules, facts),
    )


def audit(
    items: Iterable[Document | InputError],
    rules: CompiledRuleSet,
    *,
    namespace: str = "default",
    source: FactsSource | None = None,
) -> Iterator[AuditResult | Skipped | InputError]:
    """Evaluate each document as the webhook would on CREATE; input errors pass through.

    Without cluster facts the cluster-aware rules do not run; the reports list them as not
    checked rather than passed.
    """
    for item in items:
        if isinstance(item, InputError):
            yield item
        else:
            yield _audit_one(item, rules, namespace, source)
