"""From an AdmissionRequest to a response: which requests the engine sees, and the decision.

`/mutate` only mutates (it denies only an object it cannot read); verdicts and warnings come
from `/validate`, so kubectl never shows a warning twice. Deny beats warn beats audit.
"""

from __future__ import annotations

import logging

import orjson

from webhook.cluster import ClusterFacts, Reservations
from webhook.config import RuleSet
from webhook.engine import Judged, Subject, mutate, validate_and_hold
from webhook.findings import Finding
from webhook.metrics import FINDINGS, counted
from webhook.podviews import UnreadableObject, holds_pods
from webhook.prefilter import might_apply
from webhook.review import AdmissionRequest, encode

__all__ = ["MAX_WARNINGS", "answer_mutate", "answer_validate", "subject_of"]

# kubectl prints every warning on its own line; past a handful they stop being read.
MAX_WARNINGS = 5

decisions = logging.getLogger("gpu-admission.decisions")


def _skip(request: AdmissionRequest) -> bool:
    """Requests the engine has nothing to say about: subresources, DELETE/CONNECT, other kinds."""
    return (
        bool(request.sub_resource)
        or request.operation not in ("CREATE", "UPDATE")
        or not holds_pods(request.kind.group, request.kind.kind)
    )


def _fast_answer(endpoint: str, request: AdmissionRequest, rules: RuleSet) -> bytes | None:
    """ "Allowed, untouched" for what the engine need not see; None when it must."""
    if _skip(request):
        return encode(request.uid, allowed=True)
    if not might_apply(request.raw_object, rules):
        counted(endpoint, request.kind.kind, "fast").inc()
        return encode(request.uid, allowed=True)
    return None


def subject_of(request: AdmissionRequest) -> Subject:
    """The engine's view of the request; raises `UnreadableObject` for JSON it cannot parse."""
    try:
        obj = request.parsed_object()
        old = request.parsed_old_object() if request.operation == "UPDATE" else None
    except orjson.JSONDecodeError as exc:
        raise UnreadableObject("object", f"not readable JSON ({exc})") from None
    namespace = request.namespace
    if not namespace and isinstance(obj, dict):
        meta = obj.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("namespace"), str):
            namespace = meta["namespace"]
    return Subject(
        obj, request.kind.group, request.kind.kind, namespace or "default", request.operation, old
    )


def _unreadable(request: AdmissionRequest, exc: UnreadableObject) -> bytes:
    return encode(
        request.uid,
        allowed=False,
        code=400,
        reason="BadRequest",
        message=f"gpu-admission: cannot read the {request.kind.kind}: {exc.path}: {exc.problem}",
    )


def answer_mutate(
    request: AdmissionRequest,
    rules: RuleSet,
    *,
    cluster: ClusterFacts | None = None,
    reservations: Reservations | None = None,
) -> bytes:
    fast = _fast_answer("mutate", request, rules)
    if fast is not None:
        return fast
    try:
        subject = subject_of(request)
        mutated = mutate(subject, rules, cluster=cluster)
    except UnreadableObject as exc:
        counted("mutate", request.kind.kind, "denied").inc()
        return _unreadable(request, exc)
    counted("mutate", request.kind.kind, "patched" if mutated.patch else "allowed").inc()
    return encode(
        request.uid,
        allowed=True,
        patch=mutated.patch,
        audit_annotations={rule: "mutated" for rule in mutated.rules} or None,
    )


def _warnings(findings: list[Finding]) -> list[str]:
    lines = [f.warning() for f in findings]
    if len(lines) > MAX_WARNINGS:
        hidden = len(lines) - (MAX_WARNINGS - 1)
        lines = [*lines[: MAX_WARNINGS - 1], f"gpu-admission: {hidden} more warnings not shown"]
    return lines


_VERDICT = {"enforce": "deny", "warn": "warn", "audit": "audit"}


def _annotations(judged: list[Judged]) -> dict[str, str]:
    """One audit annotation per rule that fired: rule id -> strongest verdict."""
    rank = {"deny": 0, "warn": 1, "audit": 2}
    out: dict[str, str] = {}
    for j in judged:
        v = _VERDICT[j.mode]
        if j.finding.rule not in out or rank[v] < rank[out[j.finding.rule]]:
            out[j.finding.rule] = v
    return out


def _log_decision(
    request: AdmissionRequest, subject: Subject, judged: list[Judged], *, allowed: bool
) -> None:
    """One structured line per judged object: what shadow (audit) mode is read back from."""
    if not decisions.isEnabledFor(logging.INFO):
        return
    obj = subject.obj if isinstance(subject.obj, dict) else {}
    meta = obj.get("metadata") if isinstance(obj.get("metadata"), dict) else {}
    name = request.name or meta.get("name") or meta.get("generateName", "")
    findings = [{"rule": j.finding.rule, "mode": j.mode, "field": j.finding.field} for j in judged]
    decisions.info(
        "%s %s %s/%s: %s",
        "allowed" if allowed else "denied",
        request.kind.kind,
        subject.namespace,
        name,
        ", ".join(f"{j.finding.rule}={j.mode}" for j in judged),
        # Structured fields: the JSON log format emits them as keys.
        extra={
            "event": "admission",
            "uid": request.uid,
            "kind": request.kind.kind,
            "namespace": subject.namespace,
            "objectName": name,  # "name" is taken by the LogRecord itself
            "operation": request.operation,
            "dryRun": request.dry_run,
            "allowed": allowed,
            "findings": findings,
        },
    )


def answer_validate(
    request: AdmissionRequest,
    rules: RuleSet,
    *,
    cluster: ClusterFacts | None = None,
    reservations: Reservations | None = None,
) -> bytes:
    """The verdict; an admitted GPU pod's GPUs are held until the watch sees it (not dryRun)."""
    fast = _fast_answer("validate", request, rules)
    if fast is not None:
        return fast
    try:
        subject = subject_of(request)
        judged, hold = validate_and_hold(subject, rules, cluster=cluster)
    except UnreadableObject as exc:
        counted("validate", request.kind.kind, "denied").inc()
        return _unreadable(request, exc)
    denied = any(j.mode == "enforce" for j in judged)
    counted("validate", request.kind.kind, "denied" if denied else "allowed").inc()
    for j in judged:
        FINDINGS.labels(j.finding.rule, _VERDICT[j.mode]).inc()
    if hold is not None and reservations is not None and not request.dry_run:
        reservations.hold(hold)
    if not judged:
        return encode(request.uid, allowed=True)
    denials = [j.finding for j in judged if j.mode == "enforce"]
    warnings = [j.finding for j in judged if j.mode == "warn"]
    message = "\n".join(f.message() for f in denials)
    _log_decision(request, subject, judged, allowed=not denials)
    return encode(
        request.uid,
        allowed=not denials,
        message=message,
        warnings=_warnings(warnings),
        audit_annotations=_annotations(judged),
    )
