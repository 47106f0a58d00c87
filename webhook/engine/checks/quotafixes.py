"""gpu-quota's Fix texts: how a pod over a budget or a ResourceQuota gets under it.

Each says what the person whose `kubectl apply` failed can change (pin another product, ask
for less, wait, free GPUs) before asking the platform team to raise the cap, and never to
"ask for at most 0".
"""

from __future__ import annotations

from webhook.engine import claims
from webhook.engine.accounting import pod_product
from webhook.engine.podviews import PodView
from webhook.facts.model import GPU_PRODUCT_LABEL
from webhook.quantity import Amount, show
from webhook.ruleset.models import QuotaBudget

__all__ = ["already_over", "budget_fix", "devices_fix"]


def budget_fix(
    pod: PodView,
    namespace: str,
    budget: QuotaBudget,
    name: str,
    product: str,
    used: Amount,
    cap: Amount,
    where: str,
    others: list[str],
    devices: list[claims.NewDevices],
    several: bool,
) -> str:
    """How to get under one cap of `budget`: a product's (`others`: products to pin instead),
    a DRA class's, or a resource's. `where` names the namespaces whose pods hold the GPUs;
    `several`: the budget spans several namespaces, so the budget is what is over."""
    if product:
        return _product_fix(pod, product, name, used, cap, budget, others, where)
    left = cap - used if cap > used else 0
    raise_it = f"ask the platform team to raise budget {budget.name!r}"
    device_class = claims.class_of_key(name)
    if device_class:
        return devices_fix(devices, device_class, left, namespace) + f", or {raise_it}"
    if left > 0:
        return (
            f"ask for at most {show(left)} {name}, wait for running GPU pods in {where} to "
            f"finish, or {raise_it}"
        )
    subject = f"budget {budget.name!r}" if several else f"namespace {namespace}"
    return already_over(subject, used, cap, name, where, f"budget {budget.name!r}")


def _product_fix(
    pod: PodView,
    product: str,
    name: str,
    used: Amount,
    cap: Amount,
    budget: QuotaBudget,
    others: list[str],
    where: str,
) -> str:
    """How to get past a product cap: pin another product, ask less, wait, or raise it.

    A pod that never named the product is told why the cap applies to it at all.
    """
    scope = f"{name} on {product}"
    left = cap - used if cap > used else 0
    node = pod.spec.get("nodeName")
    pin = ""
    if node:
        pin = f"set {pod.field_path}.nodeName to a node of another product, or "
    elif others:
        more = f" (or {', '.join(others[1:4])})" if len(others) > 1 else ""
        pin = (
            f"set {pod.field_path}.nodeSelector {GPU_PRODUCT_LABEL}: {others[0]}{more} to run "
            "elsewhere, or "
        )
    if left > 0:
        rest = (
            f"{pin}ask for at most {show(left)} {scope}, wait for running GPU pods in "
            f"{where} to finish, or ask the platform team to raise budget {budget.name!r}"
        )
    else:  # nothing left to ask for: asking less leads nowhere
        rest = pin + already_over(
            f"budget {budget.name!r}", used, cap, scope, where, f"budget {budget.name!r}"
        )
    if node:
        why = f"the pod names node {node} ({GPU_PRODUCT_LABEL}: {product})"
    elif pod_product(pod) != product:
        why = (
            f"the pod could be scheduled onto {product} (its nodeSelector and required node "
            "affinity allow nodes of that product)"
        )
    else:
        return rest
    return f"{why}, so that product's cap applies. {rest[0].upper()}{rest[1:]}"


def already_over(
    subject: str, used: Amount, cap: Amount, scope: str, where: str, limit: str
) -> str:
    """The Fix for a namespace with nothing left: it is told it is already over (or at) the
    cap and how to get under it, never to "ask for at most 0"."""
    state = "over" if used > cap else "at"
    return (
        f"{subject} is already {state} the cap (uses {show(used)} of {show(cap)} {scope}): free "
        f"GPUs in {where} (end or scale down GPU pods there) or ask the platform team to raise "
        f"{limit}"
    )


def devices_fix(
    devices: list[claims.NewDevices], device_class: str, left: Amount, namespace: str
) -> str:
    """Where a class's devices come from and how to ask for fewer (a sentence, capitalised)."""
    mine = [d for d in devices if d.device_class == device_class]
    where = "; ".join(d.describe() for d in mine)
    lower = ", ".join(
        f"spec.spec.devices.requests[{d.index}] of ResourceClaimTemplate {d.template}" for d in mine
    )
    if left <= 0:
        return (
            f"{where[0].upper()}{where[1:]}. None of class {device_class} is left in "
            f"{namespace}: release claims of {device_class} devices there (end the pods "
            "that hold them)"
        )
    return (
        f"{where[0].upper()}{where[1:]}. Ask for at most {show(left)} device(s) of class "
        f"{device_class} in all (the count in {lower}), or wait for claims of {device_class} "
        f"devices in {namespace} to be released"
    )
