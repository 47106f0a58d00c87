"""What each review leaves behind: Prometheus metrics and the structured decision log line.

Shadow mode (`audit`) is read back from `gpu_admission_findings_total{verdict="audit"}` and
from the `gpu-admission.decisions` log. `record` is called once per review.

The per-review metrics (requests, findings, latency) are plain integers on the event loop,
turned into Prometheus families only when scraped (`_Tally`): a labelled prometheus_client
child takes a lock and about a microsecond per update, paid on every review; scraping, also
on the event loop, reads a consistent set.
"""

from __future__ import annotations

import logging
from bisect import bisect_left
from collections.abc import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Gauge, generate_latest
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from webhook.engine.admit import Decided, Fast, Outcome
from webhook.engine.decision import Decision
from webhook.engine.subject import Subject
from webhook.loglines import info_line
from webhook.server.review import AdmissionRequest

__all__ = [
    "CONTENT_TYPE",
    "RELOADS",
    "TALLY",
    "record",
    "render",
    "watch_cluster_facts",
]

CONTENT_TYPE = CONTENT_TYPE_LATEST

decisions = logging.getLogger("gpu-admission.decisions")

BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)


class _Tally(Collector):
    """Reviews, findings and latency as plain counts, exposed as Prometheus families."""

    def __init__(self) -> None:
        # (endpoint, kind, result); kinds are the workload table's, "" for a bad body
        self.requests: dict[tuple[str, str, str], int] = {}
        self.findings: dict[tuple[str, str], int] = {}  # (rule, verdict)
        # endpoint -> (count per bucket, the last for > 1 s), and the sum of seconds
        self.latency: dict[str, list[int]] = {}
        self.latency_sum: dict[str, float] = {}
        # Every endpoint's histogram exists from the start, as a labelled child created at
        # start-up would: rate() and absent() see zeros on a fresh pod, not nothing.
        for endpoint in ("mutate", "validate"):
            self.latency[endpoint] = [0] * (len(BUCKETS) + 1)
            self.latency_sum[endpoint] = 0.0

    def request(self, endpoint: str, kind: str, result: str) -> None:
        key = (endpoint, kind, result)
        self.requests[key] = self.requests.get(key, 0) + 1

    def finding(self, rule: str, verdict: str) -> None:
        key = (rule, verdict)
        self.findings[key] = self.findings.get(key, 0) + 1

    def observe(self, endpoint: str, seconds: float) -> None:
        counts = self.latency.get(endpoint)
        if counts is None:
            counts = self.latency[endpoint] = [0] * (len(BUCKETS) + 1)
            self.latency_sum[endpoint] = 0.0
        counts[bisect_left(BUCKETS, seconds)] += 1
        self.latency_sum[endpoint] += seconds

    def collect(self) -> Iterator[CounterMetricFamily | HistogramMetricFamily]:
        requests = CounterMetricFamily(
            "gpu_admission_requests",
            "AdmissionReviews answered, by endpoint, kind and result (allowed, denied, patched, "
            "fast, error).",
            labels=["endpoint", "kind", "result"],
        )
        for labels, value in sorted(self.requests.items()):
            requests.add_metric(list(labels), value)
        yield requests
        findings = CounterMetricFamily(
            "gpu_admission_findings",
            "Rule findings by rule id and verdict (deny, warn, audit); audit: what shadow mode "
            "would deny.",
            labels=["rule", "verdict"],
        )
        for (rule, verdict), value in sorted(self.findings.items()):
            findings.add_metric([rule, verdict], value)
        yield findings
        latency = HistogramMetricFamily(
            "gpu_admission_request_seconds",
            "Time to answer one AdmissionReview, body read to response built.",
            labels=["endpoint"],
        )
        for endpoint, counts in sorted(self.latency.items()):
            cumulative, buckets = 0, []
            for bound, count in zip((*map(str, BUCKETS), "+Inf"), counts, strict=True):
                cumulative += count
                buckets.append((bound, cumulative))
            latency.add_metric([endpoint], buckets, self.latency_sum[endpoint])
        yield latency


TALLY = _Tally()
REGISTRY.register(TALLY)
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


def record(endpoint: str, review: AdmissionRequest, outcome: Outcome) -> None:
    """Count one answered review (its result, and on `/validate` every finding's verdict) and
    log the judged ones.

    A review the fast path answered counts as `fast`; a skipped one (subresource, other
    kinds) is not counted at all.
    """
    kind = review.kind.kind
    if not isinstance(outcome, Decided):
        if isinstance(outcome, Fast):
            TALLY.request(endpoint, kind, "fast")
        return
    decision, subject = outcome.decision, outcome.subject
    if subject is not None:
        _log_decision(review, subject, decision)
    if not decision.allowed:
        result = "denied"
    elif decision.patch:
        result = "patched"
    else:
        result = "allowed"
    TALLY.request(endpoint, kind, result)
    if decision.unreadable is None:
        for j in decision.judged:
            TALLY.finding(j.finding.rule, str(j.verdict))


# A decision log line names this many findings at most, then how many more: it is written on
# the event loop, and a pod of thousands of containers would make it megabytes long.
MAX_LOGGED_FINDINGS = 100


def _log_decision(request: AdmissionRequest, subject: Subject, decision: Decision) -> None:
    """One structured line per judged object: what shadow (audit) mode is read back from."""
    if not decision.judged or not decisions.isEnabledFor(logging.INFO):
        return
    judged = decision.judged[:MAX_LOGGED_FINDINGS]
    more = len(decision.judged) - len(judged)
    namespace = subject.namespace
    name = request.name or subject.name
    kind = request.kind.kind
    allowed = decision.allowed
    verdicts = ", ".join(f"{j.finding.rule}={j.mode}" for j in judged)
    fields: dict[str, object] = {
        "event": "admission",
        "uid": request.uid,
        "kind": kind,
        "namespace": namespace,
        "objectName": name,  # "name" is taken by the LogRecord itself
        "operation": request.operation,
        "dryRun": request.dry_run,
        "allowed": allowed,
        "findings": [
            {"rule": j.finding.rule, "mode": str(j.mode), "field": j.finding.field} for j in judged
        ],
    }
    if more:
        verdicts += f" and {more} more"
        fields["findingsNotShown"] = more
    info_line(
        decisions,
        f"{'allowed' if allowed else 'denied'} {kind} {namespace}/{name}: {verdicts}",
        fields,  # structured: the JSON log format emits them as keys
    )


def watch_cluster_facts(age: Callable[[], float | None], pods: Callable[[], int]) -> None:
    """Gauges read the facts when scraped, so they cost nothing per request."""
    CLUSTER_AGE.set_function(lambda: min(age() or 0.0, 1e9))
    CLUSTER_PODS.set_function(lambda: float(pods()))


def render() -> bytes:
    return generate_latest()
