"""Priority classes of GPU pods: from the allowed list, never system-*, and one that exists.

Injecting a default class must also set `spec.priority` and `spec.preemptionPolicy` on pods:
the built-in Priority admission plugin ran before the webhooks, filled both from the old
(empty) class, and validates afterwards that they agree with the class named.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from webhook.engine.checks.trust import trusted_facts, unknown_facts
from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.engine.podviews import PodView

__all__ = ["gpu_priority_class", "inject_priority_class"]

RULE = "gpu-priority-class"


def inject_priority_class(spec: dict[str, Any], pod: PodView, ctx: Context) -> bool:
    """Name the default class on GPU pods that name none, when the class is known to exist."""
    cfg = ctx.settings.gpu_priority_class
    if not cfg.default_class or spec.get("priorityClassName"):
        return False
    facts, _ = trusted_facts(ctx)
    known = facts.priority_class(cfg.default_class) if facts is not None else None
    if known is None:
        return False  # the validation says why; a class that may not exist is never injected
    spec["priorityClassName"] = known.name
    if pod.kind == "Pod":
        spec["priority"] = known.value
        spec["preemptionPolicy"] = known.preemption_policy
    return True


def gpu_priority_class(pod: PodView, ctx: Context) -> Iterator[Finding]:
    cfg = ctx.settings.gpu_priority_class
    name = pod.spec.get("priorityClassName") or ""
    field = f"{pod.field_path}.priorityClassName"
    allowed = cfg.allowed_classes
    if not name:
        if allowed:
            yield Finding(
                rule=RULE,
                summary=f"{RULE}: GPU pod names no priorityClassName; expected one of "
                + ", ".join(allowed),
                fix=f"set {field} to one of: {', '.join(allowed)}",
                field=field,
            )
        return
    if name.startswith("system-"):
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: priorityClassName {name!r} is reserved for system components",
            fix=(
                f"set {field} to "
                + (f"one of: {', '.join(allowed)}" if allowed else "a non-system class")
                + "; system classes would let GPU jobs preempt cluster-critical pods"
            ),
            field=field,
        )
        return
    if allowed and name not in allowed:
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: priorityClassName {name!r} is not allowed in {ctx.namespace}",
            fix=f"set {field} to one of: {', '.join(allowed)}",
            field=field,
        )
        return
    facts, reason = trusted_facts(ctx)
    if facts is None:
        yield unknown_facts(RULE, cfg.when_unknown, reason, field)
        return
    if facts.priority_class(name) is None:
        existing = sorted(
            pc.name for pc in facts.priority_classes.values() if not pc.name.startswith("system-")
        )
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: priorityClassName {name!r} does not exist in the cluster",
            fix=f"set {field} to an existing class: {', '.join(existing) or '(none defined)'}",
            field=field,
        )
