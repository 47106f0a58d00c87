"""What each exemption of a rule set relaxes, and whom it trusts: `rules check` says it, so a
platform team sees what a line in `exemptions` hands out before it ships."""

from __future__ import annotations

from webhook.ruleset.components import CLUSTER_NAMESPACES
from webhook.ruleset.models import RuleSet
from webhook.ruleset.relaxing import BY_COMPONENT, BY_LABEL, describe

__all__ = ["exemption_notes", "partial_exemptions"]


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
    if ex.built_in:
        components = ex.components
        namespaces = [n for c in components for n in c.namespaces]
        out.append(
            "built-in exemptions (exemptions.builtIn): "
            f"{', '.join(n for n in ex.all_namespaces if n in CLUSTER_NAMESPACES)} whole; in "
            f"{len(namespaces)} GPU component namespaces ({_names(namespaces, 4)}) only "
            f"{describe(BY_COMPONENT)}, only for the components' own service accounts and "
            "DaemonSets. Where tenants may create namespaces, a tenant can make one of these "
            "names: set exemptions.builtIn: false and exempt the components by "
            "exemptions.workloads"
        )
    if ex.workloads:
        named = [f"DaemonSet {w.namespace}/{w.name}" for w in ex.workloads]
        out.append(
            f"exemptions.workloads ({_names(named)}) relax only {describe(BY_COMPONENT)}, for "
            "the DaemonSets and the pods the DaemonSet controller creates for them; this trusts "
            "whoever may create or update DaemonSets in those namespaces"
        )
    if ex.pod_selector is not None:
        out.append(
            "exemptions.podSelector relaxes only the rules about the pod's own shape and "
            f"hygiene ({describe(BY_LABEL)}): a pod's author sets its labels, so GPU access, "
            "budgets, ResourceQuotas, priority and schedulability are judged as for any pod"
        )
    return out


def partial_exemptions(rs: RuleSet, namespace: str) -> list[str]:
    """What relaxes rules for some pods of `namespace` (`rules explain`)."""
    ex = rs.exemptions
    relaxed = describe(BY_COMPONENT)
    out = []
    for c in ex.components:
        if namespace in c.namespaces:
            whose = [f"service accounts {', '.join(c.accounts)}"] if c.accounts else []
            whose += [f"the pods of DaemonSets {', '.join(c.daemonsets)}"] if c.daemonsets else []
            out.append(
                f"the built-in exemption for {c.name} relaxes {relaxed} for its own pods "
                f"({'; '.join(whose)}); everything else is judged"
            )
    for w in ex.workloads:
        if w.namespace == namespace:
            out.append(
                f"exemptions.workloads relaxes {relaxed} for DaemonSet {w.name} and the pods "
                "its controller creates; everything else is judged"
            )
    return out
