"""What a pod holds: its GPUs by Kubernetes' own formula, and the GPU products it could use.

Quota, schedulability and the hold an admitted pod takes all count with these functions.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from webhook.engine import claims
from webhook.engine.context import Context
from webhook.engine.podviews import PodView
from webhook.engine.totals import Part, Totals, template_name
from webhook.facts.model import GPU_PRODUCT_LABEL, Facts
from webhook.facts.nodematch import reachable_products
from webhook.podrequest import (
    GPU_MEMORY,
    GPU_MEMORY_LABEL,
    effective_request,
    memory_of,
    per_gpu_scaled,
    shared_gpus,
)
from webhook.quantity import Amount, positive

__all__ = [
    "budget_gpus",
    "hold_reach",
    "object_totals",
    "pod_gpus",
    "pod_product",
    "pod_products",
    "pod_share",
    "required_terms",
    "smallest_gpu_memory",
]


def pod_gpus(pod: PodView) -> dict[str, Amount]:
    """GPUs the pod holds while it runs, by Kubernetes' formula (`podrequest`): regular and
    sidecar containers add up, ordinary init containers run one at a time.

    Worked out once per view and shared: callers read it, never change it."""
    held = pod.gpus_held
    if held is None:
        held = pod.gpus_held = _pod_gpus(pod)
    return held


def _pod_gpus(pod: PodView) -> dict[str, Amount]:
    regular = []
    init = []
    for c in pod.containers:
        if c.ephemeral:
            continue  # ephemeral containers have no resources
        asks = {**c.gpu_requests, **c.gpu_limits}  # limits win: they are what is allocated
        asks = {n: v for n, v in asks.items() if positive(v)}
        if c.init:
            init.append((asks, c.sidecar))
        else:
            regular.append(asks)
    return effective_request(regular, init)


def budget_gpus(pod: PodView, facts: Facts | None) -> dict[str, Amount]:
    """What a GPU budget charges the pod: its GPUs (`pod_gpus`), HAMi's per-GPU units times
    each container's GPU count (`per_gpu_scaled`), and the share of a GPU a sharing scheduler
    gives it by annotation (`pod_share`), on the resource the share is part of. The live
    cache counts running pods the same way (`objects.pod_summary`)."""
    regular = []
    init = []
    scaled = False
    for c in pod.containers:
        if c.ephemeral:
            continue
        asks = {n: v for n, v in {**c.gpu_requests, **c.gpu_limits}.items() if positive(v)}
        more = per_gpu_scaled(asks)
        scaled = scaled or more is not asks
        if c.init:
            init.append((more, c.sidecar))
        else:
            regular.append(more)
    out = effective_request(regular, init) if scaled else dict(pod_gpus(pod))
    share = pod_share(pod, facts)
    if share is not None:
        resource, amount = share
        out[resource] = out.get(resource, 0) + amount
    return out


def pod_share(pod: PodView, facts: Facts | None) -> tuple[str, Amount] | None:
    """(resource, GPUs) a KAI/Run:ai sharing pod takes: `gpu-fraction` times its devices, or
    its `gpu-memory` over the memory of the smallest GPU it could land on (None while no node
    it could reach says its GPU memory). None for a pod that shares no GPU."""
    resource = next((c.shared_gpu for c in pod.containers if c.shared_gpu), "")
    if not resource:
        return None
    memory = smallest_gpu_memory(pod, facts, resource) if GPU_MEMORY in pod.annotations else None
    share = shared_gpus(pod.annotations, memory)
    return (resource, share) if share is not None and positive(share) else None


def smallest_gpu_memory(pod: PodView, facts: Facts | None, resource: str) -> int | None:
    """The least GPU memory (MiB, `nvidia.com/gpu.memory`) among the products the pod could
    land on: a share of memory is the largest share of a GPU there."""
    if facts is None:
        return None
    products = reachable_products(pod.spec, facts.nodes, (resource,))
    sizes = [
        mib
        for node in facts.nodes.pools((GPU_PRODUCT_LABEL, GPU_MEMORY_LABEL))
        if node.labels.get(GPU_PRODUCT_LABEL, "") in products
        and (mib := memory_of(node.labels)) is not None
    ]
    return min(sizes) if sizes else None


def pod_product(pod: PodView) -> str:
    """The GPU product the pod names itself (nodeSelector, or one required In value).

    Only for wording messages: a pod reaches products it does not name (NotIn, Exists,
    instance types, no selector at all), so budgets charge `pod_products` instead.
    """
    selector = pod.spec.get("nodeSelector")
    if isinstance(selector, dict) and isinstance(selector.get(GPU_PRODUCT_LABEL), str):
        return str(selector[GPU_PRODUCT_LABEL])
    values: set[str] = set()
    for term in required_terms(pod):
        for expr in term:
            if expr.get("key") == GPU_PRODUCT_LABEL and expr.get("operator") == "In":
                values.update(v for v in expr.get("values") or [] if isinstance(v, str))
    return values.pop() if len(values) == 1 else ""


def pod_products(
    pod: PodView, facts: Facts | None, candidates: Iterable[str] = ()
) -> frozenset[str]:
    """Every GPU product the pod could land on (`nodematch.reachable_products`).

    `candidates` are products the caller cares about (budgeted ones): those no node carries
    yet (a pool scaled to zero) count unless the pod's product label constraints rule them out.
    """
    nodes = facts.nodes if facts is not None else None
    return reachable_products(pod.spec, nodes, pod_gpus(pod), candidates)


@functools.lru_cache(maxsize=256)
def _shared(products: frozenset[str]) -> tuple[str, ...]:
    """One tuple per distinct product set: holds keep a reference, not a copy each."""
    return tuple(sorted(products))


def hold_reach(pod: PodView, ctx: Context) -> tuple[str, ...]:
    """The budgeted products an admitted pod's hold is charged to until the watch sees it.

    Only products some budget in force caps: no other charge is ever read, and each hold
    stays a few words (one shared tuple).
    """
    budgeted = frozenset(p for budget, _ in ctx.rules.budgets for p in budget.products)
    if not budgeted:
        return ()
    return _shared(pod_products(pod, ctx.facts, budgeted) & budgeted)


def required_terms(pod: PodView) -> list[list[dict[str, Any]]]:
    """matchExpressions of each required node-affinity term (terms are ORed). A term with only
    matchFields is kept as no expressions: it may match any node as far as labels tell."""
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
        if not isinstance(term, dict):
            continue
        exprs = term.get("matchExpressions")
        terms.append([e for e in exprs if isinstance(e, dict)] if isinstance(exprs, list) else [])
    return terms


def object_totals(views: Iterable[PodView], ctx: Context, gang: bool) -> Totals | None:
    """The totals of a controller's GPU templates as budgets count them (`budget_gpus`; DRA
    devices of claims made from templates per device class, an `All` request as 1), and as
    ResourceQuota counts them; None when none asks for a GPU."""
    parts: list[Part] = []
    lead = ""
    gpus: dict[str, Amount] = {}
    counted: dict[str, Amount] = {}
    for view in views:
        if view.isolation_only:
            continue
        devices = claims.device_totals(claims.new_devices(view, ctx), 1)
        per = {**budget_gpus(view, ctx.facts), **devices}
        if not per:
            continue
        lead = lead or view.pointer
        parts.append(Part(template_name(view.field_path), view.replicas, per))
        for name, amount in per.items():
            gpus[name] = gpus.get(name, 0) + amount * view.replicas
        for name, amount in {**pod_gpus(view), **devices}.items():
            counted[name] = counted.get(name, 0) + amount * view.replicas
    if not parts:
        return None
    return Totals(lead, gpus, tuple(parts), gang, None if counted == gpus else counted)
