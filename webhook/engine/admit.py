"""One admission request in, one outcome out: what every front door asks the engine.

The webhook, the manifest and live audits, `review --mutated`, `rules test` and the golden
cases all call `admit`, so the parts around the rules are worked out in one place: which
requests the engine has nothing to say about, the namespace an object is judged under
(none for a cluster-scoped kind), the fast path on the object's raw bytes, and reading the
object. The outcome says which of these ended it: `Skipped` (and why), `Fast` (no rule can
apply), or `Decided` (the engine's `Decision`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision, unreadable
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.podviews import group_of
from webhook.engine.reach import untainted_gpu_nodes
from webhook.engine.subject import Subject, subject_for
from webhook.engine.workloads import WorkloadTable
from webhook.facts.dra import DraFacts
from webhook.facts.model import FactsSource

__all__ = [
    "FAST",
    "Decided",
    "Fast",
    "Outcome",
    "Request",
    "Skipped",
    "admit",
    "cluster_scoped",
    "skip_reason",
]


class Request:
    """An admission request as the engine reads it.

    The object is given parsed (`obj`), or as the JSON bytes the apiserver sent (`raw`): then
    the fast path reads the bytes and the object is parsed only when a rule may apply. With
    both, the fast path reads `raw` and the rules `obj`. Group and kind default to the
    object's own; `namespace` is the apiserver's, authoritative when given; a namespaced
    object that names none is judged in `fallback_namespace` (the audit's --namespace).

    A plain class, not a dataclass: built on every review, and compiled its constructor costs
    half as much. Never edited after it is built.
    """

    __slots__ = (
        "fallback_namespace",
        "group",
        "kind",
        "namespace",
        "namespace_labels",
        "obj",
        "old_obj",
        "operation",
        "raw",
        "raw_old",
        "subresource",
        "user",
    )

    def __init__(
        self,
        group: str | None = None,
        kind: str | None = None,
        operation: str = "CREATE",
        namespace: str = "",
        subresource: str = "",
        obj: Any = None,
        old_obj: Any = None,  # read on UPDATE only
        raw: bytes | None = None,
        raw_old: bytes | None = None,
        namespace_labels: Mapping[str, str] | None = None,
        fallback_namespace: str = "default",
        user: str = "",  # the request's userInfo.username
    ) -> None:
        self.group = group
        self.kind = kind
        self.operation = operation
        self.namespace = namespace
        self.subresource = subresource
        self.obj = obj
        self.old_obj = old_obj
        self.raw = raw
        self.raw_old = raw_old
        self.namespace_labels = namespace_labels
        self.fallback_namespace = fallback_namespace
        self.user = user

    @classmethod
    def reviewed(
        cls,
        *,
        group: str,
        kind: str,
        operation: str,
        namespace: str,
        subresource: str,
        raw: bytes | None,
        raw_old: bytes | None,
        user: str,
    ) -> Request:
        """The request an AdmissionReview carries, its objects left as the JSON bytes the
        apiserver sent (the old one read on UPDATE only): what the webhook asks on every
        review. Built positionally here, so no caller depends on the field order."""
        return cls(
            group,
            kind,
            operation,
            namespace,
            subresource,
            None,
            None,
            raw,
            raw_old if operation == "UPDATE" else None,
            None,
            "default",
            user,
        )


@dataclass(slots=True)
class Skipped:
    """A request the engine has nothing to say about: allowed untouched, not counted."""

    why: str


@dataclass(slots=True)
class Fast:
    """The fast path: the object's bytes show that no rule can apply; allowed untouched."""


FAST = Fast()


@dataclass(slots=True, init=False)
class Decided:
    """The engine's decision; the subject it judged (None: the object is not readable JSON).
    A compiled value ("Compiled values", docs/development.md)."""

    decision: Decision
    subject: Subject | None

    def __init__(self, decision: Decision, subject: Subject | None) -> None:
        self.decision = decision
        self.subject = subject


Outcome = Skipped | Fast | Decided


def skip_reason(
    operation: str,
    subresource: str,
    group: str,
    kind: str,
    rules: CompiledRuleSet,
    user: str = "",
) -> str:
    """Why the engine has nothing to say about such a request ("" when it has): DELETE and
    CONNECT, kinds that hold no pod spec, and every subresource but pods/ephemeralcontainers
    (`kubectl debug` adds containers to a pod). A ConfigMap is judged only when the requester
    is known (`user`): who writes a sharing scheduler's device list is the question."""
    if subresource:
        if subresource == "ephemeralcontainers" and (group, kind, operation) == (
            "",
            "Pod",
            "UPDATE",
        ):
            return ""
        return f"subresource {subresource}"
    if operation not in ("CREATE", "UPDATE"):
        return f"operation {operation}"
    if (group, kind) == ("", "ConfigMap") and user:
        return ""  # a sharing scheduler's device list (engine.sharedmaps)
    if not rules.workloads.holds_pods(group, kind):
        return f"{kind or '(no kind)'} holds no pod spec"
    return ""


def cluster_scoped(table: WorkloadTable, group: str, kind: str) -> bool:
    """Whether objects of this kind belong to no namespace (ClusterServingRuntime...): judged
    under the base rules with no namespace's quota, and sent by the apiserver with none."""
    workload = table.get(group, kind)
    return workload is not None and workload.cluster_scoped


def _no_lap(stage: str) -> None:
    """The default stopwatch: laps nothing."""


def admit(
    request: Request,
    rules: CompiledRuleSet,
    facts: FactsSource | None = None,
    *,
    stage: Stage = Stage.ADMIT,
    lap: Callable[[str], None] = _no_lap,
    dra: Callable[[str, DraFacts | None], DraFacts | None] | None = None,
) -> Outcome:
    """What the engine makes of `request` at `stage`, with cluster facts from `facts` (None:
    the cluster-aware rules do not run). `lap` is told when each step ends (`serve
    --profile-stages`): prefilter, decode, facts, engine. `dra` lays other DRA objects over
    the facts' for a namespace (an audit's files: `audit.drafiles`)."""
    obj = request.obj
    group, kind = request.group, request.kind
    if group is None:
        group = group_of(obj.get("apiVersion")) if isinstance(obj, dict) else ""
    if kind is None:
        kind = str(obj.get("kind", "")) if isinstance(obj, dict) else ""
    why = skip_reason(request.operation, request.subresource, group, kind, rules, request.user)
    if why:
        return Skipped(why)
    raw = request.raw
    if raw is not None:
        fast = not rules.might_apply(raw) and not (
            # GPU nodes without a GPU taint the rules name: a pod may land there with no
            # marker in its bytes, so none takes the fast path. Nor a pod asking a plain
            # resource a DRA class serves (`extendedResourceName`), a GPU name by the facts.
            facts is not None
            and (
                untainted_gpu_nodes(facts.node_index(), rules.taint_keys)
                or any(name.encode() in raw for name in facts.served_names())
            )
        )
        lap("prefilter")
        if fast:
            return FAST
    old = request.old_obj if request.operation == "UPDATE" else None
    if obj is None and raw is not None:
        try:
            obj = orjson.loads(raw)
            if old is None and request.raw_old is not None and request.operation == "UPDATE":
                old = orjson.loads(request.raw_old)
        except orjson.JSONDecodeError as exc:
            where = f"line {exc.lineno}, column {exc.colno}"
            return Decided(unreadable(kind, "object", f"not readable JSON (at {where})"), None)
    # A cluster-scoped kind belongs to no namespace, whatever its metadata says.
    scoped = not cluster_scoped(rules.workloads, group, kind)
    subject = subject_for(
        obj,
        group=group,
        kind=kind,
        namespace=request.namespace,
        fallback_namespace=request.fallback_namespace,
        operation=request.operation,
        old_obj=old,
        namespace_labels=request.namespace_labels,
        subresource=request.subresource,
        user=request.user,
        scoped=scoped,
    )
    lap("decode")
    found = facts.facts_for(subject.namespace) if facts is not None else None
    laid: DraFacts | None = None
    if dra is not None:
        laid = dra(subject.namespace, found.dra if found is not None else None)
        if found is not None:
            found = found.with_dra(laid)
    lap("facts")
    decision = evaluate(subject, rules, found, stage=stage, dra=laid)
    lap("engine")
    return Decided(decision, subject)
