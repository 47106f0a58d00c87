"""What each exemption of a rule set relaxes, and whom it trusts: `rules check` says it, so a
platform team sees what a line in `exemptions` hands out before it ships."""

from __future__ import annotations

from webhook.ruleset.models import RuleSet
from webhook.ruleset.relaxing import BY_LABEL, describe

__all__ = ["exemption_notes"]


def _names(items: list[str], most: int = 6) -> str:
    shown = ", ".join(items[:most])
    return shown + (f" and {len(items) - most} more" if len(items) > most else "")


def exemption_notes(rs: RuleSet) -> list[str]:
    """One line per kind of exemption the rule set uses (the built-in ones included)."""
    ex = rs.exemptions
    out = []
    if ex.namespaces:
        out.append(
            f"exemptions.namespaces ({_names(ex.namespaces)}): nothing in them is changed or "
            "judged; list only namespaces no tenant can create or run pods in"
        )
    if ex.namespace_selector is not None:
        out.append(
            f"exemptions.namespaceSelector ({ex.namespace_selector.describe()}): nothing in a "
            "namespace with these labels is changed or judged; whoever may label a namespace "
            "claims it"
        )
    if ex.service_accounts:
        out.append(
            f"exemptions.serviceAccounts ({_names(ex.service_accounts)}): pods naming them are "
            "neither changed nor judged; any pod of those namespaces may name one (using an "
            "account needs no grant), so list only namespaces where only the platform team "
            "creates pods"
        )
    if ex.pod_selector is not None:
        out.append(
            "exemptions.podSelector relaxes only the rules about the pod's own shape and "
            f"hygiene ({describe(BY_LABEL)}): a pod's author sets its labels, so GPU access, "
            "budgets, ResourceQuotas, priority and schedulability are judged as for any pod"
        )
    return out
