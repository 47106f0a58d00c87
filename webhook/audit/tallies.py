"""Counts per rule and per namespace: what `--summary` shows instead of one line per object,
and what the live audit's namespace summary and the reports' totals are made of."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from webhook.audit.manifests import InputError
from webhook.audit.run import AuditResult, Skipped, Summary

__all__ = ["VERDICTS", "RuleTally", "Tallies"]

VERDICTS = ("deny", "warn", "audit")


@dataclass(slots=True)
class RuleTally:
    """One rule's findings by verdict, and how many objects it found anything in."""

    objects: int = 0
    deny: int = 0
    warn: int = 0
    audit: int = 0

    def as_json(self) -> dict[str, int]:
        return {"objects": self.objects, "deny": self.deny, "warn": self.warn, "audit": self.audit}


@dataclass(slots=True)
class Tallies:
    """The totals; with `detailed`, the same counts per namespace and findings per rule
    (only `--summary` shows those: a plain run does not pay for them)."""

    detailed: bool = False
    total: Summary = field(default_factory=Summary)
    by_namespace: dict[str, Summary] = field(default_factory=lambda: defaultdict(Summary))
    by_rule: dict[str, RuleTally] = field(default_factory=lambda: defaultdict(RuleTally))

    def add(self, item: AuditResult | Skipped | InputError) -> None:
        self.total.add(item)
        if not self.detailed or not isinstance(item, AuditResult):
            return
        self.by_namespace[item.namespace].add(item)
        fired: set[str] = set()
        for finding in item.findings():
            tally = self.by_rule[finding["rule"]]
            verdict = finding["verdict"]
            setattr(tally, verdict, getattr(tally, verdict) + 1)
            if finding["rule"] not in fired:
                fired.add(finding["rule"])
                tally.objects += 1

    def counted(
        self, items: Iterable[AuditResult | Skipped | InputError]
    ) -> Iterator[AuditResult | Skipped | InputError]:
        """`items`, each counted as it passes: the counts are whole once the stream is."""
        for item in items:
            self.add(item)
            yield item

    def rules(self) -> list[tuple[str, RuleTally]]:
        """Rules by how much they found: denials first, then warnings, then audits."""
        return sorted(
            self.by_rule.items(), key=lambda kv: (-kv[1].deny, -kv[1].warn, -kv[1].audit, kv[0])
        )

    def namespaces(self) -> list[tuple[str, Summary]]:
        return sorted(self.by_namespace.items())

    def as_json(self) -> dict[str, Any]:
        return {
            "byRule": {rule: t.as_json() for rule, t in self.rules()},
            "byNamespace": {ns: s.counts() for ns, s in self.namespaces()},
        }
