"""The ResourceQuotas that let the apiserver keep the budgets it can (`ruleset.quotas`).

Written beside the policies: deterministic, labelled as generated, one per budget over exactly
one namespace, with `requests.<resource>` for device-plugin GPUs (never `limits.`, which a
ResourceQuota accepts and never enforces for extended resources) and
`<class>.deviceclass.resource.k8s.io/devices` for DRA classes (Kubernetes 1.34+). Existing
ResourceQuotas are never touched: these have names of their own.
"""

from __future__ import annotations

from typing import Any

from webhook.export.scope import GROUP_SUFFIX, LABELS, SOURCE_ANNOTATION
from webhook.ruleset.models import RuleSet
from webhook.ruleset.quotas import budget_plans

__all__ = ["BUDGET_ANNOTATION", "resource_quotas"]

BUDGET_ANNOTATION = f"{GROUP_SUFFIX}/budget"  # the rule set's budget a quota enforces


def resource_quotas(rules: RuleSet) -> list[dict[str, Any]]:
    """One ResourceQuota for each budget the apiserver can enforce, in budget order."""
    out = []
    for plan in budget_plans(rules):
        if not plan.hard or plan.quota is None or plan.namespace is None:
            continue
        out.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {
                    "name": plan.quota,
                    "namespace": plan.namespace,
                    "labels": dict(LABELS),
                    "annotations": {
                        BUDGET_ANNOTATION: plan.budget,
                        SOURCE_ANNOTATION: f"rules.gpu-quota.budgets[{plan.budget}]",
                    },
                },
                "spec": {"hard": {k: str(v) for k, v in sorted(plan.hard.items())}},
            }
        )
    return out
