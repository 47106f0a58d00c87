"""The manifest audit: the webhook's engine over objects read from files, not requests.

Each object is evaluated exactly as the webhook would on CREATE (same rules, same modes, the
mutations first and the validations on the mutated object), so an audit verdict is a promise
about what `kubectl apply` will do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from webhook.audit.drafiles import FileDra, from_documents
from webhook.audit.locations import Location, locate_segments, pointer_segments
from webhook.audit.manifests import Document, InputError
from webhook.engine.admit import Decided, Request, admit
from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision
from webhook.facts.model import FactsSource

__all__ = ["FAIL_ON", "AuditResult", "Skipped", "Summary", "audit"]

# What makes an audit fail (exit 1): `deny`, objects the webhook would refuse; `warn`, those
# and the objects it would admit with a warning.
FAIL_ON = ("deny", "warn")


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
    # Where the object starts, and where each finding's field is (in `findings()` order);
    # None for objects that come from no file (a live cluster).
    location: Location | None = None
    finding_locations: tuple[Location | None, ...] = ()
    # Where each patch operation lands in the file (its field, or the object that gets it),
    # in patch order; the shown diff's hunks are numbered by these.
    patch_locations: tuple[Location | None, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    @property
    def warned(self) -> bool:
        return self.decision.warned

    def fails(self, fail_on: str) -> bool:
        """Whether this object fails the audit: denied, or warned with `--fail-on warn`."""
        return not self.allowed or (fail_on == "warn" and self.warned)

    @property
    def patch(self) -> list[dict[str, Any]]:
        return list(self.decision.patch)

    @property
    def mutated(self) -> Any:
        return self.decision.mutated

    def findings(self) -> list[dict[str, Any]]:
        """The documented JSON shape of each finding, with its location (or None)."""
        out: list[dict[str, Any]] = [
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
        places = self.finding_locations
        for i, finding in enumerate(out):
            where = places[i] if i < len(places) else None
            finding["location"] = where.as_json() if where is not None else None
        return out


@dataclass(frozen=True, slots=True)
class Skipped:
    """A document of a kind that holds no pod template: counted, listed only with --verbose."""

    source: str
    kind: str
    location: Location | None = None


@dataclass(slots=True)
class Summary:
    """The counts every output reports, by one convention: each audited object is exactly one
    of allowed or denied; warned and mutated count objects among those (a denied object can
    be warned and mutated too). Skipped documents and input errors are not objects."""

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

    def counts(self) -> dict[str, int]:
        """The object counts, as JSON, SARIF and PolicyReport annotations carry them."""
        return {
            "objects": self.objects,
            "allowed": self.allowed,
            "denied": self.denied,
            "warned": self.warned,
            "mutated": self.mutated,
        }

    def describe(self) -> str:
        """The counts in words that say the convention: allowed + denied = objects."""
        return (
            f"{self.objects} {'object' if self.objects == 1 else 'objects'}: "
            f"{self.allowed} allowed + {self.denied} denied; "
            f"of these {self.warned} warned, {self.mutated} would be mutated"
        )

    def exit_code(self, fail_on: str) -> int:
        """2: some input could not be read (the audit is incomplete); 1: an object fails
        (see `AuditResult.fails`); 0: none does."""
        if self.errors:
            return 2
        return 1 if self.denied or (fail_on == "warn" and self.warned) else 0


def _audit_one(
    doc: Document,
    rules: CompiledRuleSet,
    namespace: str,
    source: FactsSource | None,
    dra: FileDra | None = None,
) -> AuditResult | Skipped:
    request = Request(obj=doc.obj, fallback_namespace=namespace)
    outcome = admit(request, rules, source, dra=dra.over if dra else None)
    if not isinstance(outcome, Decided) or outcome.subject is None:
        kind = str(doc.obj.get("kind", "")) if isinstance(doc.obj, dict) else ""
        return Skipped(doc.source, kind or "(no kind)", doc.locate(""))
    decision, subject = outcome.decision, outcome.subject
    return AuditResult(
        doc.source,
        subject.kind,
        str(doc.obj.get("apiVersion", "")),
        subject.namespace,
        subject.name,
        doc.obj,
        decision,
        doc.locate(""),
        _finding_locations(doc, decision),
        _patch_locations(doc, decision),
    )


def _patch_locations(doc: Document, decision: Decision) -> tuple[Location | None, ...]:
    """Where each patch operation lands in the file; only patched objects pay for the walk."""
    if doc.node is None or doc.file is None or not decision.patch:
        return ()
    node, file = doc.node, doc.file
    return tuple(locate_segments(node, pointer_segments(op["path"]), file) for op in decision.patch)


def _finding_locations(doc: Document, decision: Decision) -> tuple[Location | None, ...]:
    """Where each finding's field is, in `AuditResult.findings()` order; only objects with
    findings pay for the walk."""
    if doc.node is None or (decision.unreadable is None and not decision.judged):
        return ()
    paths = [j.finding.field for j in decision.judged]
    if decision.unreadable is not None:
        paths.insert(0, decision.unreadable.path)
    return tuple(doc.locate(path) for path in paths)


def audit(
    items: Iterable[Document | InputError],
    rules: CompiledRuleSet,
    *,
    namespace: str = "default",
    source: FactsSource | None = None,
    files: bool = False,
) -> Iterator[AuditResult | Skipped | InputError]:
    """Evaluate each document as the webhook would on CREATE; input errors pass through.

    Without cluster facts the cluster-aware rules do not run; the reports list them as not
    checked rather than passed. With `files` (manifests, as `kubectl apply -f` would send
    them all), the DRA objects among the documents are facts for every other document of the
    run (`drafiles`): the documents are read in full before the first is judged.
    """
    dra: FileDra | None = None
    if files:
        items = list(items)
        dra = from_documents((i.obj for i in items if isinstance(i, Document)), namespace)
    for item in items:
        if isinstance(item, InputError):
            yield item
        else:
            yield _audit_one(item, rules, namespace, source, dra)
