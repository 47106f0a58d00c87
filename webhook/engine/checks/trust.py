"""Cluster-aware rules and facts they cannot trust: absent, or older than the rules allow."""

from __future__ import annotations

from webhook.engine.context import Context
from webhook.engine.findings import Finding
from webhook.facts.model import Facts

__all__ = ["trusted_facts", "unknown_facts"]


def trusted_facts(ctx: Context) -> tuple[Facts | None, str]:
    """The facts, or None and why they can't be used (absent, or older than allowed)."""
    if ctx.facts is None:
        return None, "no cluster facts (give --cluster-snapshot, or run in a cluster)"
    age = ctx.facts.age_seconds
    limit = ctx.rules.max_staleness_seconds
    if age is not None and age > limit:
        return None, f"cluster facts are {int(age)}s old (limit {limit}s; API server unreachable?)"
    return ctx.facts, ""


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
