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


def _choices(allowed: list[str], ctx: Context) -> str:
    """The classes a pod may switch to: allowed, and (when the cluster is known) existing, so
    the Fix never names a class that would be denied next for not existing."""
    facts, _ = trusted_facts(ctx)
    if facts is None:
        return f"one of: {', '.join(allowed)}"
    existing = [c for c in allowed if facts.priority_class(c) is not None]
    if existing:
        return f"one of: {', '.join(existing)}"
    return ""


def _none_exist(field: str, allowed: list[str]) -> str:
    return (
        f"none of the allowed classes ({', '.join(allowed)}) exists in the cluster, so no value "
        f"of {field} is admitted yet: ask the platform team to create one of them, or to allow "
        "a class that exists"
    )


def gpu_priority_class(pod: PodView, ctx: Context) -> Iterator[Finding]:
    """The allowed list and the system-class guard need no facts and run without them (an
    offline audit, `rules test` without a snapshot); whether the class exists needs the
    cluster, and without facts at all it is left unjudged."""
    cfg = ctx.settings.gpu_priority_class
    name = pod.spec.get("priorityClassName") or ""
    field = f"{pod.field_path}.priorityClassName"
    allowed = cfg.allowed_classes
    choices = _choices(allowed, ctx) if allowed else ""
    to = f"set {field} to {choices}" if choices else _none_exist(field, allowed)
    if not name:
        if allowed:
            yield Finding(
                rule=RULE,
                summary=f"{RULE}: GPU pod names no priorityClassName; expected one of "
                + ", ".join(allowed),
                fix=to,
                field=field,
            )
        return
    if name.startswith("system-"):
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: priorityClassName {name!r} is reserved for system components",
            fix=(
                (to if allowed else f"set {field} to a non-system class")
                + "; system classes would let GPU jobs preempt cluster-critical pods"
            ),
            field=field,
        )
        return
    if allowed and name not in allowed:
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: priorityClassName {name!r} is not allowed in {ctx.namespace}",
            fix=to,
            field=field,
        )
        return
    if ctx.facts is None:
        return  # offline: whether the class exists is not known, and not judged
    facts, reason = trusted_facts(ctx)
    if facts is None:
        yield unknown_facts(RULE, cfg.when_unknown, reason, field)
        return
    if facts.priority_class(name) is None:
        existing = sorted(
            pc.name for pc in facts.priority_classes.values() if not pc.name.startswith("system-")
        )
        if allowed:
            existing = [c for c in allowed if facts.priority_class(c) is not None]
        fix = (
            f"set {field} to an existing class: {', '.join(existing)}"
            if existing
            else (_none_exist(field, allowed) if allowed else f"create PriorityClass {name}")
        )
        yield Finding(
            rule=RULE,
            summary=f"{RULE}: priorityClassName {name!r} does not exist in the cluster",
            fix=fix,
            field=field,
        )
