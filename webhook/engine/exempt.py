"""Which exemption covers a pod spec, and what it relaxes (`webhook.ruleset.relaxing`).

A whole exempt namespace is decided before any pod spec is read (`pipeline._scope`); this
module decides for each pod spec of a judged namespace. What an exemption relaxes follows
from who can claim it: a listed service account skips everything (the platform team lists
it, and every pod of its namespace may name it); a pod's labels relax only the rules about
the pod's own shape and hygiene.
"""

from __future__ import annotations

import dataclasses

from webhook.engine.compiled import CompiledRuleSet
from webhook.engine.podviews import PodView
from webhook.ruleset.relaxing import BY_LABEL

__all__ = ["scoped"]


def scoped(view: PodView, namespace: str, rules: CompiledRuleSet) -> PodView | None:
    """The view as exemptions leave it: None when exempt from everything, else with the rules
    an exemption relaxes in `relaxed`."""
    if rules.exempt_accounts is not None and rules.exempt_account(
        namespace, view.spec.get("serviceAccountName") or "default"
    ):
        return None
    relaxed: frozenset[str] = frozenset()
    if rules.exempt_pods is not None and rules.exempt_pods.matches(view.labels):
        relaxed = BY_LABEL
    if relaxed:
        return dataclasses.replace(view, relaxed=view.relaxed | relaxed)
    return view
