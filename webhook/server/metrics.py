"""What each review leaves behind: Prometheus metrics and the structured decision log line.

Shadow mode (`audit`) is read back from `gpu_admission_findings_total{verdict="audit"}` and
from the `gpu-admission.decisions` log. `record` is called once per review.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from webhook.engine.decision import Decision
from webhook.engine.subject import Subject
from webhook.server.review import AdmissionRequest

__all__ = [
    "CONTENT_TYPE",
    "FINDINGS",
    "LATENCY",
    "RELOADS",
    "REQUESTS",
    "counted",
    "record",
    "render",
    "watch_cluster_facts",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

decisions = logging.getLogger("gpu-admission.decisions")

REQUESTS = Counter(
    "gpu_admission_requests_total",
    "AdmissionReviews answered, by endpoint, kind and result (allowed, denied, patched, error).",
    ["endpoint", "kind", "result"],
)
FINDINGS = Counter(
    "gpu_admission_findings_total",
    "Rule findings by rule id and verdict (deny, warn, audit); audit: what shadow mode would deny.",
    ["rule", "verdict"],
)
LATENCY = Histogram(
    "gpu_admission_request_seconds",
    "Time to answer one AdmissionReview, body read to response built.",
    ["endpoint"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)
RELOADS = Counter(
    "gpu_admission_rule_reloads_total",
    "Rule-set loads by result: loaded, or refused (invalid; the last good set kept serving).",
    ["result"],
)
CLUSTER_AGE = Gauge(
    "gpu_admission_cluster_facts_age_seconds",
    "Seconds since the cluster facts last heard from the API server (0 for a snapshot).",
)
CLUSTER_PODS = Gauge(
    "gpu_admission_cluster_gpu_pods",
    "GPU pods held in the live cache as compact summaries.",
)


@lru_cache(maxsize=512)
def counted(endpoint: str, kind: str, result: str) -> Any:
    """The request counter's child for these labels; `labels()` costs microseconds per call.

    Kinds are the few that hold pods (or "" for bodies that were not reviews): bounded.
    """
    return REQUESTS.labels(endpoint, kind, result)


@lru_cache(maxsize=512)
def _finding(rule: str, verdict: str) -> Any:
    return FINDINGS.labels(rule, verdict)


def record(
    endpoint: str,
    review: AdmissionRequest,
    subject: Subject | None,
    decision: Decision | None,
    *,
    fast: bool,
) -> None:
    """Count one answered review (its result, and on `/validate` every finding's verdict) and
    log the judged ones.

    `fast` is a review the prefilter answered; a skipped one (subresource, other kinds) is
    not counted at all.
    """
    kind = review.kind.kind
    if decision is not None and subject is not None:
        _log_decision(review, subject, decision)
    if decision is None:
        if fast:
            counted(endpoint, kind, "fast").inc()
        return
    if not decision.allowed:
        result = "denied"
    elif decision.patch:
        result = "patched"
    else:
        result = "allowed"
    counted(endpoint, kind, result).inc()
    if decision.unreadable is None:
        for j in decision.judged:
            _finding(j.finding.rule, str(j.verdict)).inc()


def _log_decision(request: AdmissionRequest, subject: Subject, decision: Decision) -> None:
    """One structured line per judged object: what shadow (audit) mode is read back from."""
    if not decision.judged or not decisions.isEnabledFor(logging.INFO):
        return
    judged = decision.judged
    namespace = subject.namespace
    name = request.name or subject.name
    decisions.info(
        "%s %s %s/%s: %s",
        "allowed" if decision.allowed else "denied",
        request.kind.kind,
        namespace,
        name,
        ", ".join(f"{j.finding.rule}={j.mode}" for j in judged),
        # Structured fields: the JSON log format emits them as keys.
        extra={
            "event": "admission",
            "uid": request.uid,
            "kind": request.kind.kind,
            "namespace": namespace,
            "objectName": name,  # "name" is taken by the LogRecord itself
            "operation": request.operation,
            "dryRun": request.dry_run,
            "allowed": decision.allowed,
            "findings": [
                {"rule": j.finding.rule, "mode": str(j.mode), "field": j.finding.field}
                for j in judged
            ],
        },
    )


def watch_cluster_facts(age: Callable[[], float | None], pods: Callable[[], int]) -> None:
    """Gauges read the facts when scraped, so they cost nothing per request."""
    CLUSTER_AGE.set_function(lambda: min(age() or 0.0, 1e9))
    CLUSTER_PODS.set_function(lambda: float(pods()))


def render() -> bytes:
    return generate_latest()
