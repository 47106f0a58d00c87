"""From an AdmissionRequest to a decision: which requests the engine sees, and with what facts.

`/mutate` only mutates (it denies only an object it cannot read); verdicts and warnings come
from `/validate`, so kubectl never shows a warning twice. The decision itself, precedence
included, is the engine's (`engine.decision`); this module only feeds it and writes it down.
"""

from __future__ import annotations

import orjson

from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.decision import Decision, unreadable
from webhook.engine.pipeline import Stage, evaluate
from webhook.engine.reach import untainted_gpu_nodes
from webhook.engine.subject import Subject, subject_for
from webhook.facts.model import FactsSource
from webhook.server.review import AdmissionRequest
from webhook.server.stages import OFF, Watch

__all__ = ["decide", "skipped", "subject_of"]


def skipped(request: AdmissionRequest, rules: CompiledRuleSet) -> bool:
    """Requests the engine has nothing to say about: DELETE/CONNECT, other kinds, and every
    subresource but pods/ephemeralcontainers (`kubectl debug` adds containers to a pod)."""
    if request.sub_resource:
        return not (
            request.sub_resource == "ephemeralcontainers"
            and request.kind.group == ""
            and request.kind.kind == "Pod"
            and request.operation == "UPDATE"
        )
    return request.operation not in ("CREATE", "UPDATE") or not rules.workloads.holds_pods(
        request.kind.group, request.kind.kind
    )


def subject_of(request: AdmissionRequest, rules: CompiledRuleSet) -> Subject | Decision:
    """The engine's view of the request, or the refusal of an object that is not JSON."""
    try:
        obj = request.parsed_object()
        old = request.parsed_old_object() if request.operation == "UPDATE" else None
    except orjson.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        return unreadable(request.kind.kind, "object", f"not readable JSON (at {where})")
    return subject_for(
        obj,
        group=request.kind.group,
        kind=request.kind.kind,
        namespace=request.namespace,
        # A cluster-scoped kind (ClusterServingRuntime...) belongs to no namespace: judged under
        # the base rules, with no namespace's quota.
        fallback_namespace=_fallback(rules, request.kind.group, request.kind.kind),
        operation=request.operation,
        old_obj=old,
        subresource=request.sub_resource,
    )


def _fallback(rules: CompiledRuleSet, group: str, kind: str) -> str:
    workload = rules.workloads.get(group, kind)
    return "" if workload is not None and workload.cluster_scoped else "default"


def decide(
    stage: Stage,
    request: AdmissionRequest,
    rules: CompiledRuleSet,
    source: FactsSource | None = None,
    watch: Watch = OFF,
) -> tuple[Subject | None, Decision | None]:
    """The subject and the engine's decision on it; no decision when the engine need not look
    (skipped, or the fast path), no subject when the object is not JSON."""
    if skipped(request, rules):
        return None, None
    fast = not rules.might_apply(request.raw_object) and not (
        # GPU nodes without a GPU taint the rules name: a pod may land there with no marker in
        # its bytes, so none takes the fast path.
        source is not None and untainted_gpu_nodes(source.node_index(), rules.taint_keys)
    )
    watch.lap("prefilter")
    if fast:
        return None, None
    subject = subject_of(request, rules)
    watch.lap("decode")
    if isinstance(subject, Decision):
        return None, subject
    facts = source.facts_for(subject.namespace) if source is not None else None
    watch.lap("facts")
    decision = evaluate(subject, rules, facts, stage=stage)
    watch.lap("engine")
    return subject, decision
