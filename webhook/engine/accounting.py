"""What a pod holds: its GPUs by Kubernetes' own formula, and the GPU product it pins itself to.

Quota, schedulability and the hold an admitted pod takes all count with these functions.
"""

from __future__ import annotations

from collections import defaultdict
from fractions import Fraction
from typing import Any

from webhook.engine.podviews import PodView
from webhook.facts.model import GPU_PRODUCT_LABEL

__all__ = ["pod_gpus", "pod_product", "required_terms"]


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
