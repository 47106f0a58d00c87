"""Prometheus metrics: what was admitted, denied, warned and audited, and how fresh the facts are.

Shadow mode (`audit`) is read back from `gpu_admission_findings_total{verdict="audit"}`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, Counter, Gauge, Histogram, generate_latest

from webhook.engine.decision import Decision

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


def record(endpoint: str, kind: str, decision: Decision | None, *, fast: bool) -> None:
    """Count one answered review: its result, and on `/validate` every finding's verdict.

    `fast` is a review the prefilter answered; a skipped one (subresource, other kinds) is
    not counted at all.
    """
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


def watch_cluster_facts(age: Callable[[], float | None], pods: Callable[[], int]) -> None:
    """Gauges read the facts when scraped, so they cost nothing per request."""
    CLUSTER_AGE.set_function(lambda: min(age() or 0.0, 1e9))
    CLUSTER_PODS.set_function(lambda: float(pods()))


def render() -> bytes:
    return generate_latest()
