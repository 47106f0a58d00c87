"""Shared by the cluster-aware rules: whether the facts can be trusted, and what a pod holds."""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Any

from webhook.cluster import GPU_PRODUCT_LABEL, ClusterFacts
from webhook.context import Context
from webhook.findings import Finding
from webhook.podviews import PodView

__all__ = ["pod_gpus", "pod_product", "required_terms", "trusted_facts", "unknown_facts"]


def trusted_facts(ctx: Context) -> tuple[ClusterFacts | None, str]:
    """The facts, or None and why they can't be used (absent, or older than allowed)."""
    if ctx.cluster is None:
        return None, "no cluster facts (give --cluster-snapshot, or run in a cluster)"
    age = ctx.cluster.age_seconds()
    limit = ctx.ruleset.cluster.max_staleness_seconds
    if age is not None and age > limit:
        return None, f"cluster facts are {int(age)}s old (limit {limit}s; API server unreachable?)"
    return ctx.cluster, ""


def unknown_facts(rule: str, when_unknown: str, reason: str, field: str) -> Finding:
    """A rule that could not judge says so: never a silent pass. `allow` makes it advisory."""
    return Finding(
        rule=rule,
        summary=f"{rule}: not checked: {reason}",
        fix=(
            "nothing to change in the object; the webhook could not read the cluster"
            if when_unknown == "allow"
            else "retry when the webhook can read the cluster again (whenUnknown: deny)"
        ),
        field=field,
        advisory=when_unknown == "allow",
    )


def pod_gpus(pod: PodView) -> dict[str, Fraction]:
    """GPUs the pod holds while it runs: containers add up, init containers run one at a time.

    The same max(sum(containers), max(init containers)) the scheduler uses for requests.
    """
    total: dict[str, Fraction] = defaultdict(Fraction)
    init_peak: dict[str, Fraction] = defaultdict(Fraction)
    for c in pod.containers:
        asks = {**c.gpu_requests, **c.gpu_limits}  # limits win: they are what is allocated
        for name, value in asks.items():
            if value <= 0:
                continue
            if c.init:
                init_peak[name] = max(init_peak[name], value)
            else:
                total[name] += value
    return {
        n: max(total.get(n, Fraction(0)), init_peak.get(n, Fraction(0)))
        for n in set(total) | set(init_peak)
    }


def pod_product(pod: PodView) -> str:
    """The GPU product the pod pins itself to (nodeSelector, or one required In value)."""
    selector = pod.spec.get("nodeSelector")
    if isinstance(selector, dict) and isinstance(selector.get(GPU_PRODUCT_LABEL), str):
        return str(selector[GPU_PRODUCT_LABEL])
    values: set[str] = set()
    for term in required_terms(pod):
        for expr in term:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                values.update(v for v in expr.get("values") or [] if isinstance(v, str))
    return values.pop() if len(values) == 1 else ""


def required_terms(pod: PodView) -> list[list[dict[str, Any]]]:
    """matchExpressions of each required node-affinity term (terms are ORed)."""
    affinity = pod.spec.get("affinity")
    if not isinstance(affinity, dict):
        return []
    node = affinity.get("nodeAffinity")
    if not isinstance(node, dict):
        return []
    required = node.get("requiredDuringSchedulingIgnoredDuringExecution")
    if not isinstance(required, dict) or not isinstance(required.get("nodeSelectorTerms"), list):
        return []
    terms = []
    for term in required["nodeSelectorTerms"]:
        if isinstance(term, dict) and isinstance(term.get("matchExpressions"), list):
            terms.append([e for e in term["matchExpressions"] if isinstance(e, dict)])
    return terms
